"""The group coordinator follows the leadership of ``__consumer_offsets`` partitions
(Kafka's GroupCoordinator onElection / onResignation): in cluster mode it answers only for
groups of the partitions it loaded, COORDINATOR_LOAD_IN_PROGRESS while one loads,
NOT_COORDINATOR elsewhere; loading replays one partition (pending transactional offsets
included, completed by a later marker); unloading drops its groups, answers waiting members
NOT_COORDINATOR and stops their timers."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import pytest
from group_support import SESSION_MS, Env, form_group, make_env, settle, start_join

from oncelog.coordinator.group.coordinator import GroupCoordinator
from oncelog.coordinator.group.results import OffsetFetchEntry, TopicPartition
from oncelog.errors import ErrorCode, KafkaError

NONE = ErrorCode.none
NOT_COORDINATOR = ErrorCode.not_coordinator
LOADING = ErrorCode.coordinator_load_in_progress
PARTITIONS = 4
TP: TopicPartition = ("t", 0)
PID = 7000


def run(coro: Coroutine[Any, Any, None]) -> None:
    asyncio.run(asyncio.wait_for(coro, timeout=5))


def group_on(c: GroupCoordinator, partition: int, prefix: str = "g") -> str:
    """A group id placed on ``partition``."""
    return next(f"{prefix}{i}" for i in range(1000) if c.partition_for(f"{prefix}{i}") == partition)


def partitioned(env: Env) -> GroupCoordinator:
    """A cluster-mode coordinator over the same store, owning no partition yet."""
    c = GroupCoordinator(env.config, env.store, env.clock)
    c.start_partitioned()
    return c


def commit(c: GroupCoordinator, group: str, offset: int) -> ErrorCode:
    [error] = c.commit_offsets(group, -1, "", None, {TP: (offset, -1, "")}).values()
    return error


def every_api_error(c: GroupCoordinator, group: str) -> list[ErrorCode]:
    """What each synchronous group API answers for ``group``."""
    errors = [
        commit(c, group, 1),
        *c.commit_txn_offsets("tx", group, PID, 0, -1, "", None, {TP: (1, -1, "")}).values(),
        c.heartbeat(group, 1, "m", None),
        *c.delete_groups([group]).values(),
        c.delete_offsets(group, [TP])[0],
        c.describe_groups([group])[0].error,
    ]
    for call in (lambda: c.fetch_offsets(group, [TP]), lambda: c.leave_group(group, [("m", None)])):
        with pytest.raises(KafkaError) as raised:
            call()
        errors.append(raised.value.code)
    return errors


def test_a_partitioned_coordinator_answers_not_coordinator_until_it_loads() -> None:
    async def scenario() -> None:
        env = make_env(partitions=PARTITIONS)
        c = partitioned(env)
        group = group_on(c, 1)
        assert every_api_error(c, group) == [NOT_COORDINATOR] * 8
        assert (await c.join_group(group, "", None, "consumer", [("range", b"")], SESSION_MS,
                                   SESSION_MS, "c", "h", False)).error is NOT_COORDINATOR
        assert (await c.sync_group(group, 1, "m", None, None, None, {})).error is NOT_COORDINATOR
        assert env.store.record_count() == 0
        c.load_partition(1, 3)
        assert c.owned_partitions() == {1: 3}
        assert commit(c, group, 5) is NONE
        assert c.fetch_offsets(group, [TP]) == {TP: OffsetFetchEntry(5, -1, "", NONE)}
        # Another partition's groups are still someone else's.
        assert commit(c, group_on(c, 2), 5) is NOT_COORDINATOR

    run(scenario())


def test_while_loading_each_api_answers_as_kafka_does() -> None:
    async def scenario() -> None:
        env = make_env(partitions=PARTITIONS)
        c = partitioned(env)
        group = group_on(c, 0)
        c.begin_loading(0)
        assert c.loading
        # Heartbeat answers blindly (no error), the others COORDINATOR_LOAD_IN_PROGRESS.
        assert every_api_error(c, group) == [LOADING, LOADING, NONE, LOADING, LOADING,
                                             LOADING, LOADING, LOADING]
        assert (await c.join_group(group, "", None, "consumer", [("range", b"")], SESSION_MS,
                                   SESSION_MS, "c", "h", False)).error is LOADING
        # SyncGroup: the rebalance state is lost; the member rejoins.
        assert (await c.sync_group(group, 1, "m", None, None, None, {})).error is (
            ErrorCode.rebalance_in_progress)
        c.load_partition(0, 1)
        assert not c.loading
        assert commit(c, group, 1) is NONE

    run(scenario())


def test_load_partition_replays_only_that_partition_and_markers_complete_its_offsets() -> None:
    env = make_env(partitions=PARTITIONS)
    old = env.coordinator  # the previous leader (one node: owns every partition)
    mine, other = group_on(old, 1), group_on(old, 2)
    assert commit(old, mine, 10) is NONE
    assert commit(old, other, 20) is NONE
    txn = old.commit_txn_offsets("tx", mine, PID, 2, -1, "", None, {TP: (11, -1, "")})
    assert txn == {TP: NONE}

    c = partitioned(env)
    assert c.load_partition(1, 4) == 1
    assert c.fetch_offsets(mine, [TP]) == {TP: OffsetFetchEntry(10, -1, "", NONE)}
    assert c.fetch_offsets(mine, [TP], require_stable=True)[TP].error is (
        ErrorCode.unstable_offset_commit)
    assert c.group(other) is None
    # The transaction's COMMIT marker, written on this leader by WriteTxnMarkers.
    env.store.append_marker(1, PID, 2, True)
    c.on_txn_marker(1, PID, True, 2)
    assert c.fetch_offsets(mine, [TP], require_stable=True) == {
        TP: OffsetFetchEntry(11, -1, "", NONE)}
    # A newer commit after the load wins over everything replayed.
    assert commit(c, mine, 12) is NONE
    fresh = partitioned(env)
    fresh.load_partition(1, 5)
    assert fresh.fetch_offsets(mine, [TP])[TP].offset == 12


def test_unload_drops_the_groups_answers_waiting_members_and_stops_their_timers() -> None:
    async def scenario() -> None:
        env = make_env(initial_delay_ms=0, partitions=PARTITIONS)
        c = env.coordinator = partitioned(env)
        c.load_partition(3, 1)
        group = group_on(c, 3)
        [member] = await form_group(env, group, 1)
        assert commit(c, group, 1) is not NONE  # a group with members: no standalone commit
        # A second member joins: a rebalance starts and its JoinGroup waits for the first.
        waiting = start_join(env, group, client_id="late")
        await settle()
        assert not waiting.done()
        records = env.store.record_count()

        assert c.unload_partition(3) == 1
        assert (await waiting).error is NOT_COORDINATOR
        assert c.heartbeat(group, member.generation_id, member.member_id, None) is (
            NOT_COORDINATOR)
        assert c.statistics().groups == 0 and c.statistics().waiting_joins == 0
        # Sessions and the rebalance would have expired by now: nothing is written for
        # the unloaded group (its timers stopped with it).
        env.advance(10 * SESSION_MS)
        assert env.store.record_count() == records
        assert c.owned_partitions() == {}

        # Led again later (a newer epoch): the group is back as its log has it.
        c.load_partition(3, 2)
        assert c.owned_partitions() == {3: 2}
        assert c.describe_groups([group])[0].members[0].member_id == member.member_id

    run(scenario())


def test_a_single_node_owns_every_partition() -> None:
    env = make_env(partitions=PARTITIONS)
    c = env.reloaded()
    assert c.owned_partitions() == dict.fromkeys(range(PARTITIONS), 0)
    assert all(commit(c, group_on(c, p), 1) is NONE for p in range(PARTITIONS))
