"""The transactional producer's state machine: every transition is in this one table.

States follow the Java client's TransactionManager (with KIP-939's PreparedTransaction).
``TRANSITIONS[state][event]`` is the next state; a missing entry means the event is not
allowed in that state, and ``TxnStateMachine.fire`` raises: the stored error in the error
states, IllegalStateError otherwise. ``ALLOWED_CALLS`` says which producer API calls each
state accepts, so a bad call fails before anything is sent.

- ``INIT`` / ``INIT_DONE``: init_transactions (InitProducerId). With keep_prepared_txn and an
  ongoing transaction at the coordinator, ``INIT_DONE_PREPARED`` leads straight to
  PREPARED_TRANSACTION (only commit, abort, complete are allowed then).
- ``BEGIN``: begin_transaction (local only; partitions are added as records are sent).
- ``PREPARE``: prepare_transaction, after every record was acknowledged.
- ``COMMIT`` / ``ABORT`` then ``END_DONE``: EndTxn; a second COMMIT (or ABORT) while one is
  under way resumes it, as the Java client allows after a timeout.
- ``ABORTABLE_ERROR``: something failed inside the transaction; only abort leaves it.
- ``FATAL_ERROR``: the producer is done; every later call raises the fatal error.
"""

from __future__ import annotations

import enum
from types import MappingProxyType
from typing import Final

from oncelog.client.errors import IllegalStateError, KafkaClientError

__all__ = ["ALLOWED_CALLS", "TRANSITIONS", "TxnEvent", "TxnState", "TxnStateMachine"]


class TxnState(enum.Enum):
    UNINITIALIZED = "Uninitialized"
    INITIALIZING = "Initializing"
    READY = "Ready"
    IN_TRANSACTION = "InTransaction"
    PREPARED_TRANSACTION = "PreparedTransaction"
    COMMITTING_TRANSACTION = "CommittingTransaction"
    ABORTING_TRANSACTION = "AbortingTransaction"
    ABORTABLE_ERROR = "AbortableError"
    FATAL_ERROR = "FatalError"


class TxnEvent(enum.Enum):
    INIT = "init"
    INIT_FAILED = "init_failed"  # retriable failure: init_transactions may be called again
    INIT_DONE = "init_done"
    INIT_DONE_PREPARED = "init_done_prepared"
    BEGIN = "begin"
    PREPARE = "prepare"
    COMMIT = "commit"
    ABORT = "abort"
    END_DONE = "end_done"
    ABORTABLE_ERROR = "abortable_error"
    FATAL_ERROR = "fatal_error"


S, E = TxnState, TxnEvent

TRANSITIONS: Final = MappingProxyType(
    {
        S.UNINITIALIZED: {E.INIT: S.INITIALIZING, E.FATAL_ERROR: S.FATAL_ERROR},
        S.INITIALIZING: {
            E.INIT: S.INITIALIZING,
            E.INIT_FAILED: S.UNINITIALIZED,
            E.INIT_DONE: S.READY,
            E.INIT_DONE_PREPARED: S.PREPARED_TRANSACTION,
            E.FATAL_ERROR: S.FATAL_ERROR,
        },
        S.READY: {E.BEGIN: S.IN_TRANSACTION, E.FATAL_ERROR: S.FATAL_ERROR},
        S.IN_TRANSACTION: {
            E.PREPARE: S.PREPARED_TRANSACTION,
            E.COMMIT: S.COMMITTING_TRANSACTION,
            E.ABORT: S.ABORTING_TRANSACTION,
            E.ABORTABLE_ERROR: S.ABORTABLE_ERROR,
            E.FATAL_ERROR: S.FATAL_ERROR,
        },
        S.PREPARED_TRANSACTION: {
            E.COMMIT: S.COMMITTING_TRANSACTION,
            E.ABORT: S.ABORTING_TRANSACTION,
            E.FATAL_ERROR: S.FATAL_ERROR,
        },
        S.COMMITTING_TRANSACTION: {
            E.COMMIT: S.COMMITTING_TRANSACTION,
            E.END_DONE: S.READY,
            E.ABORTABLE_ERROR: S.ABORTABLE_ERROR,
            E.FATAL_ERROR: S.FATAL_ERROR,
        },
        S.ABORTING_TRANSACTION: {
            E.ABORT: S.ABORTING_TRANSACTION,
            E.END_DONE: S.READY,
            E.FATAL_ERROR: S.FATAL_ERROR,
        },
        S.ABORTABLE_ERROR: {
            E.ABORT: S.ABORTING_TRANSACTION,
            E.ABORTABLE_ERROR: S.ABORTABLE_ERROR,
            E.FATAL_ERROR: S.FATAL_ERROR,
        },
        S.FATAL_ERROR: {},
    }
)

# Producer API calls accepted in each state (for a transactional producer).
ALLOWED_CALLS: Final = MappingProxyType(
    {
        S.UNINITIALIZED: frozenset({"init_transactions"}),
        S.INITIALIZING: frozenset({"init_transactions"}),
        S.READY: frozenset({"begin_transaction"}),
        S.IN_TRANSACTION: frozenset(
            {
                "send",
                "send_offsets_to_transaction",
                "prepare_transaction",
                "commit_transaction",
                "abort_transaction",
            }
        ),
        S.PREPARED_TRANSACTION: frozenset(
            {"commit_transaction", "abort_transaction", "complete_transaction"}
        ),
        S.COMMITTING_TRANSACTION: frozenset({"commit_transaction", "complete_transaction"}),
        S.ABORTING_TRANSACTION: frozenset({"abort_transaction", "complete_transaction"}),
        S.ABORTABLE_ERROR: frozenset({"abort_transaction"}),
        S.FATAL_ERROR: frozenset(),
    }
)

del S, E


class TxnStateMachine:
    """Current state plus the error that put the producer in an error state."""

    def __init__(self) -> None:
        self.state = TxnState.UNINITIALIZED
        self.error: KafkaClientError | None = None

    def _refuse(self, what: str) -> KafkaClientError:
        if self.state in (TxnState.ABORTABLE_ERROR, TxnState.FATAL_ERROR) and self.error:
            return self.error
        return IllegalStateError(f"{what} is not allowed in state {self.state.value}")

    def check_call(self, call: str) -> None:
        """Raise unless the producer API call ``call`` is allowed now."""
        if call not in ALLOWED_CALLS[self.state]:
            raise self._refuse(call)

    def can(self, event: TxnEvent) -> bool:
        return event in TRANSITIONS[self.state]

    def fire(self, event: TxnEvent, error: KafkaClientError | None = None) -> TxnState:
        target = TRANSITIONS[self.state].get(event)
        if target is None:
            raise self._refuse(f"transition {event.value}")
        if target in (TxnState.ABORTABLE_ERROR, TxnState.FATAL_ERROR):
            self.error = error
        elif target is not self.state:
            self.error = None
        self.state = target
        return target
