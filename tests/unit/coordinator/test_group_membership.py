"""Classic group membership: join/sync, KIP-394, the initial rebalance delay, rebalances on
join/leave/expiry, static members, and the errors clients rely on. Driven by a FakeClock:
``env.advance(ms)`` moves time and runs one sweep, as the background loop would."""

from __future__ import annotations

import asyncio

from group_support import (
    REBALANCE_MS,
    SESSION_MS,
    form_group,
    make_env,
    settle,
    start_join,
    start_sync,
)

from oncelog.coordinator.group.state import GroupState
from oncelog.errors import ErrorCode


def run(coro):  # type: ignore[no-untyped-def]
    # A scenario that waits for an answer that never comes fails fast instead of hanging.
    return asyncio.run(asyncio.wait_for(coro, timeout=5))


# -- a lone member ---------------------------------------------------------------------------


def test_member_id_required_then_join_completes_after_initial_delay() -> None:
    async def scenario() -> None:
        env = make_env(initial_delay_ms=3000)
        first = await start_join(env, "g", require_known=True, client_id="app")
        assert first.error == ErrorCode.member_id_required
        assert first.member_id.startswith("app-")
        group = env.coordinator.group("g")
        assert group is not None and group.state is GroupState.EMPTY

        join = start_join(env, "g", first.member_id, require_known=True, client_id="app")
        await settle()
        assert not join.done()
        env.advance(2999)
        await settle()
        assert not join.done()
        env.advance(1)  # exactly the initial delay: no wait for a session or rebalance timeout
        await settle()
        result = join.result()
        assert result.error == ErrorCode.none
        assert result.member_id == first.member_id
        assert result.generation_id == 1
        assert result.leader_id == first.member_id
        assert result.protocol_name == "range"
        assert result.protocol_type == "consumer"
        assert [(m.member_id, m.metadata) for m in result.members] == [
            (first.member_id, b"sub-range")
        ]

        sync = await start_sync(env, "g", result, {first.member_id: b"A"})
        assert sync.error == ErrorCode.none and sync.assignment == b"A"
        assert sync.protocol_name == "range"
        assert env.coordinator.group("g").state is GroupState.STABLE  # type: ignore[union-attr]
        assert env.coordinator.heartbeat("g", 1, first.member_id, None) == ErrorCode.none

    run(scenario())


def test_lone_member_with_zero_delay_is_answered_at_once() -> None:
    async def scenario() -> None:
        env = make_env(initial_delay_ms=0)
        result = await start_join(env, "g")
        assert result.error == ErrorCode.none and result.generation_id == 1

    run(scenario())


def test_pending_member_that_never_returns_is_forgotten() -> None:
    async def scenario() -> None:
        env = make_env()
        first = await start_join(env, "g", require_known=True)
        env.advance(SESSION_MS)
        late = await start_join(env, "g", first.member_id, require_known=True)
        assert late.error == ErrorCode.unknown_member_id

    run(scenario())


# -- several members -------------------------------------------------------------------------


def test_three_members_join_and_sync() -> None:
    async def scenario() -> None:
        env = make_env(initial_delay_ms=3000)
        tasks = [start_join(env, "g", client_id=f"c{i}") for i in range(3)]
        await settle()
        env.advance(3000)  # new members arrived during the delay: wait one more delay
        await settle()
        assert not any(t.done() for t in tasks)
        env.advance(3000)
        await settle()
        joins = [t.result() for t in tasks]
        assert {j.generation_id for j in joins} == {1}
        leader_id = joins[0].member_id  # the first to join leads
        assert all(j.leader_id == leader_id for j in joins)
        assert len(joins[0].members) == 3
        assert joins[1].members == () and joins[2].members == ()

        follower_syncs = [start_sync(env, "g", j) for j in joins[1:]]
        await settle()
        assert not any(s.done() for s in follower_syncs)  # followers wait for the leader
        assignment = {j.member_id: j.member_id.encode() for j in joins}
        leader_sync = await start_sync(env, "g", joins[0], assignment)
        assert leader_sync.assignment == leader_id.encode()
        for join, sync in zip(joins[1:], follower_syncs, strict=True):
            result = await sync
            assert result.error == ErrorCode.none
            assert result.assignment == join.member_id.encode()

        # The assignment was stored before anyone got it.
        assert env.store.record_count() == 1

    run(scenario())


