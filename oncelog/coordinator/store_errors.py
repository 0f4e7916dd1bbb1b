"""The one translation of a failed internal-topic append into the error a client receives.

A coordinator writes to ``__consumer_offsets`` or ``__transaction_state`` through the
partition layer, whose errors (not leader, storage error, record too large...) mean nothing
to a consumer or a transactional producer. Kafka translates them per kind of write, each
table below being one of its mappings:

  - ``OFFSET_COMMIT``: GroupMetadataManager.storeOffsets (OffsetCommit, TxnOffsetCommit);
  - ``GROUP_METADATA``: GroupMetadataManager.storeGroup (assignments, member changes,
    group deletion);
  - ``TRANSACTION_LOG``: TransactionStateManager.appendTransactionToLog.

Codes not in a table are passed through unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from types import MappingProxyType

from oncelog.errors import ErrorCode

E = ErrorCode

# Shared by every table: the partition is not (or no longer) here / not writable enough.
_UNAVAILABLE: dict[ErrorCode, ErrorCode] = {
    E.unknown_topic_or_partition: E.coordinator_not_available,
    E.not_enough_replicas: E.coordinator_not_available,
    E.not_enough_replicas_after_append: E.coordinator_not_available,
    E.not_leader_or_follower: E.not_coordinator,
    E.kafka_storage_error: E.not_coordinator,
}


class StoreWrite(Enum):
    """What the failed append was writing (selects the translation table)."""

    OFFSET_COMMIT = "offset commit"
    GROUP_METADATA = "group metadata"
    TRANSACTION_LOG = "transaction log"


TRANSLATIONS: Mapping[StoreWrite, Mapping[ErrorCode, ErrorCode]] = MappingProxyType({
    StoreWrite.OFFSET_COMMIT: MappingProxyType({
        **_UNAVAILABLE,
        E.request_timed_out: E.coordinator_not_available,
        E.message_too_large: E.invalid_commit_offset_size,
        E.record_list_too_large: E.invalid_commit_offset_size,
        E.invalid_fetch_size: E.invalid_commit_offset_size,
    }),
    StoreWrite.GROUP_METADATA: MappingProxyType({
        **_UNAVAILABLE,
        E.request_timed_out: E.rebalance_in_progress,
        E.message_too_large: E.unknown_server_error,
        E.record_list_too_large: E.unknown_server_error,
        E.invalid_fetch_size: E.unknown_server_error,
    }),
    StoreWrite.TRANSACTION_LOG: MappingProxyType({
        **_UNAVAILABLE,
        E.request_timed_out: E.coordinator_not_available,
        E.message_too_large: E.unknown_server_error,
        E.record_list_too_large: E.unknown_server_error,
    }),
})


def translate_store_error(code: ErrorCode, write: StoreWrite) -> ErrorCode:
    """The client-facing error for an append of kind ``write`` that failed with ``code``."""
    return TRANSLATIONS[write].get(code, code)
