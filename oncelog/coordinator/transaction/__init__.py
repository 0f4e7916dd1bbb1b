"""The transaction coordinator (KIP-98, KIP-890, KIP-939), split by role as Kafka's is:
the state machine in ``state.py``, per-id metadata and transitions in ``metadata.py``, the
``__transaction_state`` record codec in ``log_codec.py``, the request handling (one
``handle_*`` per API) in ``coordinator.py`` with the InitProducerId/EndTxn state rules in
``decisions.py``, the cache, log appends, loading and sweeps in ``state_manager.py``, and the
marker retry loop with its error classifier in ``marker_channel.py``."""

from oncelog.coordinator.transaction.coordinator import (
    MAX_TRANSACTION_VERSION,
    OFFSETS_TOPIC,
    TRANSACTION_VERSION_FEATURE,
    TransactionCoordinator,
)
from oncelog.coordinator.transaction.marker_channel import (
    MarkerOutcome,
    MarkerWriter,
    TransactionMarkerChannel,
)
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
from oncelog.coordinator.transaction.state_manager import (
    TRANSACTION_STATE_TOPIC,
    TransactionStateManager,
    transaction_log_partition,
)
from oncelog.coordinator.transaction.store import InMemoryTxnLogStore, TxnLogStore

__all__ = [
    "MAX_TRANSACTION_VERSION",
    "OFFSETS_TOPIC",
    "TRANSACTION_STATE_TOPIC",
    "TRANSACTION_VERSION_FEATURE",
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
    "TransactionMarkerChannel",
    "TransactionMetadata",
    "TransactionState",
    "TransactionStateManager",
    "TxnCoordinatorStatistics",
    "TxnLogStore",
    "TxnTransitMetadata",
    "transaction_log_partition",
]