def test_initial_delay_extension_is_bounded_by_rebalance_timeout() -> None:
    async def scenario() -> None:
        env = make_env(initial_delay_ms=3000)
        # Rebalance timeout 5000: at most 3000 + 2000 of waiting.
        first = start_join(env, "g", rebalance_ms=5000)
        await settle()
        env.advance(1000)
        second = start_join(env, "g", rebalance_ms=5000)
        await settle()
        env.advance(2000)
        await settle()
        assert not first.done()
        env.advance(1999)
        await settle()
        assert not first.done()
        env.advance(1)
        await settle()
        assert first.result().generation_id == second.result().generation_id == 1

    run(scenario())


def test_inconsistent_protocols_are_rejected() -> None:
    async def scenario() -> None:
        env = make_env(initial_delay_ms=0)
        await start_join(env, "g")
        other_type = await start_join(env, "g", protocol_type="connect")
        assert other_type.error == ErrorCode.inconsistent_group_protocol
        no_common = await start_join(env, "g", protocols=[("sticky", b"")])
        assert no_common.error == ErrorCode.inconsistent_group_protocol
        empty = await start_join(env, "h", protocols=[])
        assert empty.error == ErrorCode.inconsistent_group_protocol

    run(scenario())


def test_protocol_selection_by_vote() -> None:
    async def scenario() -> None:
        env = make_env(initial_delay_ms=0)
        a = start_join(env, "g", protocols=[("range", b"a"), ("roundrobin", b"a2")])
        await settle()
        # With delay 0 the first join completed alone; the next two force a rebalance.
        first = a.result()
        b = start_join(env, "g", protocols=[("roundrobin", b"b"), ("range", b"b2")])
        c = start_join(env, "g", protocols=[("roundrobin", b"c")])
        rejoin = start_join(env, "g", first.member_id,
                            protocols=[("range", b"a"), ("roundrobin", b"a2")])
        await settle()
        results = [await t for t in (rejoin, b, c)]
        assert {r.generation_id for r in results} == {2}
        assert {r.protocol_name for r in results} == {"roundrobin"}
        leader = next(r for r in results if r.members)
        assert {m.metadata for m in leader.members} == {b"a2", b"b", b"c"}

    run(scenario())


def test_invalid_session_timeout_and_group_id() -> None:
    async def scenario() -> None:
        env = make_env(group_min_session_timeout_ms=6000, group_max_session_timeout_ms=60000)
        low = await start_join(env, "g", session_ms=5999)
        high = await start_join(env, "g", session_ms=60001)
        assert low.error == high.error == ErrorCode.invalid_session_timeout
        assert (await start_join(env, "")).error == ErrorCode.invalid_group_id

    run(scenario())


def test_group_max_size() -> None:
    async def scenario() -> None:
        env = make_env(initial_delay_ms=0, group_max_size=1)
        assert (await start_join(env, "g")).error == ErrorCode.none
        assert (await start_join(env, "g")).error == ErrorCode.group_max_size_reached

    run(scenario())


# -- rebalances ------------------------------------------------------------------------------


