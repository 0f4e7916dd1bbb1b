"""The follower's truncation (KIP-101, KIP-279) and its fetch state machine, against logs
modelled as lists of leader epochs (index = offset) with hand-built epoch caches."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oncelog.cluster.follower import (
    TRANSITIONS,
    UNDEFINED_EPOCH,
    UNDEFINED_EPOCH_OFFSET,
    EpochEndOffset,
    FetchEvent,
    FetchPhase,
    FetchStateError,
    OffsetReset,
    PartitionFetchState,
    Truncation,
    end_offset_for_epoch,
    local_end_offset_for_epoch,
    offset_out_of_range_reset,
    truncation_for,
)

TP = "orders-0"


@dataclass
class Log:
    """A replica's log: the leader epoch of each record (index = offset), its epoch cache
    as (epoch, start offset) entries kept the way Kafka keeps them, and its high watermark."""

    records: list[int] = field(default_factory=list)
    cache: list[tuple[int, int]] = field(default_factory=list)
    hw: int = 0

    @classmethod
    def of(cls, records: list[int], hw: int = 0, extra: list[tuple[int, int]] | None = None) -> Log:
        log = cls(hw=hw)
        for epoch in records:
            log.append(epoch)
        log.cache.extend(extra or [])
        return log

    @property
    def end(self) -> int:
        return len(self.records)

    @property
    def latest_epoch(self) -> int | None:
        return self.cache[-1][0] if self.cache else None

    def assign_epoch(self, epoch: int) -> None:
        if not self.cache or self.cache[-1][0] < epoch:
            self.cache.append((epoch, self.end))

    def append(self, epoch: int) -> None:
        self.assign_epoch(epoch)
        self.records.append(epoch)

    def truncate(self, offset: int) -> None:
        # UnifiedLog.truncateTo: records only if below the end; the cache always drops the
        # entries starting at or after the cut (a dangling entry of a leader that wrote
        # nothing goes too).
        cut = min(offset, self.end)
        del self.records[cut:]
        self.cache = [entry for entry in self.cache if entry[1] < cut]
        self.hw = min(self.hw, cut)

    def answer(self, epoch: int) -> EpochEndOffset:
        """The leader's OffsetForLeaderEpoch answer."""
        return end_offset_for_epoch(self.cache, epoch, self.end)


def decide(follower: Log, leader: Log, state: PartitionFetchState) -> Truncation:
    latest = follower.latest_epoch
    if latest is None:
        return state.truncation_without_epochs()
    return truncation_for(
        leader.answer(latest),
        local_end_offset=lambda epoch: local_end_offset_for_epoch(
            follower.cache, epoch, follower.end
        ),
        log_end_offset=follower.end,
        fetch_offset=state.fetch_offset,
    )


def truncate_as_follower(follower: Log, leader: Log, leader_epoch: int) -> PartitionFetchState:
    """Become follower of ``leader`` and run OffsetForLeaderEpoch rounds until truncated."""
    state = PartitionFetchState.become_follower(TP, leader_epoch, follower.hw)
    for _ in range(100):
        if not state.is_truncating:
            return state
        truncation = decide(follower, leader, state)
        follower.truncate(truncation.offset)
        state = state.on_truncated(truncation, for_leader_epoch=leader_epoch)
    raise AssertionError("truncation did not converge")


def fetch(
    follower: Log, leader: Log, state: PartitionFetchState, limit: int
) -> PartitionFetchState:
    assert state.fetch_offset == follower.end
    for offset in range(follower.end, min(leader.end, follower.end + limit)):
        follower.append(leader.records[offset])
    follower.hw = min(leader.hw, follower.end)
    return state.on_fetched(follower.end, for_leader_epoch=state.leader_epoch)


# -- the leader's answer -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("requested", "expected"),
    [
        (UNDEFINED_EPOCH, (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)),
        (0, (0, 2)),  # below every entry: where the first entry starts
        (1, (1, 4)),
        (2, (1, 4)),  # unknown epoch: the largest below it, ending where the next starts
        (3, (3, 7)),
        (4, (4, 9)),  # the latest epoch ends at the log end
        (5, (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)),
    ],
)
def test_end_offset_for_epoch_follows_kafkas_cache(
    requested: int, expected: tuple[int, int]
) -> None:
    entries = [(1, 2), (3, 4), (4, 7)]
    assert end_offset_for_epoch(entries, requested, 9) == EpochEndOffset(*expected)
    assert end_offset_for_epoch([], 1, 9).undefined
    assert local_end_offset_for_epoch(entries, 5, 9) is None


