"""Transaction markers written by this broker's own transaction coordinator.

On one node a WriteTxnMarkers "RPC" is a local call: append a COMMIT/ABORT control batch to
each partition of the transaction, and for ``__consumer_offsets`` partitions let the group
coordinator materialise (or drop) the offsets the transaction committed. In a cluster this
becomes an RPC to each partition's leader behind the same interface.

In a cluster (``replication`` given) a marker is appended as Kafka's
KafkaApis.handleWriteTxnMarkersRequest does, with ``requiredAcks=-1``: NOT_ENOUGH_REPLICAS
before the append when the partition's ISR is below ``min.insync.replicas``, and the
partition is answered only once the high watermark passed the marker (else the acks=all
error: NOT_ENOUGH_REPLICAS_AFTER_APPEND, REQUEST_TIMED_OUT, NOT_LEADER_OR_FOLLOWER), so the
coordinator logs CompleteCommit/CompleteAbort only for markers a new leader will have, and
retries the others (a repeated marker ends nothing: the transaction is no longer open). The
group coordinator materialises a transaction's offsets only for markers so acknowledged
(Kafka calls its onTransactionCompleted from the acks=-1 callback). On one node nothing
waits.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from oncelog.broker.partitions import PartitionRegistry
from oncelog.errors import ErrorCode, KafkaError
from oncelog.faults import crash_point
from oncelog.internal_topics import OFFSETS_TOPIC

if TYPE_CHECKING:
    from oncelog.broker.cluster.replica_manager import ReplicaManager
    from oncelog.broker.partition import Partition
    from oncelog.coordinator.group.coordinator import GroupCoordinator

log = logging.getLogger(__name__)

# The client id a broker sends WriteTxnMarkers with (``oncelog.broker.cluster.markers``):
# the receiving broker accepts COMMIT markers only from a live broker of its image.
BROKER_CLIENT_PREFIX = "oncelog-broker-"
# How long a marker waits for the ISR (Kafka uses request.timeout.ms): below the 30 s a
# coordinator on another broker waits for its WriteTxnMarkers answer
# (``oncelog.broker.cluster.markers``), so a slow ISR is answered REQUEST_TIMED_OUT (retried)
# rather than timing out the request and dropping the connection.
MARKER_ACKS_TIMEOUT_MS = 15_000


def broker_client_id(node_id: int) -> str:
    return f"{BROKER_CLIENT_PREFIX}{node_id}"


def sender_broker(client_id: str | None) -> int | None:
    """The node id a broker's client id names (None for any other client id)."""
    if not client_id or not client_id.startswith(BROKER_CLIENT_PREFIX):
        return None
    suffix = client_id[len(BROKER_CLIENT_PREFIX):]
    return int(suffix) if suffix.isdigit() else None


class LocalMarkerWriter:
    def __init__(
        self,
        registry: PartitionRegistry,
        groups: GroupCoordinator,
        replication: ReplicaManager | None = None,
        acks_timeout_ms: int = MARKER_ACKS_TIMEOUT_MS,
    ) -> None:
        self.registry = registry
        self.groups = groups
        self.replication = replication
        self.acks_timeout_ms = acks_timeout_ms

    async def write_markers(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        partitions: list[tuple[str, int]],
    ) -> dict[tuple[str, int], ErrorCode]:
        what = "COMMIT" if commit else "ABORT"
        results: dict[tuple[str, int], ErrorCode] = {}
        appended: list[tuple[Partition, int]] = []  # (partition, the offset after its marker)
        for topic, index in partitions:
            partition = self.registry.find(topic, index)
            if partition is None:
                results[(topic, index)] = ErrorCode.unknown_topic_or_partition
                continue
            try:
                if self.replication is not None:
                    self.replication.check_min_isr(partition, -1)
                offset = partition.append_marker(
                    producer_id, producer_epoch, coordinator_epoch, commit
                )
            except KafkaError as exc:
                code = exc.code
                if code is ErrorCode.invalid_producer_epoch and not partition.has_open_transaction(
                    producer_id
                ):
                    # The partition knows a newer epoch and holds nothing of this producer
                    # open: there is nothing for this marker to end (Kafka's coordinator
                    # stops on this answer). With a transaction still open, the code stays
                    # and the coordinator retries: that partition never counts as marked.
                    code = ErrorCode.none
                log.warning(
                    "%s marker for producer %d epoch %d on %s-%d refused: %s (%s)",
                    what, producer_id, producer_epoch, topic, index, exc,
                    "no open transaction there: done" if code is ErrorCode.none
                    else "will be retried",
                )
                results[(topic, index)] = code
                continue
            log.debug(
                "%s marker for producer %d epoch %d at %s-%d offset %d",
                what, producer_id, producer_epoch, topic, index, offset,
            )
            appended.append((partition, offset + 1))
            if len(partitions) > 1:
                crash_point("markers.after_first")
        acks = await self._wait_for_isr(appended)
        for (partition, end), code in zip(appended, acks, strict=True):
            results[(partition.topic, partition.index)] = code
            if code is not ErrorCode.none:
                log.info("%s marker for producer %d epoch %d on %s (ending at %d) not "
                         "acknowledged by the ISR: %s; will be retried", what, producer_id,
                         producer_epoch, partition.name, end, code.name)
            elif partition.topic == OFFSETS_TOPIC:
                self.groups.on_txn_marker(partition.index, producer_id, commit, producer_epoch)
        return {tp: results[tp] for tp in partitions if tp in results}

    async def _wait_for_isr(self, appended: list[tuple[Partition, int]]) -> list[ErrorCode]:
        """The acks=-1 wait of each appended marker (NONE for all at once on one node)."""
        if self.replication is None or not appended:
            return [ErrorCode.none] * len(appended)
        return await self.replication.wait_for_all_acks(appended, self.acks_timeout_ms)
