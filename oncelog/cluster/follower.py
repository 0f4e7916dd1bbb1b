"""The follower's side of replication: where to truncate on a leader change, and the fetch
state of one partition on a follower.

Sans-IO. Epoch caches are plain ascending sequences of ``(epoch, start_offset)`` (the shape of
Kafka's ``leader-epoch-checkpoint``); the shell looks them up in the log's real cache and
sends OffsetForLeaderEpoch and Fetch itself.

Truncation (KIP-101, corrected by KIP-279), as Kafka's ``AbstractFetcherThread`` does it: on
becoming follower (or on a new leader epoch) the follower asks the leader, with
OffsetForLeaderEpoch, where its latest epoch ends on the leader. The leader answers with the
largest epoch it knows that is ≤ the requested one and that epoch's end offset (the start of
the next epoch it has, or its log end for its current one). Then:

- the leader knows no such epoch (UNDEFINED offset): truncate to the fetch offset, which on
  becoming follower is the high watermark (Kafka's fallback, the pre-KIP-101 rule);
- the follower has the answered epoch too: truncate to
  min(leader's end of it, follower's end of it, follower's log end), done;
- the follower does not have the answered epoch (the logs diverged over several epochs in a
  fast succession of leaders, KIP-279): truncate to the follower's end of the largest epoch
  below it, and ask again with the follower's new latest epoch;
- the follower has no epoch at or below the answered one: truncate to min(leader's offset,
  follower's log end), done.

The fetch state of one partition is a small state machine whose transitions are the table
``TRANSITIONS`` below (a missing entry is the error):

    (become follower) ─► TRUNCATING ──truncated──► FETCHING ──fetched / offset reset──► FETCHING
    TRUNCATING ──truncated partially (ask again)──► TRUNCATING
    TRUNCATING / FETCHING ──the leader refused (retriable)──► the same phase, after a backoff
    TRUNCATING / FETCHING ──storage error──► FAILED
    any ──newer leader epoch──► TRUNCATING

A refusal by the leader (NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH,
any other error of the partition) keeps the phase and delays the partition until
``retry_at_ms`` (``replica.fetch.backoff.ms`` later), as Kafka's fetcher delays a partition
with errors: a new leader that has not applied its leadership yet answers the next try, and
a follower whose epoch is stale gets the newer one from the metadata meanwhile. A follower
never parks a partition waiting for metadata that may never come (its epoch may already be
the newest). Only FAILED (the local log cannot be written) waits for a newer leader epoch.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from oncelog.storage import leader_epoch

__all__ = [
    "TRANSITIONS",
    "UNDEFINED_EPOCH",
    "UNDEFINED_EPOCH_OFFSET",
    "EpochEndOffset",
    "FetchEvent",
    "FetchPhase",
    "FetchStateError",
    "OffsetReset",
    "PartitionFetchState",
    "Truncation",
    "end_offset_for_epoch",
    "local_end_offset_for_epoch",
    "offset_out_of_range_reset",
    "truncation_for",
]

log = logging.getLogger(__name__)

UNDEFINED_EPOCH = leader_epoch.UNDEFINED_EPOCH
UNDEFINED_EPOCH_OFFSET = leader_epoch.UNDEFINED_EPOCH_OFFSET

EpochEntries = Sequence[tuple[int, int]]  # (epoch, start_offset), ascending in both


@dataclass(frozen=True, slots=True)
class EpochEndOffset:
    """An OffsetForLeaderEpoch answer: the largest epoch ≤ the requested one and its end
    offset (the first offset after it); UNDEFINED for both when none is known."""

    leader_epoch: int
    end_offset: int

    @property
    def undefined(self) -> bool:
        return self.end_offset == UNDEFINED_EPOCH_OFFSET



def end_offset_for_epoch(
    entries: EpochEntries, requested_epoch: int, log_end_offset: int
) -> EpochEndOffset:
    """Where ``requested_epoch`` ends in a log with these epoch entries (Kafka's
    ``LeaderEpochFileCache.endOffsetFor``): the latest epoch ends at the log end; an older
    one at the start of the next known epoch, reported under the largest known epoch ≤ the
    requested one; an epoch older than every entry ends where the first entry starts
    (the rule is ``oncelog.storage.leader_epoch.end_offset_for``)."""
    return EpochEndOffset(*leader_epoch.end_offset_for(entries, requested_epoch, log_end_offset))


def local_end_offset_for_epoch(
    entries: EpochEntries, epoch: int, log_end_offset: int
) -> EpochEndOffset | None:
    """The follower's own end of ``epoch`` (Kafka's ``UnifiedLog.endOffsetForEpoch``):
    None when its cache knows nothing that answers."""
    found = end_offset_for_epoch(entries, epoch, log_end_offset)
    return None if found.undefined else found


@dataclass(frozen=True, slots=True)
class Truncation:
    """Truncate the follower's log to ``offset`` (a no-op when it is at or past the log end;
    the epoch cache still drops entries starting at or after it). ``completed`` False: ask
    the leader again with the follower's new latest epoch."""

    offset: int
    completed: bool


