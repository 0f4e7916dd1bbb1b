"""The membership decisions called directly, without an event loop (the sans-IO point):
each decision returns its answer (or None: the caller waits) and the events that the async
shell turns into future completions."""

from __future__ import annotations

from typing import Any, TypeVar

from group_support import PROTOCOLS, REBALANCE_MS, SESSION_MS

from oncelog.clock import FakeClock
from oncelog.config import BrokerConfig
from oncelog.coordinator.group.membership import (
    AwaitJoin,
    AwaitSync,
    Decision,
    Deliver,
    GroupMembership,
)
from oncelog.coordinator.group.results import JoinResult, SyncResult
from oncelog.coordinator.group.state import GroupState
from oncelog.coordinator.group.store import MemoryOffsetsStore
from oncelog.coordinator.group.table import GroupTable
from oncelog.errors import ErrorCode

R = TypeVar("R", JoinResult, SyncResult)


def make(initial_delay_ms: int = 0) -> tuple[GroupMembership, GroupTable, FakeClock]:
    config = BrokerConfig({"group.initial.rebalance.delay.ms": str(initial_delay_ms)})
    clock = FakeClock()
    table = GroupTable(MemoryOffsetsStore(), clock)
    return GroupMembership(config, table), table, clock


def join(m: GroupMembership, member_id: str = "", *, instance_id: str | None = None,
         client_id: str = "c") -> Decision[JoinResult]:
    return m.join("g", member_id, instance_id, "consumer", PROTOCOLS, SESSION_MS,
                  REBALANCE_MS, client_id, "/127.0.0.1", False)


def joined(decision: Decision[JoinResult]) -> JoinResult:
    """The JoinResult a decision delivers to the member that waits in it."""
    waiting = [e for e in decision.events if isinstance(e, AwaitJoin)]
    assert len(waiting) == 1
    return delivered(decision, waiting[0].member_id, JoinResult)


def delivered(decision: Decision[Any], member_id: str, kind: type[R]) -> R:
    results = [e.result for e in decision.events
               if isinstance(e, Deliver) and e.member_id == member_id
               and isinstance(e.result, kind)]
    assert len(results) == 1, decision.events
    result = results[0]
    assert isinstance(result, kind)
    return result


def test_a_lone_member_waits_and_its_own_decision_answers_it() -> None:
    m, table, _ = make(initial_delay_ms=0)
    decision = join(m)
    assert decision.answer is None  # the caller waits...
    assert isinstance(decision.events[0], AwaitJoin)  # ...for a waiter created first...
    result = joined(decision)  # ...which the same decision answers (no initial delay)
    assert result.error == ErrorCode.none
    assert result.generation_id == 1 and result.leader_id == result.member_id
    assert [mem.member_id for mem in result.members] == [result.member_id]
    group = table.get("g")
    assert group is not None and group.state is GroupState.COMPLETING_REBALANCE
    assert decision.reschedule  # a sync deadline now exists


def test_the_initial_delay_ends_in_a_sweep_that_delivers_to_every_member() -> None:
    m, table, clock = make(initial_delay_ms=3000)
    first, second = join(m, client_id="a"), join(m, client_id="b")
    assert first.answer is None and second.answer is None
    assert not any(isinstance(e, Deliver) for e in first.events + second.events)
    ids = [e.member_id for e in first.events + second.events if isinstance(e, AwaitJoin)]
    clock.advance(3000)
    sweep: Decision[Any] = m.sweep()
    if not any(isinstance(e, Deliver) for e in sweep.events):  # brand-new group: one more
        clock.advance(3000)
        sweep = m.sweep()
    results = [delivered(sweep, mid, JoinResult) for mid in ids]
    assert {r.generation_id for r in results} == {1}
    leader = next(r for r in results if r.member_id == r.leader_id)
    assert len(leader.members) == 2
    assert all(not r.members for r in results if r is not leader)
    group = table.get("g")
    assert group is not None and group.state is GroupState.COMPLETING_REBALANCE


def test_sync_followers_wait_and_the_leaders_sync_delivers_assignments() -> None:
    m, table, _ = make()
    leader = joined(join(m))
    follower_join = join(m, client_id="f")  # a new member: the group rebalances
    assert follower_join.answer is None
    leader_rejoin = join(m, leader.member_id)  # the leader rejoins: the join phase ends
    leader = delivered(leader_rejoin, leader.member_id, JoinResult)
    follower_id = next(e.member_id for e in follower_join.events if isinstance(e, AwaitJoin))
    follower = delivered(leader_rejoin, follower_id, JoinResult)
    assert leader.generation_id == follower.generation_id == 2

    follower_sync = m.sync("g", 2, follower.member_id, None, "consumer",
                           follower.protocol_name, {})
    assert follower_sync.answer is None
    assert follower_sync.events == (AwaitSync("g", follower.member_id),)
    assignments = {leader.member_id: b"L", follower.member_id: b"F"}
    leader_sync = m.sync("g", 2, leader.member_id, None, "consumer", leader.protocol_name,
                         assignments)
    assert leader_sync.answer is None
    assert delivered(leader_sync, leader.member_id, SyncResult).assignment == b"L"
    assert delivered(leader_sync, follower.member_id, SyncResult).assignment == b"F"
    group = table.get("g")
    assert group is not None and group.state is GroupState.STABLE


def test_session_expiry_is_decided_by_the_sweep_at_the_deadline() -> None:
    m, table, clock = make()
    leader = joined(join(m))
    m.sync("g", 1, leader.member_id, None, "consumer", leader.protocol_name,
           {leader.member_id: b"a"})
    deadline = m.next_deadline()
    assert deadline == clock.monotonic_ms() + SESSION_MS
    clock.advance(SESSION_MS - 1)
    assert m.heartbeat("g", 1, leader.member_id, None) == ErrorCode.none  # session renewed
    clock.advance(SESSION_MS - 1)
    m.sweep()
    group = table.get("g")
    assert group is not None and leader.member_id in group.members
    clock.advance(1)
    m.sweep()
    assert not group.members
    assert group.state is GroupState.EMPTY


def test_a_restarted_static_member_fences_the_old_ids_waiting_calls() -> None:
    m, table, _ = make()
    old = joined(join(m, instance_id="i1"))
    restarted = join(m, instance_id="i1")  # the same instance, restarted: a new member id
    assert delivered(restarted, old.member_id, JoinResult).error == ErrorCode.fenced_instance_id
    assert delivered(restarted, old.member_id, SyncResult).error == ErrorCode.fenced_instance_id
    assert restarted.answer is None  # the leader restarted: the group rebalances
    new_result = joined(restarted)
    assert new_result.member_id != old.member_id
    assert new_result.error == ErrorCode.none and new_result.generation_id == 2
    group = table.get("g")
    assert group is not None and group.static_members == {"i1": new_result.member_id}
    assert m.heartbeat("g", 1, old.member_id, "i1") == ErrorCode.fenced_instance_id


def test_leaving_answers_and_rebalances_without_a_loop() -> None:
    m, table, _ = make()
    leader = joined(join(m))
    m.sync("g", 1, leader.member_id, None, "consumer", leader.protocol_name, {})
    decision = m.leave("g", [(leader.member_id, None), ("nobody", None)])
    assert decision.answer == [ErrorCode.none, ErrorCode.unknown_member_id]
    group = table.get("g")
    assert group is not None and group.state is GroupState.EMPTY
