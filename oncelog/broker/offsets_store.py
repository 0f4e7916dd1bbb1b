"""The group coordinator's store: key/value records in ``__consumer_offsets`` partitions."""

from __future__ import annotations

from collections.abc import Iterator

from oncelog.broker.partitions import PartitionRegistry
from oncelog.clock import Clock
from oncelog.errors import ErrorCode, KafkaError
from oncelog.records.codec import RecordInput, iter_records
from oncelog.records.codec import encode_batch as encode_records
from oncelog.records.validate import validate_batches

READ_CHUNK = 4 * 1024 * 1024


class LogOffsetsStore:
    """Appends and replays records of an internal topic through the partition logs."""

    def __init__(self, registry: PartitionRegistry, topic: str, clock: Clock) -> None:
        self.registry = registry
        self.topic = topic
        self.clock = clock

    @property
    def num_partitions(self) -> int:
        return self.registry.topics[self.topic].partitions

    def append(self, partition: int, records: list[tuple[bytes, bytes | None]]) -> None:
        if not records:
            return
        now = self.clock.now_ms()
        batch = bytearray(
            encode_records([RecordInput(key=k, value=v, timestamp=now) for k, v in records])
        )
        headers = validate_batches(batch, max_batch_bytes=2**31 - 1)
        target = self.registry.get(self.topic, partition)
        target.append(batch, headers, None)
        if target.log.config.flush_messages <= 1:
            target.log.flush()

    def read(self, partition: int) -> Iterator[tuple[bytes, bytes | None]]:
        target = self.registry.get(self.topic, partition)
        plog = target.log
        offset = plog.log_start_offset
        end = plog.log_end_offset
        while offset < end:
            result = plog.read(offset, READ_CHUNK, max_offset=end)
            if not result.data:
                break
            progressed = False
            for header, records in iter_records(result.data):
                for record in records:
                    if record.offset >= offset and record.key is not None:
                        yield record.key, record.value
                if header.next_offset > offset:
                    offset = header.next_offset
                    progressed = True
            if not progressed:
                raise KafkaError(ErrorCode.corrupt_message, f"no progress reading {self.topic}")
