"""The one translation of failed internal-topic appends (oncelog/coordinator/store_errors.py),
one table per kind of write as in Kafka's GroupMetadataManager (storeOffsets, storeGroup)
and TransactionStateManager (appendTransactionToLog)."""

from __future__ import annotations

import pytest

from oncelog.coordinator.store_errors import StoreWrite, translate_store_error
from oncelog.errors import ErrorCode

E = ErrorCode
COMMIT, GROUP, TXN = StoreWrite.OFFSET_COMMIT, StoreWrite.GROUP_METADATA, StoreWrite.TRANSACTION_LOG


@pytest.mark.parametrize(
    "code, commit, group, txn",
    [
        (E.unknown_topic_or_partition, E.coordinator_not_available,
         E.coordinator_not_available, E.coordinator_not_available),
        (E.not_enough_replicas, E.coordinator_not_available,
         E.coordinator_not_available, E.coordinator_not_available),
        (E.not_enough_replicas_after_append, E.coordinator_not_available,
         E.coordinator_not_available, E.coordinator_not_available),
        (E.request_timed_out, E.coordinator_not_available,
         E.rebalance_in_progress, E.coordinator_not_available),
        (E.not_leader_or_follower, E.not_coordinator, E.not_coordinator, E.not_coordinator),
        (E.kafka_storage_error, E.not_coordinator, E.not_coordinator, E.not_coordinator),
        (E.message_too_large, E.invalid_commit_offset_size,
         E.unknown_server_error, E.unknown_server_error),
        (E.record_list_too_large, E.invalid_commit_offset_size,
         E.unknown_server_error, E.unknown_server_error),
        (E.invalid_fetch_size, E.invalid_commit_offset_size,
         E.unknown_server_error, E.invalid_fetch_size),
        (E.invalid_request, E.invalid_request, E.invalid_request, E.invalid_request),
        (E.invalid_producer_epoch, E.invalid_producer_epoch,
         E.invalid_producer_epoch, E.invalid_producer_epoch),
    ],
)
def test_each_kind_of_write_has_kafkas_translation(
    code: ErrorCode, commit: ErrorCode, group: ErrorCode, txn: ErrorCode
) -> None:
    assert translate_store_error(code, COMMIT) == commit
    assert translate_store_error(code, GROUP) == group
    assert translate_store_error(code, TXN) == txn
