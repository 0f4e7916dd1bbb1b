"""The recipe's decisions about a transaction's identity, with no I/O.

What ``recover()`` did with the transaction the broker still had open, given the state the
database stored (``recovery_action``), the result it reports (``Recovery``), and whether a
committed unit's stored state must be cleared because the producer would reuse its identity
for the next transaction (``identity_reused``).
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from oncelog.client.types import PreparedTxnState

RecoveryAction = Literal["committed", "aborted", "none"]


@dataclasses.dataclass(frozen=True, slots=True)
class Recovery:
    """What ``recover()`` found and did.

    ``stored``: the state the database held (empty: none). ``ongoing``: the transaction the
    broker still had open for this transactional id (None: none, or not asked because
    nothing was stored). ``action``: "committed" (ongoing == stored), "aborted" (an ongoing
    transaction the database did not record) or "none"."""

    stored: PreparedTxnState
    ongoing: PreparedTxnState | None
    action: RecoveryAction
    generation: int


def recovery_action(stored: PreparedTxnState, ongoing: PreparedTxnState | None) -> RecoveryAction:
    """What ``complete_transaction(stored)`` does to the broker's ongoing transaction: commits
    it when it is the one the database recorded, aborts it otherwise; nothing when none."""
    if ongoing is None:
        return "none"
    return "committed" if ongoing == stored else "aborted"


def identity_reused(producer_id: int, producer_epoch: int, state: PreparedTxnState) -> bool:
    """After a log commit: would the producer's next transaction have ``state``'s identity
    (same producer id and epoch, no KIP-890 epoch bump)?"""
    return (producer_id, producer_epoch) == (state.producer_id, state.epoch)