# -- KIP-101 -----------------------------------------------------------------------------------
def test_kip101_scenario_1_high_watermark_truncation_followed_by_immediate_leader_election() -> (
    None
):
    # A leads epoch 0 with m1, m2; B fetched both but learned HW 1 only (the HW arrives
    # with the next fetch). B restarts; the old rule truncated B to its HW and lost m2 when
    # B was then elected while A was down.
    a = Log.of([0, 0], hw=2)
    b = Log.of([0, 0], hw=1)

    state = truncate_as_follower(b, a, leader_epoch=0)
    assert b.records == [0, 0]  # kept m2: A says epoch 0 ends at 2
    assert state.fetch_offset == 2 and state.is_fetching

    # A dies, B is elected (epoch 1), A comes back as B's follower with HW 2.
    b.assign_epoch(1)
    truncate_as_follower(a, b, leader_epoch=1)
    assert a.records == [0, 0] == b.records


def test_kip101_scenario_2_replica_divergence_on_restart_after_multiple_hard_failures() -> None:
    # A leads epoch 0 with m1, m2 (HW 2 on A); B has m1 only. Both lose power. B comes back
    # first and is elected (epoch 1), writes m3 at offset 1. A comes back as a follower: the
    # old rule (truncate to HW 2) kept m2 at offset 1 where B has m3: diverged logs.
    a = Log.of([0, 0], hw=2)
    b = Log.of([0])
    b.assign_epoch(1)
    b.append(1)  # m3

    state = truncate_as_follower(a, b, leader_epoch=1)
    assert a.records == [0]  # m2 removed: B says epoch 0 ends at 1
    state = fetch(a, b, state, limit=10)
    assert a.records == b.records == [0, 1]
    assert a.cache == b.cache == [(0, 0), (1, 1)]


# -- KIP-279 -----------------------------------------------------------------------------------
def test_kip279_fast_leader_change_log_diverges_over_several_epochs() -> None:
    # Epoch 1: A leads, writes offsets 0-1; B replicated offset 0. A fails; B is elected
    # (epoch 2) and writes offsets 1-2, then fails before A fetched them; A is elected
    # again (epoch 3) and writes offset 2. B returns: it asks for epoch 2, which A never
    # had: A answers with epoch 1 ending at 2 (KIP-101 alone answered offset 2 and B kept
    # its epoch-2 record at offset 1). B's own epoch 1 ends at 1: B truncates to 1.
    a = Log.of([1, 1])
    b = Log.of([1])
    b.assign_epoch(2)
    b.append(2)
    b.append(2)
    a.assign_epoch(3)
    a.append(3)

    assert a.answer(2) == EpochEndOffset(1, 2)
    state = truncate_as_follower(b, a, leader_epoch=3)
    assert b.records == [1]
    fetch(b, a, state, limit=10)
    assert b.records == a.records == [1, 1, 3]


def test_kip279_follower_without_the_answered_epoch_asks_again() -> None:
    # The leader answers with epoch 1, which the follower never had: the follower cuts back
    # to the end of its largest epoch below it (0, ending at 5) and asks again with epoch 0.
    leader = Log.of([0, 0, 0, 1, 1, 1, 3, 3])
    follower = Log.of([0, 0, 0, 0, 0, 2, 2])

    state = PartitionFetchState.become_follower(TP, 3, 0)
    first = decide(follower, leader, state)
    assert first == Truncation(5, completed=False)
    follower.truncate(first.offset)
    state = state.on_truncated(first, for_leader_epoch=3)
    assert state.is_truncating and state.fetch_offset == 5

    second = decide(follower, leader, state)
    assert second == Truncation(3, completed=True)
    follower.truncate(second.offset)
    state = state.on_truncated(second, for_leader_epoch=3)
    fetch(follower, leader, state, limit=100)
    assert follower.records == leader.records


def test_truncation_falls_back_to_the_high_watermark() -> None:
    # The leader knows no epoch ≤ the one asked about (UNDEFINED): the fetch offset, i.e.
    # the high watermark on becoming follower (Kafka's fallback).
    state = PartitionFetchState.become_follower(TP, 4, high_watermark=3)
    undefined = EpochEndOffset(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)
    assert truncation_for(
        undefined,
        local_end_offset=lambda _: None,
        log_end_offset=6,
        fetch_offset=state.fetch_offset,
    ) == Truncation(3, completed=True)
    assert state.truncation_without_epochs() == Truncation(3, completed=True)


def test_no_follower_epoch_at_or_below_the_answer_truncates_to_the_leaders_offset() -> (
    None
):
    assert truncation_for(
        EpochEndOffset(2, 4), local_end_offset=lambda _: None, log_end_offset=9, fetch_offset=0
    ) == Truncation(4, completed=True)
    # An answer without an epoch (OffsetForLeaderEpoch v0): the leader's offset, capped.
    assert truncation_for(
        EpochEndOffset(UNDEFINED_EPOCH, 12),
        local_end_offset=lambda _: None,
        log_end_offset=9,
        fetch_offset=0,
    ) == Truncation(9, completed=True)


def test_offset_out_of_range_reset() -> None:
    # Ahead of the leader (unclean election): truncate to its end.
    assert offset_out_of_range_reset(10, leader_end=7, leader_start=0) == OffsetReset(
        7, truncate_to=7
    )
    # Behind the leader's start (segments deleted meanwhile): start over there.
    assert offset_out_of_range_reset(3, leader_end=20, leader_start=5) == OffsetReset(
        5, start_fresh_at=5
    )
    assert offset_out_of_range_reset(8, leader_end=20, leader_start=5) == OffsetReset(8)