def truncation_for(
    leader: EpochEndOffset,
    *,
    local_end_offset: Callable[[int], EpochEndOffset | None],
    log_end_offset: int,
    fetch_offset: int,
) -> Truncation:
    """Where to truncate, given the leader's OffsetForLeaderEpoch answer ``leader`` for the
    follower's latest epoch. ``local_end_offset(epoch)`` is the follower's own lookup
    (``local_end_offset_for_epoch`` over its cache); ``fetch_offset`` is the partition's
    fetch offset while truncating (the high watermark on becoming follower)."""
    if leader.undefined:
        return Truncation(min(fetch_offset, log_end_offset), completed=True)
    if leader.leader_epoch == UNDEFINED_EPOCH:
        # An answer without an epoch (OffsetForLeaderEpoch v0): the leader's offset alone.
        return Truncation(min(leader.end_offset, log_end_offset), completed=True)
    local = local_end_offset(leader.leader_epoch)
    if local is None:
        # No epoch this old on the follower: the leader's end offset is the safe bound.
        return Truncation(min(leader.end_offset, log_end_offset), completed=True)
    if local.leader_epoch != leader.leader_epoch:
        # The follower never had the answered epoch: cut back to the end of the largest
        # epoch it has below it and ask again (KIP-279).
        return Truncation(min(local.end_offset, log_end_offset), completed=False)
    return Truncation(min(local.end_offset, leader.end_offset, log_end_offset), completed=True)


@dataclass(frozen=True, slots=True)
class OffsetReset:
    """What a follower does when the leader answers OFFSET_OUT_OF_RANGE to its fetch.
    ``truncate_to`` (the leader's end, below the follower's) or ``start_fresh_at`` (the
    leader's log start, above the follower's end: delete everything) may be set; then fetch
    from ``fetch_offset``."""

    fetch_offset: int
    truncate_to: int | None = None
    start_fresh_at: int | None = None


def offset_out_of_range_reset(replica_end: int, leader_end: int, leader_start: int) -> OffsetReset:
    """Kafka's ``fetchOffsetAndTruncate``: a follower ahead of the leader's end (after an
    unclean election) truncates to it; one behind the leader's start (it was away while the
    leader deleted old segments) starts over at it; otherwise it refetches from its end."""
    if leader_end < replica_end:
        return OffsetReset(fetch_offset=leader_end, truncate_to=leader_end)
    if leader_start > replica_end:
        return OffsetReset(fetch_offset=leader_start, start_fresh_at=leader_start)
    return OffsetReset(fetch_offset=replica_end)


class FetchPhase(enum.Enum):
    TRUNCATING = "truncating"
    FETCHING = "fetching"
    FAILED = "failed"


class FetchEvent(enum.Enum):
    LEADER_CHANGED = "leader changed"
    TRUNCATED = "truncated"
    TRUNCATED_PARTIALLY = "truncated partially"
    FETCHED = "fetched"
    OFFSET_RESET = "offset reset"
    REFUSED = "refused"
    FAILED = "failed"


_P = FetchPhase
_E = FetchEvent

# For each phase, the events it accepts and the phase each leads to.
TRANSITIONS: dict[FetchPhase, dict[FetchEvent, FetchPhase]] = {
    _P.TRUNCATING: {
        _E.LEADER_CHANGED: _P.TRUNCATING,
        _E.TRUNCATED: _P.FETCHING,
        _E.TRUNCATED_PARTIALLY: _P.TRUNCATING,
        _E.REFUSED: _P.TRUNCATING,
        _E.FAILED: _P.FAILED,
    },
    _P.FETCHING: {
        _E.LEADER_CHANGED: _P.TRUNCATING,
        _E.FETCHED: _P.FETCHING,
        _E.OFFSET_RESET: _P.FETCHING,
        _E.REFUSED: _P.FETCHING,
        _E.FAILED: _P.FAILED,
    },
    _P.FAILED: {_E.LEADER_CHANGED: _P.TRUNCATING},
}


class FetchStateError(RuntimeError):
    """An event the partition's fetch phase does not accept (a bug in the caller)."""


