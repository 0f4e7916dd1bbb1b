"""The store of both internal topics: key/value records over the partitions of
``__consumer_offsets`` (for the group coordinator) and ``__transaction_state`` (for the
transaction coordinator), written and read through the partition interface only.

Appends go through the partition's normal append path, as AppendOrigin.COORDINATOR (so
producer state sees transactional offset commits as open transactions that a marker later
ends); replays read everything from the log start to the log end (as Kafka's coordinators
load up to the log end offset: a new leader's high watermark may still lag records the old
leader had acknowledged; on one node both are the same), open and aborted transactions and
markers included, because the coordinators rebuild their own view of pending and decided
state. ``high_watermark`` tells the transaction coordinator when the in-sync replicas hold
all it replayed (it serves a loaded partition only then).

In cluster mode a write is Kafka's appendRecords with ``requiredAcks=-1``: ``append``
refuses it with NOT_ENOUGH_REPLICAS when the ISR is already below the topic's
``min.insync.replicas`` and returns the offset the ISR must reach; ``wait_for_isr`` is the
acks=all wait of a produce (``ReplicaManager.wait_for_acks``: the high watermark reaches the
offset, NOT_ENOUGH_REPLICAS_AFTER_APPEND, REQUEST_TIMED_OUT, NOT_LEADER_OR_FOLLOWER). On a
single node (no replication) it answers NONE at once, without suspending.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from oncelog.broker.partitions import PartitionRegistry
from oncelog.clock import Clock
from oncelog.coordinator.group.store import StoredRecord
from oncelog.errors import ErrorCode, KafkaError
from oncelog.records.batch import parse_header
from oncelog.records.codec import RecordInput, iter_records
from oncelog.records.codec import encode_batch as encode_records
from oncelog.records.control import decode_control
from oncelog.storage.engine import AppendOrigin
from oncelog.storage.verification import SENTINEL, VerificationGuard

if TYPE_CHECKING:
    from oncelog.broker.cluster.replica_manager import ReplicaManager

READ_CHUNK = 4 * 1024 * 1024


class InternalTopicStore:
    """Appends and replays key/value records of one internal topic."""

    def __init__(
        self,
        registry: PartitionRegistry,
        topic: str,
        clock: Clock,
        replication: ReplicaManager | None = None,
    ) -> None:
        self.registry = registry
        self.topic = topic
        self.clock = clock
        self.replication = replication

    @property
    def num_partitions(self) -> int:
        return self.registry.topics[self.topic].partitions

    def append(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> int:
        """Append to the local log; the offset the in-sync replicas must reach."""
        return self._append(partition, records)

    def append_transactional(
        self,
        partition: int,
        records: list[tuple[bytes, bytes | None]],
        producer_id: int,
        producer_epoch: int,
        verification_guard: VerificationGuard = SENTINEL,
    ) -> int:
        return self._append(
            partition, records, producer_id=producer_id, producer_epoch=producer_epoch,
            verification_guard=verification_guard,
        )

    def maybe_start_transaction_verification(
        self, partition: int, producer_id: int, producer_epoch: int
    ) -> VerificationGuard:
        target = self.registry.get(self.topic, partition)
        return target.maybe_start_transaction_verification(producer_id, producer_epoch)

    async def wait_for_isr(
        self, partition: int, required_offset: int, timeout_ms: int
    ) -> ErrorCode:
        """Wait until the in-sync replicas hold ``required_offset`` (module docstring)."""
        if self.replication is None:
            return ErrorCode.none
        target = self.registry.get(self.topic, partition)
        return await self.replication.wait_for_acks(target, required_offset, timeout_ms)

    def _append(
        self,
        partition: int,
        records: list[tuple[bytes, bytes | None]],
        *,
        producer_id: int = -1,
        producer_epoch: int = -1,
        verification_guard: VerificationGuard = SENTINEL,
    ) -> int:
        target = self.registry.get(self.topic, partition)
        if not records:
            return target.log_end_offset
        now = self.clock.now_ms()
        batch = bytearray(
            encode_records(
                [RecordInput(key=k, value=v, timestamp=now) for k, v in records],
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                transactional=producer_id >= 0,
            )
        )
        # Built here, whole and sealed: its header needs no validation pass.
        headers = [parse_header(batch)]
        if self.replication is not None:
            self.replication.check_min_isr(target, -1)
        result = target.append(batch, headers, origin=AppendOrigin.COORDINATOR,
                               verification_guard=verification_guard)
        if target.config.flush_messages <= 1:
            target.flush()
        return result.last_offset + 1

    def log_end_offset(self, partition: int) -> int:
        return self.registry.get(self.topic, partition).log_end_offset

    def high_watermark(self, partition: int) -> int:
        return self.registry.get(self.topic, partition).high_watermark

    def read(self, partition: int) -> Iterator[tuple[bytes, bytes | None]]:
        for record in self.read_records(partition):
            if record.control is None and record.key is not None:
                yield record.key, record.value

    def read_records(self, partition: int) -> Iterator[StoredRecord]:
        source = self.registry.get(self.topic, partition)
        offset = source.log_start_offset
        end = source.log_end_offset
        while offset < end:
            result = source.read(offset, READ_CHUNK, upto_log_end=True)
            if not result.data:
                break
            progressed = False
            for header, records in iter_records(result.data):
                for record in records:
                    if record.offset < offset:
                        continue
                    if header.is_control:
                        try:
                            control, _ = decode_control(record)
                        except KafkaError:
                            continue
                        yield StoredRecord(
                            record.key, record.value, header.producer_id,
                            header.is_transactional, int(control), header.producer_epoch,
                        )
                    else:
                        yield StoredRecord(
                            record.key, record.value, header.producer_id,
                            header.is_transactional, None, header.producer_epoch,
                        )
                if header.next_offset > offset:
                    offset = header.next_offset
                    progressed = True
            if not progressed:
                raise KafkaError(ErrorCode.corrupt_message, f"no progress reading {self.topic}")
