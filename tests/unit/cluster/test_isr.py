"""The leader's replica tracking: caught-up times, ISR shrink and expand, the high watermark,
min.insync.replicas and the acks=all purgatory rule, broker-epoch fencing (KIP-903)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oncelog.cluster.isr import (
    ACKS_ALL,
    UNKNOWN_OFFSET,
    AckCheck,
    LeaderReplicas,
    ReplicationLimits,
)
from oncelog.cluster.metadata import BrokerRegistration
from oncelog.errors import ErrorCode, KafkaError

TP = "orders-0"
LAG = 10_000
T0 = 1_000_000


def lead(
    *,
    replicas: tuple[int, ...] = (1, 2, 3),
    isr: tuple[int, ...] = (1, 2, 3),
    leader_end: int = 0,
    hw: int = 0,
    min_isr: int = 1,
    brokers: dict[int, BrokerRegistration] | None = None,
    now_ms: int = T0,
) -> LeaderReplicas:
    return LeaderReplicas.become_leader(
        partition=TP,
        local_id=1,
        leader_epoch=5,
        leader_end=leader_end,
        replicas=replicas,
        isr=isr,
        high_watermark=hw,
        now_ms=now_ms,
        limits=ReplicationLimits(replica_lag_time_max_ms=LAG, min_insync_replicas=min_isr),
        brokers=brokers,
    )


def registered(
    *epochs: tuple[int, int], shutting_down: int | None = None
) -> dict[int, BrokerRegistration]:
    return {
        node: BrokerRegistration(
            node, "127.0.0.1", 9000 + node, epoch=epoch, shutting_down=node == shutting_down
        )
        for node, epoch in epochs
    }


# -- caught up, shrink --------------------------------------------------------------------------
def test_a_fetch_reaching_the_leaders_end_is_caught_up_at_that_time() -> None:
    p = lead(replicas=(1, 2), isr=(1, 2), leader_end=10)
    p.on_follower_fetch(2, 10, T0 + 500, leader_end=10)
    assert p.replica_state(2).last_caught_up_time_ms == T0 + 500
    assert p.maybe_shrink(T0 + 500 + LAG) == ()
    # Stops fetching while the leader grows: out of sync once the lag is exceeded.
    p.on_leader_append(12, T0 + 600)
    assert p.maybe_shrink(T0 + 500 + LAG + 1) == (2,)
    assert p.pending_isr == (1,)


def test_a_follower_always_one_fetch_behind_stays_caught_up() -> None:
    # Kafka's previous-fetch rule: under a steady stream of produces each fetch reaches the
    # leader's end as of the previous fetch, never the current one; the follower is caught
    # up as of the previous fetch and never dropped.
    p = lead(isr=(1, 2), replicas=(1, 2), leader_end=0)
    end, now = 0, T0
    for _ in range(50):
        fetch_offset = end
        end += 3
        now += LAG // 4
        p.on_follower_fetch(2, fetch_offset, now, leader_end=end)
        assert p.maybe_shrink(now) == ()
    assert p.replica_state(2).last_caught_up_time_ms == now - LAG // 4


def test_a_follower_that_never_reaches_the_previous_end_is_dropped() -> None:
    p = lead(isr=(1, 2), replicas=(1, 2), leader_end=100)
    now = T0
    for offset in range(0, 50, 5):
        now += 2_000
        p.on_follower_fetch(2, offset, now, leader_end=100 + offset)
    assert p.replica_state(2).last_caught_up_time_ms == T0
    assert p.maybe_shrink(T0 + LAG) == ()
    assert p.maybe_shrink(T0 + LAG + 1) == (2,)


def test_an_isr_member_at_the_leaders_end_is_never_out_of_sync() -> None:
    p = lead(isr=(1, 2), replicas=(1, 2), leader_end=7)
    p.on_follower_fetch(2, 7, T0, leader_end=7)
    assert p.maybe_shrink(T0 + 100 * LAG) == ()


def test_one_isr_change_at_a_time_and_a_rejected_change_is_forgotten() -> None:
    p = lead(leader_end=10)
    assert p.maybe_shrink(T0 + LAG + 1) == (2, 3)
    assert p.maybe_shrink(T0 + LAG + 2) == ()
    assert p.maybe_expand() is None
    p.on_isr_rejected()
    assert p.pending_isr is None and p.isr == {1, 2, 3}
    assert p.maybe_shrink(T0 + LAG + 3) == (2, 3)
    p.on_isr_committed((1,), T0 + LAG + 3)
    assert p.isr == {1} and p.pending_isr is None


# -- expand ------------------------------------------------------------------------------------
def test_expand_needs_the_high_watermark_and_the_current_epochs_start() -> None:
    # Leader epoch 5 started at offset 10 with high watermark 6 (a new leader's HW lags).
    p = lead(isr=(1,), leader_end=10, hw=6)
    assert p.high_watermark() == 10  # ISR of one: the leader's end
    p.on_follower_fetch(2, 8, T0, leader_end=10)
    assert p.maybe_expand() is None  # below the HW and the epoch start
    p.on_leader_append(14, T0)
    p.on_follower_fetch(2, 10, T0 + 1, leader_end=14)
    assert p.maybe_expand() is None  # HW 14
    p.on_follower_fetch(2, 14, T0 + 2, leader_end=14)
    assert p.maybe_expand() == 2
    assert p.pending_isr == (1, 2)
    p.on_isr_committed((1, 2), T0 + 3)
    assert p.isr == {1, 2}


def test_expand_without_epoch_start_even_at_the_high_watermark() -> None:
    # HW 6 from the log, epoch starts at 10; the follower at 8 is at the HW of an ISR
    # member (2 at 8) but below the epoch start: it could be elected without the records
    # 8-9 the leader committed: not eligible.
    p = lead(isr=(1, 2), leader_end=10, hw=6)
    p.on_follower_fetch(2, 8, T0, leader_end=10)
    assert p.high_watermark() == 8
    p.on_follower_fetch(3, 8, T0, leader_end=10)
    assert p.maybe_expand() is None
    p.on_follower_fetch(3, 10, T0 + 1, leader_end=10)
    assert p.maybe_expand() == 3


def test_dead_shutting_down_or_stale_brokers_do_not_join() -> None:
    brokers = registered((1, 100), (2, 200), (3, 300), shutting_down=3)
    p = lead(isr=(1,), leader_end=5, brokers=brokers)
    p.on_follower_fetch(3, 5, T0, leader_end=5, broker_epoch=300)
    assert p.maybe_expand() is None  # shutting down
    p.on_brokers(registered((1, 100), (3, 300), shutting_down=3), T0)
    p.on_follower_fetch(2, 5, T0, leader_end=5, broker_epoch=200)
    assert p.maybe_expand() is None  # 2 is not registered any more, 3 shutting down
    p.on_brokers(registered((1, 100), (2, 200), (3, 300)), T0)
    assert p.maybe_expand() == 2


# -- broker epochs (KIP-841 / KIP-903) ---------------------------------------------------------
def test_a_restarted_isr_member_is_treated_as_new() -> None:
    p = lead(isr=(1, 2), replicas=(1, 2), leader_end=20, brokers=registered((1, 100), (2, 200)))
    p.on_follower_fetch(2, 20, T0, leader_end=20, broker_epoch=200)
    assert p.high_watermark() == 20
    # Restarted with a shorter log: what the leader knew describes its previous life.
    p.on_follower_fetch(2, 12, T0 + 1, leader_end=20, broker_epoch=250)
    state = p.replica_state(2)
    assert state.log_end_offset == 12 and state.last_caught_up_time_ms == 0
    assert p.maybe_shrink(T0 + 2) == (2,)
    assert p.high_watermark() == 20  # never back


def test_a_newer_registration_resets_the_follower_and_its_old_fetches_are_refused() -> None:
    p = lead(isr=(1, 2), replicas=(1, 2), leader_end=20, brokers=registered((1, 100), (2, 200)))
    p.on_follower_fetch(2, 20, T0, leader_end=20, broker_epoch=200)
    p.on_brokers(registered((1, 100), (2, 260)), T0 + 1)
    assert p.replica_state(2).log_end_offset == UNKNOWN_OFFSET
    with pytest.raises(KafkaError) as refused:
        p.on_follower_fetch(2, 20, T0 + 2, leader_end=20, broker_epoch=200)
    assert refused.value.code is ErrorCode.not_leader_or_follower
    assert p.maybe_shrink(T0 + 2) == (2,)
    p.on_isr_committed((1,), T0 + 2)
    p.on_follower_fetch(2, 20, T0 + 3, leader_end=20, broker_epoch=260)
    assert p.maybe_expand() == 2


def test_a_fetch_from_a_broker_without_a_replica_is_refused() -> None:
    p = lead()
    with pytest.raises(KafkaError) as refused:
        p.on_follower_fetch(9, 0, T0, leader_end=0)
    assert refused.value.code is ErrorCode.not_leader_or_follower


# -- high watermark --------------------------------------------------------------------------
def test_high_watermark_is_the_smallest_end_over_the_isr() -> None:
    p = lead(leader_end=0)
    p.on_leader_append(10, T0)
    assert p.high_watermark() == 0  # a new leader knows no follower's end yet
    assert p.on_follower_fetch(2, 10, T0, leader_end=10) is False
    assert p.on_follower_fetch(3, 4, T0, leader_end=10) is True
    assert p.high_watermark() == 4
    p.on_follower_fetch(3, 9, T0 + 1, leader_end=10)
    assert p.high_watermark() == 9


def test_high_watermark_waits_for_a_caught_up_follower_about_to_join() -> None:
    # 3 is out of the ISR but caught up: were the HW to run ahead with the ISR {1, 2},
    # a follower behind under steady load would never reach it and never join.
    p = lead(isr=(1, 2), leader_end=10)
    p.on_follower_fetch(2, 10, T0, leader_end=10)
    p.on_follower_fetch(3, 10, T0, leader_end=10)
    assert p.high_watermark() == 10
    p.on_leader_append(20, T0 + 1)
    p.on_follower_fetch(2, 20, T0 + 2, leader_end=20)
    assert p.high_watermark() == 10
    p.on_follower_fetch(3, 15, T0 + 2, leader_end=20)  # reached the previous end: caught up
    assert p.high_watermark() == 15
    assert p.maybe_expand() == 3


def test_high_watermark_stays_while_the_isr_is_below_min_insync_replicas() -> None:
    p = lead(isr=(1,), replicas=(1, 2, 3), leader_end=5, hw=5, min_isr=2)
    p.on_leader_append(9, T0)
    assert p.high_watermark() == 5
    p.on_follower_fetch(2, 9, T0 + 1, leader_end=9)
    assert p.maybe_expand() == 2
    assert p.on_isr_committed((1, 2), T0 + 2) is True
    assert p.high_watermark() == 9


def test_a_re_elected_leader_keeps_what_it_knew_of_the_followers() -> None:
    first = lead(leader_end=10)
    first.on_follower_fetch(2, 10, T0, leader_end=10)
    first.on_follower_fetch(3, 10, T0, leader_end=10)
    again = LeaderReplicas.become_leader(
        partition=TP,
        local_id=1,
        leader_epoch=6,
        leader_end=10,
        replicas=(1, 2, 3),
        isr=(1, 2, 3),
        high_watermark=first.high_watermark(),
        now_ms=T0 + 1,
        limits=first.limits,
        previous=first,
    )
    assert again.replica_state(2).log_end_offset == 10
    fresh = lead(leader_end=10, now_ms=T0 + 1)
    assert fresh.replica_state(2).log_end_offset == UNKNOWN_OFFSET


# -- acks=all ------------------------------------------------------------------------------------
def test_min_isr_refuses_acks_all_before_the_append() -> None:
    p = lead(isr=(1,), min_isr=2)
    with pytest.raises(KafkaError) as refused:
        p.check_min_isr(ACKS_ALL)
    assert refused.value.code is ErrorCode.not_enough_replicas
    p.check_min_isr(1)
    p.check_min_isr(0)
    # Capped at the replica count: min.insync.replicas 2 with one replica accepts.
    lead(replicas=(1,), isr=(1,), min_isr=2).check_min_isr(ACKS_ALL)


def test_acks_all_waits_for_the_high_watermark_then_reports_a_shrunk_isr() -> None:
    p = lead(isr=(1, 2, 3), min_isr=2, leader_end=0)
    p.on_leader_append(5, T0)
    assert p.check_enough_replicas(5) == AckCheck(satisfied=False)
    p.on_follower_fetch(2, 5, T0 + 1, leader_end=5)
    assert p.check_enough_replicas(5) == AckCheck(satisfied=False)
    p.on_follower_fetch(3, 5, T0 + 1, leader_end=5)
    assert p.check_enough_replicas(5) == AckCheck(satisfied=True)

    p.on_leader_append(8, T0 + 2)
    p.on_follower_fetch(2, 8, T0 + 3, leader_end=8)
    assert p.maybe_shrink(T0 + 3 + LAG) == (3,)
    p.on_isr_committed((1, 2), T0 + 3 + LAG)
    assert p.check_enough_replicas(8) == AckCheck(satisfied=True)
    p.on_leader_append(9, T0 + 4 + LAG)
    p.on_follower_fetch(2, 9, T0 + 4 + LAG, leader_end=9)
    assert p.maybe_shrink(T0 + 5 + 2 * LAG) == ()  # 2 is at the leader's end
    p.on_isr_committed((1,), T0 + 5 + 2 * LAG)  # the controller took 2 out (it died)
    assert p.check_enough_replicas(9) == AckCheck(
        satisfied=True, error=ErrorCode.not_enough_replicas_after_append
    )
    assert p.check_enough_replicas(10) == AckCheck(satisfied=False)


# -- properties ------------------------------------------------------------------------------
FOLLOWERS = (2, 3, 4)
# (what, a, b): append a records after b ms; follower FOLLOWERS[a % 3] fetches up to a more
# records after b ms; shrink after b ms / expand, committing the proposal when a is even.
steps = st.lists(
    st.tuples(
        st.sampled_from(["append", "fetch", "shrink", "expand"]),
        st.integers(0, 5),
        st.integers(0, LAG),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(steps, st.integers(1, 3))
def test_high_watermark_and_isr_rules_hold_over_any_history(
    history: list[tuple[str, int, int]], min_isr: int
) -> None:
    # A new leader whose log's high watermark (10) is ahead of what the followers report.
    p = lead(replicas=(1, *FOLLOWERS), isr=(1, *FOLLOWERS), leader_end=20, hw=10, min_isr=min_isr)
    assert p.high_watermark() == 10
    now, end = T0, 20
    ends = dict.fromkeys(FOLLOWERS, 0)  # each follower's log end: fetches never go back
    for what, a, b in history:
        before = p.high_watermark()
        commit = a % 2 == 0
        if what == "append":
            end += a
            now += b // 2
            p.on_leader_append(end, now)
        elif what == "fetch":
            follower = FOLLOWERS[a % len(FOLLOWERS)]
            ends[follower] = min(end, ends[follower] + a)
            now += b // 2
            p.on_follower_fetch(follower, ends[follower], now, leader_end=end)
        elif what == "shrink":
            now += b
            isr = p.isr
            states = {r: p.replica_state(r) for r in FOLLOWERS}
            dropped = p.maybe_shrink(now)
            for r in FOLLOWERS:
                lagging = (
                    states[r].log_end_offset != end and now - states[r].last_caught_up_time_ms > LAG
                )
                assert (r in dropped) == (r in isr and lagging)
            if dropped and commit:
                p.on_isr_committed(p.pending_isr or (), now)
            elif dropped:
                p.on_isr_rejected()
        else:
            hw = p.high_watermark()
            added = p.maybe_expand()
            if added is not None:
                assert added not in p.isr
                assert p.replica_state(added).log_end_offset >= max(hw, p.epoch_start_offset)
                if commit:
                    p.on_isr_committed(p.pending_isr or (), now)
                else:
                    p.on_isr_rejected()
        hw = p.high_watermark()
        assert hw >= before  # never back while leading
        assert hw <= end
        if hw > before:
            assert len(p.isr) >= p.effective_min_isr()
            for member in p.maximal_isr() - {1}:
                assert p.replica_state(member).log_end_offset >= hw


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(1, LAG)), max_size=40))
def test_a_follower_reaching_the_end_within_the_lag_is_never_dropped(
    rounds: list[tuple[int, int]],
) -> None:
    p = lead(isr=(1, 2), replicas=(1, 2), leader_end=0)
    now, end = T0, 0
    for appended, gap in rounds:
        end += appended
        p.on_leader_append(end, now)
        now += gap
        assert p.maybe_shrink(now) == ()
        p.on_follower_fetch(2, end, now, leader_end=end)
        assert p.high_watermark() == end