@dataclass(frozen=True, slots=True)
class PartitionFetchState:
    """One partition on a follower: the next offset to fetch, the leader epoch it fetches
    under (sent as CurrentLeaderEpoch), its phase, and the monotonic time before which it is
    not asked about again (``retry_at_ms``, after a refusal). Immutable: every event returns
    the next state."""

    partition: str
    fetch_offset: int
    leader_epoch: int
    phase: FetchPhase
    retry_at_ms: int = 0

    @classmethod
    def become_follower(
        cls, partition: str, leader_epoch: int, high_watermark: int
    ) -> PartitionFetchState:
        """A partition that just became a follower: it truncates first, with the high
        watermark as the fallback truncation point."""
        log.info(
            "%s: follower at leader epoch %d, truncating (high watermark %d)",
            partition,
            leader_epoch,
            high_watermark,
        )
        return cls(partition, high_watermark, leader_epoch, FetchPhase.TRUNCATING)

    def _to(
        self,
        event: FetchEvent,
        *,
        fetch_offset: int | None = None,
        leader_epoch: int | None = None,
        retry_at_ms: int = 0,
    ) -> PartitionFetchState:
        phase = TRANSITIONS[self.phase].get(event)
        if phase is None:
            raise FetchStateError(
                f"{self.partition}: {event.value} is not allowed while {self.phase.value}"
            )
        return replace(
            self,
            phase=phase,
            fetch_offset=self.fetch_offset if fetch_offset is None else fetch_offset,
            leader_epoch=self.leader_epoch if leader_epoch is None else leader_epoch,
            retry_at_ms=retry_at_ms,
        )

    @property
    def is_truncating(self) -> bool:
        return self.phase is FetchPhase.TRUNCATING

    @property
    def is_fetching(self) -> bool:
        return self.phase is FetchPhase.FETCHING

    def is_ready(self, now_ms: int) -> bool:
        """Truncating or fetching, and not waiting out a refusal's backoff."""
        return self.phase is not FetchPhase.FAILED and now_ms >= self.retry_at_ms

    def on_leader_changed(self, leader_epoch: int, high_watermark: int) -> PartitionFetchState:
        """The metadata names a leader at ``leader_epoch``: a newer epoch starts over with
        truncation (also out of FAILED); the same epoch changes nothing; an older
        one is a stale update."""
        if leader_epoch == self.leader_epoch:
            return self
        if leader_epoch < self.leader_epoch:
            log.info(
                "%s: ignoring leader epoch %d, already at %d",
                self.partition,
                leader_epoch,
                self.leader_epoch,
            )
            return self
        log.info(
            "%s: leader epoch %d -> %d, truncating (high watermark %d)",
            self.partition,
            self.leader_epoch,
            leader_epoch,
            high_watermark,
        )
        return self._to(_E.LEADER_CHANGED, leader_epoch=leader_epoch, fetch_offset=high_watermark)

    def truncation_without_epochs(self) -> Truncation:
        """Where to truncate when the follower's log has no leader epoch to ask about:
        the fetch offset (Kafka's ``truncateToHighWatermark``)."""
        return Truncation(self.fetch_offset, completed=True)

    def on_truncated(self, truncation: Truncation, for_leader_epoch: int) -> PartitionFetchState:
        """The log was truncated as decided from an answer to a request sent under
        ``for_leader_epoch``; an answer from an older leadership is ignored (Kafka drops
        OffsetForLeaderEpoch answers when the epoch changed meanwhile)."""
        if for_leader_epoch != self.leader_epoch:
            return self
        event = _E.TRUNCATED if truncation.completed else _E.TRUNCATED_PARTIALLY
        log.info(
            "%s: truncated to %d at leader epoch %d%s",
            self.partition,
            truncation.offset,
            self.leader_epoch,
            "" if truncation.completed else ", asking the leader again",
        )
        return self._to(event, fetch_offset=truncation.offset)

    def on_fetched(self, next_offset: int, for_leader_epoch: int) -> PartitionFetchState:
        """Records up to ``next_offset`` were appended from a fetch sent under
        ``for_leader_epoch`` (ignored if from an older leadership)."""
        if for_leader_epoch != self.leader_epoch:
            return self
        if next_offset < self.fetch_offset:
            raise FetchStateError(
                f"{self.partition}: fetch offset would move back "
                f"{self.fetch_offset} -> {next_offset}"
            )
        return self._to(_E.FETCHED, fetch_offset=next_offset)

    def on_offset_reset(self, reset: OffsetReset) -> PartitionFetchState:
        log.info(
            "%s: offset out of range at %d, fetching from %d%s",
            self.partition,
            self.fetch_offset,
            reset.fetch_offset,
            f" after truncating to {reset.truncate_to}"
            if reset.truncate_to is not None
            else f" after starting over at {reset.start_fresh_at}"
            if reset.start_fresh_at is not None
            else "",
        )
        return self._to(_E.OFFSET_RESET, fetch_offset=reset.fetch_offset)

    def on_refused(self, retry_at_ms: int) -> PartitionFetchState:
        """The leader refused the request (module docstring): the same phase, asked again
        at ``retry_at_ms`` with the leader epoch the metadata names by then."""
        return self._to(_E.REFUSED, retry_at_ms=retry_at_ms)

    def on_failed(self) -> PartitionFetchState:
        log.warning("%s: replication failed at offset %d", self.partition, self.fetch_offset)
        return self._to(_E.FAILED)