def test_new_member_triggers_rebalance_that_ends_when_all_rejoined() -> None:
    async def scenario() -> None:
        env = make_env(initial_delay_ms=0)
        [old] = await form_group(env, "g", 1)
        newcomer = start_join(env, "g")
        await settle()
        assert env.coordinator.group("g").state is GroupState.PREPARING_REBALANCE  # type: ignore[union-attr]
        assert env.coordinator.heartbeat("g", 1, old.member_id, None) == (
            ErrorCode.rebalance_in_progress
        )
        # A commit with the current generation is still accepted while preparing.
        assert env.coordinator.commit_offsets("g", 1, old.member_id, None,
                                              {("t", 0): (5, -1, "")}) == {("t", 0): 0}
        rejoin = await start_join(env, "g", old.member_id)  # no timeout needed
        new = await newcomer
        assert rejoin.generation_id == new.generation_id == 2
        assert rejoin.leader_id == old.member_id
        assert len(rejoin.members) == 2

    run(scenario())


def test_leave_triggers_rebalance() -> None:
    async def scenario() -> None:
        env = make_env(initial_delay_ms=3000)
        leader, follower = await form_group(env, "g", 2)
        assert env.coordinator.leave_group("g", [(follower.member_id, None)]) == [0]
        assert env.coordinator.heartbeat("g", 1, leader.member_id, None) == (
            ErrorCode.rebalance_in_progress
        )
        rejoin = await start_join(env, "g", leader.member_id)
        assert rejoin.generation_id == 2
        assert [m.member_id for m in rejoin.members] == [leader.member_id]
        assert env.coordinator.heartbeat("g", 2, follower.member_id, None) == (
            ErrorCode.unknown_member_id
        )

    run(scenario())


def test_last_member_leaving_empties_the_group() -> None:
    async def scenario() -> None:
        env = make_env(initial_delay_ms=0)
        [only] = await form_group(env, "g", 1)
        before = env.store.record_count()
        assert env.coordinator.leave_group("g", [(only.member_id, None)]) == [0]
        group = env.coordinator.group("g")
        assert group is not None and group.state is GroupState.EMPTY
        assert group.generation_id == 2
        assert env.store.record_count() == before + 1  # the empty group is stored

    run(scenario())


def test_leader_leaving_hands_leadership_to_a_rejoined_member() -> None:
    async def scenario() -> None:
        env = make_env()
        leader, follower = await form_group(env, "g", 2)
        env.coordinator.leave_group("g", [(leader.member_id, None)])
        rejoin = await start_join(env, "g", follower.member_id)
        assert rejoin.leader_id == follower.member_id and rejoin.generation_id == 2

    run(scenario())


def test_member_that_does_not_rejoin_is_removed_after_rebalance_timeout() -> None:
    async def scenario() -> None:
        env = make_env(initial_delay_ms=0)
        # Sessions longer than the rebalance: only the rebalance timeout can remove m2.
        first = await start_join(env, "g", session_ms=40_000, rebalance_ms=20_000)
        second_t = start_join(env, "g", session_ms=40_000, rebalance_ms=20_000)
        rejoin_t = start_join(env, "g", first.member_id, session_ms=40_000, rebalance_ms=20_000)
        await settle()
        first2, second = await rejoin_t, await second_t
        assert first2.generation_id == second.generation_id == 2
        leader = first2 if first2.members else second
        follower = second if leader is first2 else first2
        follower_sync = start_sync(env, "g", follower)
        await settle()
        assert (await start_sync(env, "g", leader, {})).error == ErrorCode.none
        assert (await follower_sync).error == ErrorCode.none
        # A third member arrives; m1 rejoins, m2 only heartbeats.
        third = start_join(env, "g", session_ms=40_000, rebalance_ms=20_000)
        again = start_join(env, "g", first.member_id, session_ms=40_000, rebalance_ms=20_000)
        await settle()
        lagging = second.member_id
        for _ in range(2):
            env.advance(9_000)
            assert env.coordinator.heartbeat("g", 2, lagging, None) == (
                ErrorCode.rebalance_in_progress
            )
        await settle()
        assert not again.done()
        env.advance(2_000)  # 20 s since the rebalance began
        await settle()
        results = [again.result(), third.result()]
        assert {r.generation_id for r in results} == {3}
        group = env.coordinator.group("g")
        assert group is not None and lagging not in group.members
        assert env.coordinator.heartbeat("g", 3, lagging, None) == ErrorCode.unknown_member_id

    run(scenario())


