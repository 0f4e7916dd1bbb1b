"""KIP-890 part 1 on the partition side: the verification guard of a producer's next
transactional append (Kafka's ``VerificationGuard`` and ``VerificationStateEntry``, in
storage/src/main/java/org/apache/kafka/storage/internals/log/).

Before a broker asks the transaction coordinator whether a partition is in a producer's
transaction (the produce path, and the group coordinator's TxnOffsetCommit append), the
partition records a guard for that producer. The first transactional append of a
transaction must present the same guard, which is gone if a COMMIT/ABORT marker (or any
transactional batch) for the producer was written meanwhile: the answer the coordinator gave
is then about a transaction that has ended, and appending would open one that no marker will
ever close (a hanging transaction). Later appends of the same transaction need no guard: the
partition has the transaction open (its producer state's ``current_txn_first_offset``).

A leaf module: the producer state manager keeps one entry per producer id and removes it on
the next transactional batch or marker of that producer, or after
``producer.id.expiration.ms`` for a verification that never led to an append.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

__all__ = ["SENTINEL", "VerificationGuard", "VerificationStateEntry", "Verifications"]

_ids = itertools.count(1)


@dataclass(frozen=True, slots=True)
class VerificationGuard:
    """One verification's identity; equal only to itself (the value is unique per broker
    process). ``SENTINEL`` (value 0) is "no guard" and verifies nothing."""

    value: int = field(default_factory=lambda: next(_ids))

    def verify(self, presented: VerificationGuard) -> bool:
        """Whether ``presented`` is this guard (the sentinel never is)."""
        return presented.value != 0 and presented == self


SENTINEL = VerificationGuard(0)


@dataclass(slots=True)
class VerificationStateEntry:
    """The open verification of one producer id on one partition: its guard, when it
    started, and the producer epoch it was started for (a newer epoch replaces it)."""

    timestamp: int
    epoch: int
    guard: VerificationGuard = field(default_factory=VerificationGuard)

    def maybe_update_epoch(self, epoch: int) -> None:
        if epoch > self.epoch:
            self.epoch = epoch


class Verifications:
    """The open verifications of one partition, by producer id (Kafka's
    ``ProducerStateManager.verificationStates``)."""

    __slots__ = ("_entries",)

    def __init__(self) -> None:
        self._entries: dict[int, VerificationStateEntry] = {}

    def start(self, producer_id: int, producer_epoch: int, now_ms: int) -> VerificationGuard:
        """The producer's guard: the open one (its epoch raised if newer), else a new one."""
        entry = self._entries.get(producer_id)
        if entry is None:
            entry = self._entries[producer_id] = VerificationStateEntry(now_ms, producer_epoch)
        entry.maybe_update_epoch(producer_epoch)
        return entry.guard

    def guard(self, producer_id: int) -> VerificationGuard:
        """The producer's open guard, ``SENTINEL`` if none."""
        entry = self._entries.get(producer_id)
        return SENTINEL if entry is None else entry.guard

    def clear(self, producer_id: int) -> None:
        """A transactional batch or marker of the producer was written: the guard is gone."""
        self._entries.pop(producer_id, None)

    def expire(self, now_ms: int, limit_ms: int) -> None:
        """Forget verifications started ``limit_ms`` ago or more that led to no append."""
        for producer_id in [p for p, e in self._entries.items()
                            if now_ms - e.timestamp >= limit_ms]:
            del self._entries[producer_id]
