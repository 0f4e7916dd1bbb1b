"""Everything that decides which transaction state may follow which lives in this one module.

The states and their numeric ids are Kafka's (the id is what ``__transaction_state`` stores;
the name is what DescribeTransactions and ListTransactions show). Each state declares the
states it may be entered from; a missing entry is the error. The table is the specification:

    Empty / CompleteCommit / CompleteAbort ──add partitions──► Ongoing ──add──► Ongoing
    Ongoing ──EndTxn(commit)──► PrepareCommit ──all markers written──► CompleteCommit
    Ongoing ──EndTxn(abort)───► PrepareAbort  ──all markers written──► CompleteAbort
    Ongoing ──fence (InitProducerId, timeout)──► PrepareEpochFence ──► PrepareAbort
    Empty / Complete* ──EndTxn(abort), transactions v2, nothing added──► PrepareAbort
    Empty / Complete* ──InitProducerId (epoch bump or new producer id)──► Empty
    Empty / Complete* ──transactional id expired──► Dead (removed, never completed)

PrepareEpochFence and Dead are only ever *pending* states: a fence continues straight into
PrepareAbort, and Dead ends with the id removed from the cache and a tombstone in the log.
"""

from __future__ import annotations

import enum


class TransactionState(enum.Enum):
    """A transaction's state; the value is Kafka's id in the transaction log."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def id(self) -> int:
        """Kafka's numeric id, as stored in ``__transaction_state``."""
        return int(self.value)

    @property
    def wire_name(self) -> str:
        """The name Kafka's admin APIs use (``Ongoing``, ``PrepareCommit``, ...)."""
        return _WIRE_NAMES[self]

    @property
    def expiration_allowed(self) -> bool:
        """Whether a transactional id in this state may expire after being idle."""
        return self in EXPIRATION_ALLOWED

    @property
    def is_prepared(self) -> bool:
        """The outcome is decided and durable; markers may still be in flight."""
        return self in (TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT)

    @property
    def is_complete(self) -> bool:
        return self in (TransactionState.COMPLETE_COMMIT, TransactionState.COMPLETE_ABORT)


_WIRE_NAMES: dict[TransactionState, str] = {
    TransactionState.EMPTY: "Empty",
    TransactionState.ONGOING: "Ongoing",
    TransactionState.PREPARE_COMMIT: "PrepareCommit",
    TransactionState.PREPARE_ABORT: "PrepareAbort",
    TransactionState.COMPLETE_COMMIT: "CompleteCommit",
    TransactionState.COMPLETE_ABORT: "CompleteAbort",
    TransactionState.DEAD: "Dead",
    TransactionState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}

_S = TransactionState

# For each state, the states it may be entered from.
VALID_PREVIOUS_STATES: dict[TransactionState, frozenset[TransactionState]] = {
    # InitProducerId: the epoch is bumped (or a new producer id issued) between transactions.
    _S.EMPTY: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    # AddPartitionsToTxn / AddOffsetsToTxn; also InitProducerId with KeepPreparedTxn (KIP-939),
    # which keeps the transaction and moves the client to a new epoch.
    _S.ONGOING: frozenset({_S.ONGOING, _S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    # EndTxn(commit): only a transaction that has begun can be committed.
    _S.PREPARE_COMMIT: frozenset({_S.ONGOING}),
    # EndTxn(abort), a fence, a timeout; with transactions v2 a client may abort when it is
    # unsure whether anything was added (Empty/Complete*), which still bumps the epoch.
    _S.PREPARE_ABORT: frozenset(
        {_S.ONGOING, _S.PREPARE_EPOCH_FENCE, _S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}
    ),
    # Every partition has its marker.
    _S.COMPLETE_COMMIT: frozenset({_S.PREPARE_COMMIT}),
    _S.COMPLETE_ABORT: frozenset({_S.PREPARE_ABORT}),
    # Expiry of an idle transactional id without an open transaction.
    _S.DEAD: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    # A new producer instance (or the timeout sweep) fences an open transaction.
    _S.PREPARE_EPOCH_FENCE: frozenset({_S.ONGOING}),
}

# States in which an idle transactional id may be expired.
EXPIRATION_ALLOWED: frozenset[TransactionState] = frozenset(
    {_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}
)


class IllegalStateTransition(Exception):
    """A transition the table does not allow: a coordinator bug, never a client's error."""


def can_transition(current: TransactionState, target: TransactionState) -> bool:
    return current in VALID_PREVIOUS_STATES[target]


def check_transition(current: TransactionState, target: TransactionState) -> TransactionState:
    """Return ``target`` if it may follow ``current``; raise IllegalStateTransition otherwise."""
    if not can_transition(current, target):
        raise IllegalStateTransition(
            f"transaction may not go from {current.wire_name} to {target.wire_name}"
        )
    return target


def parse_state(name: str) -> TransactionState | None:
    """A state from its wire name (exact, as Kafka's ListTransactions filter matches it)."""
    for state, wire in _WIRE_NAMES.items():
        if wire == name:
            return state
    return None


def state_from_id(state_id: int) -> TransactionState:
    """The state stored as ``state_id`` in the transaction log; ValueError if unknown."""
    try:
        return TransactionState(state_id)
    except ValueError:
        raise ValueError(f"unknown transaction state id {state_id}") from None
