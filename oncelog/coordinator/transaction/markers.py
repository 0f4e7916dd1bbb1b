"""Transaction markers: who writes them, and what each answer from a partition means.

The coordinator hands a ``MarkerWriter`` the markers of one transaction; the broker's writer
appends a COMMIT/ABORT control batch to every data partition (and tells the group coordinator
for ``__consumer_offsets`` partitions) and answers an error code per partition. The
coordinator retries until every partition has its marker (KIP-98: once PREPARE_* is durable
the transaction ends that way), classifying each code as Kafka's marker completion handler
does, adjusted to one broker: a partition that no longer exists is done (its topic was
deleted, as Kafka concludes when a partition has no leader).
"""

from __future__ import annotations

import enum
from typing import Protocol

from oncelog.coordinator.transaction.metadata import TopicPartition
from oncelog.errors import ErrorCode


class MarkerWriter(Protocol):
    async def write_markers(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        partitions: list[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        """Write one marker per partition; a partition missing from the answer is retried."""
        ...


class MarkerOutcome(enum.Enum):
    DONE = "done"  # the partition has its marker (or can never need one)
    RETRY = "retry"  # try this partition again after a backoff
    STOP = "stop"  # this coordinator is fenced: stop sending markers for the transaction


_DONE = frozenset(
    {
        ErrorCode.none,
        # The topic is gone: nothing left to mark.
        ErrorCode.unknown_topic_or_partition,
        # The producer could not have written there either (Kafka drops the partition).
        ErrorCode.unsupported_for_message_format,
        ErrorCode.unsupported_version,
    }
)
# INVALID_PRODUCER_EPOCH / PRODUCER_FENCED (the partition knows a newer epoch of the
# producer) are retried, never done: if the partition still holds that producer's open
# transaction, it did not get its marker, and counting it complete would leave the LSO stuck
# with the transaction gone from the coordinator. Kafka's completion handler stops sending
# instead (a newer epoch can only come from a newer decision there). A writer that can see
# the partition holds nothing of the producer open answers NONE instead
# (``oncelog.broker.markers``).
_STOP = frozenset({ErrorCode.transaction_coordinator_fenced})


def classify_marker_error(code: ErrorCode) -> MarkerOutcome:
    """Everything not known to be done or fatal for this coordinator is retried: a
    transaction whose outcome is logged must reach every partition."""
    if code in _DONE:
        return MarkerOutcome.DONE
    if code in _STOP:
        return MarkerOutcome.STOP
    return MarkerOutcome.RETRY