# -- the fetch state machine ----------------------------------------------------------------------
def test_every_phase_accepts_a_newer_leader_epoch_and_only_listed_events() -> None:
    for phase, allowed in TRANSITIONS.items():
        assert allowed[FetchEvent.LEADER_CHANGED] is FetchPhase.TRUNCATING
        state = PartitionFetchState(TP, 5, 1, phase)
        assert state.on_leader_changed(2, high_watermark=4) == PartitionFetchState(
            TP, 4, 2, FetchPhase.TRUNCATING
        )
    assert set(TRANSITIONS) == set(FetchPhase)


def test_events_outside_the_table_are_errors() -> None:
    truncating = PartitionFetchState.become_follower(TP, 1, 0)
    with pytest.raises(FetchStateError):
        truncating.on_fetched(3, for_leader_epoch=1)
    with pytest.raises(FetchStateError):
        truncating.on_offset_reset(OffsetReset(0))
    failed = truncating.on_truncated(Truncation(0, completed=True), 1).on_failed()
    with pytest.raises(FetchStateError):
        failed.on_refused(100)
    with pytest.raises(FetchStateError):
        failed.on_truncated(Truncation(0, completed=True), for_leader_epoch=1)


def test_a_refusal_keeps_the_phase_and_delays_the_partition() -> None:
    """NOT_LEADER_OR_FOLLOWER and the epoch errors never park a partition: it is asked
    again after the backoff, in the phase it was in, and any progress clears the delay."""
    truncating = PartitionFetchState.become_follower(TP, 1, 0)
    refused = truncating.on_refused(retry_at_ms=1200)
    assert refused.phase is FetchPhase.TRUNCATING
    assert not refused.is_ready(1199) and refused.is_ready(1200)
    fetching = refused.on_truncated(Truncation(4, completed=True), for_leader_epoch=1)
    assert fetching.retry_at_ms == 0 and fetching.is_ready(0)
    again = fetching.on_refused(retry_at_ms=50)
    assert again.phase is FetchPhase.FETCHING and again.fetch_offset == 4
    assert again.on_fetched(6, for_leader_epoch=1).retry_at_ms == 0
    assert again.on_leader_changed(2, high_watermark=3).is_ready(0)
    assert not truncating.on_truncated(Truncation(0, True), 1).on_failed().is_ready(10**9)


def test_answers_from_an_older_leadership_and_stale_epochs_are_ignored() -> None:
    state = PartitionFetchState.become_follower(TP, 3, 0)
    assert state.on_truncated(Truncation(0, completed=True), for_leader_epoch=2) == state
    fetching = state.on_truncated(Truncation(0, completed=True), for_leader_epoch=3)
    assert fetching.on_fetched(10, for_leader_epoch=2) == fetching
    assert fetching.on_leader_changed(3, high_watermark=0) == fetching
    assert fetching.on_leader_changed(2, high_watermark=0) == fetching
    with pytest.raises(FetchStateError):
        fetching.on_fetched(10, 3).on_fetched(9, 3)


# -- properties ------------------------------------------------------------------------------
REPLICAS = 3
operations = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 3)),
        st.tuples(st.just("replicate"), st.integers(0, REPLICAS - 1), st.integers(0, 4)),
        st.tuples(st.just("elect"), st.integers(0, REPLICAS - 1)),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(operations)
def test_after_truncation_and_replication_a_follower_holds_a_prefix_of_the_leaders_log(
    ops: list[tuple[int | str, ...]],
) -> None:
    # Any history of appends, partial replication and leader elections (unclean ones too:
    # any replica may be elected, so logs diverge): once a follower has truncated against
    # the current leader its log is a prefix of the leader's; after replicating it is equal.
    logs = [Log() for _ in range(REPLICAS)]
    leader, epoch = 0, 0
    logs[0].assign_epoch(0)
    for op in ops:
        if op[0] == "append":
            for _ in range(int(op[1])):
                logs[leader].append(epoch)
        elif op[0] == "elect":
            leader, epoch = int(op[1]), epoch + 1
            logs[leader].assign_epoch(epoch)
        else:
            follower = int(op[1])
            if follower == leader:
                continue
            state = truncate_as_follower(logs[follower], logs[leader], epoch)
            assert logs[follower].records == logs[leader].records[: logs[follower].end]
            fetch(logs[follower], logs[leader], state, limit=int(op[2]))
            assert logs[follower].records == logs[leader].records[: logs[follower].end]
    for follower in range(REPLICAS):
        if follower != leader:
            state = truncate_as_follower(logs[follower], logs[leader], epoch)
            fetch(logs[follower], logs[leader], state, limit=10_000)
            assert logs[follower].records == logs[leader].records
