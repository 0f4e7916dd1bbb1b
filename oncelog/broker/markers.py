"""Transaction markers written by this broker's own transaction coordinator.

On one node a WriteTxnMarkers "RPC" is a local call: append a COMMIT/ABORT control batch to
each partition of the transaction, and for ``__consumer_offsets`` partitions let the group
coordinator materialise (or drop) the offsets the transaction committed. In a cluster this
becomes an RPC to each partition's leader behind the same interface.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from oncelog.broker.partitions import PartitionRegistry
from oncelog.errors import ErrorCode, KafkaError
from oncelog.faults import crash_point
from oncelog.internal_topics import OFFSETS_TOPIC

if TYPE_CHECKING:
    from oncelog.coordinator.group.coordinator import GroupCoordinator

log = logging.getLogger(__name__)

# The client id a broker sends WriteTxnMarkers with (``oncelog.broker.cluster.markers``):
# the receiving broker accepts COMMIT markers only from a live broker of its image.
BROKER_CLIENT_PREFIX = "oncelog-broker-"


def broker_client_id(node_id: int) -> str:
    return f"{BROKER_CLIENT_PREFIX}{node_id}"


def sender_broker(client_id: str | None) -> int | None:
    """The node id a broker's client id names (None for any other client id)."""
    if not client_id or not client_id.startswith(BROKER_CLIENT_PREFIX):
        return None
    suffix = client_id[len(BROKER_CLIENT_PREFIX):]
    return int(suffix) if suffix.isdigit() else None


class LocalMarkerWriter:
    def __init__(self, registry: PartitionRegistry, groups: GroupCoordinator) -> None:
        self.registry = registry
        self.groups = groups

    async def write_markers(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        partitions: list[tuple[str, int]],
    ) -> dict[tuple[str, int], ErrorCode]:
        results: dict[tuple[str, int], ErrorCode] = {}
        for topic, index in partitions:
            partition = self.registry.find(topic, index)
            if partition is None:
                results[(topic, index)] = ErrorCode.unknown_topic_or_partition
                continue
            try:
                offset = partition.append_marker(
                    producer_id, producer_epoch, coordinator_epoch, commit
                )
                if topic == OFFSETS_TOPIC:
                    self.groups.on_txn_marker(index, producer_id, commit, producer_epoch)
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
                    "COMMIT" if commit else "ABORT", producer_id, producer_epoch,
                    topic, index, exc,
                    "no open transaction there: done" if code is ErrorCode.none
                    else "will be retried",
                )
                results[(topic, index)] = code
                continue
            log.debug(
                "%s marker for producer %d epoch %d at %s-%d offset %d",
                "COMMIT" if commit else "ABORT", producer_id, producer_epoch, topic, index, offset,
            )
            results[(topic, index)] = ErrorCode.none
            if len(partitions) > 1:
                crash_point("markers.after_first")
        return results