def test_session_expiry_removes_member_and_rebalances() -> None:
    async def scenario() -> None:
        env = make_env()
        leader, follower = await form_group(env, "g", 2)
        for _ in range(3):
            env.advance(SESSION_MS // 2)
            assert env.coordinator.heartbeat("g", 1, leader.member_id, None) in (
                ErrorCode.none, ErrorCode.rebalance_in_progress,
            )
        group = env.coordinator.group("g")
        assert group is not None
        assert follower.member_id not in group.members
        assert group.state is GroupState.PREPARING_REBALANCE
        rejoin = await start_join(env, "g", leader.member_id)
        assert rejoin.generation_id == 2 and len(rejoin.members) == 1

    run(scenario())


def test_lone_member_session_expiry_leaves_empty_group() -> None:
    async def scenario() -> None:
        env = make_env(initial_delay_ms=0)
        await form_group(env, "g", 1)
        env.advance(SESSION_MS - 1)
        assert env.coordinator.group("g").state is GroupState.STABLE  # type: ignore[union-attr]
        env.advance(1)
        group = env.coordinator.group("g")
        assert group is not None and group.state is GroupState.EMPTY and not group.members

    run(scenario())


def test_member_that_never_syncs_is_removed() -> None:
    async def scenario() -> None:
        env = make_env(initial_delay_ms=0)
        a = start_join(env, "g", session_ms=60_000, rebalance_ms=REBALANCE_MS)
        await settle()
        first = a.result()
        b = start_join(env, "g", session_ms=60_000, rebalance_ms=REBALANCE_MS)
        r = start_join(env, "g", first.member_id, session_ms=60_000, rebalance_ms=REBALANCE_MS)
        await settle()
        leader, other = await r, await b
        await start_sync(env, "g", leader, {leader.member_id: b"x", other.member_id: b"y"})
        env.advance(REBALANCE_MS)  # other never sent SyncGroup
        group = env.coordinator.group("g")
        assert group is not None and other.member_id not in group.members
        assert group.state is GroupState.PREPARING_REBALANCE

    run(scenario())


# -- errors ----------------------------------------------------------------------------------


def test_generation_and_member_errors() -> None:
    async def scenario() -> None:
        env = make_env(initial_delay_ms=0)
        [m] = await form_group(env, "g", 1)
        c = env.coordinator
        assert c.heartbeat("g", 0, m.member_id, None) == ErrorCode.illegal_generation
        assert c.heartbeat("g", 1, "nobody", None) == ErrorCode.unknown_member_id
        assert c.heartbeat("nogroup", 1, m.member_id, None) == ErrorCode.unknown_member_id
        assert c.heartbeat("", 1, m.member_id, None) == ErrorCode.invalid_group_id
        bad_gen = await c.sync_group("g", 7, m.member_id, None, None, None, {})
        assert bad_gen.error == ErrorCode.illegal_generation
        bad_member = await c.sync_group("g", 1, "nobody", None, None, None, {})
        assert bad_member.error == ErrorCode.unknown_member_id
        wrong_proto = await c.sync_group("g", 1, m.member_id, None, "consumer", "other", {})
        assert wrong_proto.error == ErrorCode.inconsistent_group_protocol
        unknown = await start_join(env, "nogroup", "someone")
        assert unknown.error == ErrorCode.unknown_member_id
        assert (await start_join(env, "g", "stranger")).error == ErrorCode.unknown_member_id
        assert c.leave_group("g", [("nobody", None)]) == [ErrorCode.unknown_member_id]
        assert c.leave_group("nogroup", [("x", None)]) == [ErrorCode.unknown_member_id]

    run(scenario())


def test_sync_during_rebalance_and_after_new_rebalance() -> None:
    async def scenario() -> None:
        env = make_env(initial_delay_ms=0)
        a = await start_join(env, "g")
        b_task = start_join(env, "g")
        await settle()
        sync = await start_sync(env, "g", a)  # generation 1 is being replaced
        assert sync.error == ErrorCode.rebalance_in_progress
        a2_task = start_join(env, "g", a.member_id)
        await settle()
        a2, b = await a2_task, await b_task
        follower = b if a2.members else a2
        waiting = start_sync(env, "g", follower)
        await settle()
        # A third member arrives before the leader syncs: the waiting follower is told.
        start_join(env, "g")
        await settle()
        assert (await waiting).error == ErrorCode.rebalance_in_progress

    run(scenario())


def test_stable_member_rejoining_with_same_protocols_gets_current_generation() -> None:
    async def scenario() -> None:
        env = make_env()
        _leader, follower = await form_group(env, "g", 2)
        again = await start_join(env, "g", follower.member_id)
        assert again.generation_id == 1 and again.members == ()
        assert env.coordinator.group("g").state is GroupState.STABLE  # type: ignore[union-attr]

    run(scenario())


# -- static membership -----------------------------------------------------------------------


def test_static_member_restart_keeps_assignment_and_fences_old_id() -> None:
    async def scenario() -> None:
        env = make_env(initial_delay_ms=0)
        a = start_join(env, "g", instance_id="i-1", require_known=True)
        await settle()
        first = a.result()
        assert first.error == ErrorCode.none  # static members skip MEMBER_ID_REQUIRED
        assert first.member_id.startswith("i-1-")
        b = start_join(env, "g", instance_id="i-2", require_known=True)
        r = start_join(env, "g", first.member_id, instance_id="i-1")
        await settle()
        one, two = await r, await b
        leader = one if one.members else two
        follower = two if leader is one else one
        follower_instance = "i-2" if follower is two else "i-1"
        fsync = start_sync(env, "g", follower, instance_id=follower_instance)
        await settle()
        await start_sync(env, "g", leader, {follower.member_id: b"F", leader.member_id: b"L"},
                         instance_id="i-1" if leader is one else "i-2")
        assert (await fsync).assignment == b"F"

        restarted = await start_join(env, "g", instance_id=follower_instance)
        assert restarted.error == ErrorCode.none
        assert restarted.member_id != follower.member_id
        assert restarted.generation_id == follower.generation_id  # no rebalance
        assert env.coordinator.group("g").state is GroupState.STABLE  # type: ignore[union-attr]
        resync = await start_sync(env, "g", restarted, instance_id=follower_instance)
        assert resync.assignment == b"F"
        assert env.coordinator.heartbeat("g", 2, follower.member_id, follower_instance) == (
            ErrorCode.fenced_instance_id
        )
        # Leave by instance id alone.
        assert env.coordinator.leave_group("g", [("", follower_instance)]) == [0]
        assert env.coordinator.group("g").state is GroupState.PREPARING_REBALANCE  # type: ignore[union-attr]

    run(scenario())


def test_join_while_waiting_replaces_the_earlier_join() -> None:
    async def scenario() -> None:
        env = make_env(initial_delay_ms=3000)
        first = await start_join(env, "g", require_known=True)
        t1 = start_join(env, "g", first.member_id, require_known=True)
        await settle()
        t2 = start_join(env, "g", first.member_id, require_known=True)
        await settle()
        assert t1.result().error == ErrorCode.rebalance_in_progress
        env.advance(3000)
        await settle()
        assert t2.result().error == ErrorCode.none

    run(scenario())


def test_statistics_snapshot() -> None:
    async def scenario() -> None:
        env = make_env(initial_delay_ms=3000)
        start_join(env, "g")
        await settle()
        stats = env.coordinator.statistics()
        assert stats.groups == 1 and stats.members == 1 and stats.waiting_joins == 1
        assert stats.groups_by_state == {"PreparingRebalance": 1}
        env.advance(3000)
        await settle()
        assert env.coordinator.statistics().waiting_joins == 0

    run(scenario())

