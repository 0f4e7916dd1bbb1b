"""The transaction coordinator (KIP-98, KIP-890, KIP-939): state machine in ``state.py``,
per-id metadata and transitions in ``metadata.py``, the ``__transaction_state`` record codec
in ``log_codec.py``, the handlers and sweeps in ``coordinator.py``."""

from oncelog.coordinator.transaction.coordinator import (
    OFFSETS_TOPIC,
    TRANSACTION_STATE_TOPIC,
    TransactionCoordinator,
    transaction_log_partition,
)
from oncelog.coordinator.transaction.markers import MarkerOutcome, MarkerWriter
from oncelog.coordinator.transaction.metadata import (
    TopicPartition,
    TransactionMetadata,
    TxnTransitMetadata,
)
from oncelog.coordinator.transaction.results import (
    DescribedTransaction,
    EndTxnResult,
    InitProducerIdResult,
    ListedTransaction,
    ListTransactionsResult,
    TxnCoordinatorStatistics,
)
from oncelog.coordinator.transaction.state import TransactionState
from oncelog.coordinator.transaction.store import InMemoryTxnLogStore, TxnLogStore

__all__ = [
    "OFFSETS_TOPIC",
    "TRANSACTION_STATE_TOPIC",
    "DescribedTransaction",
    "EndTxnResult",
    "InMemoryTxnLogStore",
    "InitProducerIdResult",
    "ListTransactionsResult",
    "ListedTransaction",
    "MarkerOutcome",
    "MarkerWriter",
    "TopicPartition",
    "TransactionCoordinator",
    "TransactionMetadata",
    "TransactionState",
    "TxnCoordinatorStatistics",
    "TxnLogStore",
    "TxnTransitMetadata",
    "transaction_log_partition",
]
