"""What the coordinator's handlers answer: plain values, no wire types."""

from __future__ import annotations

from dataclasses import dataclass

from oncelog.coordinator.transaction.metadata import TopicPartition
from oncelog.coordinator.transaction.state import TransactionState
from oncelog.errors import ErrorCode


@dataclass(frozen=True, slots=True)
class InitProducerIdResult:
    error: ErrorCode
    producer_id: int = -1
    producer_epoch: int = -1
    # KIP-939: the kept transaction's identity (-1 when none was kept).
    ongoing_txn_producer_id: int = -1
    ongoing_txn_producer_epoch: int = -1


@dataclass(frozen=True, slots=True)
class EndTxnResult:
    error: ErrorCode
    # The identity the client continues with (EndTxn v5, transactions v2).
    producer_id: int = -1
    producer_epoch: int = -1


@dataclass(frozen=True, slots=True)
class ListedTransaction:
    transactional_id: str
    producer_id: int
    state: TransactionState


@dataclass(frozen=True, slots=True)
class ListTransactionsResult:
    error: ErrorCode
    unknown_state_filters: tuple[str, ...] = ()
    transactions: tuple[ListedTransaction, ...] = ()


@dataclass(frozen=True, slots=True)
class DescribedTransaction:
    transactional_id: str
    error: ErrorCode
    state: TransactionState | None = None
    producer_id: int = -1
    producer_epoch: int = -1
    timeout_ms: int = 0
    start_timestamp_ms: int = -1
    # While markers are being written: only partitions still without their marker.
    partitions: tuple[TopicPartition, ...] = ()
    two_phase_commit: bool = False


@dataclass(frozen=True, slots=True)
class TxnCoordinatorStatistics:
    """An immutable snapshot for metrics and ``oncelog txn`` tooling."""

    transactional_ids: int
    open_transactions: int  # Ongoing, PrepareCommit, PrepareAbort
    two_phase_commit_transactions: int  # open ones that never time out
    oldest_open_transaction_age_ms: int  # 0 when none is open
    markers_in_flight: int  # transactions whose markers are being written
    marker_retries: int
    timed_out_aborts: int
    expired_transactional_ids: int
