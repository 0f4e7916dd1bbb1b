"""Committed offsets, reloading from the store, admin operations (list, describe, delete),
offset retention, and the background loop."""

from __future__ import annotations

import asyncio

from group_support import form_group, make_env, settle, start_join, start_sync

from oncelog.clock import SystemClock
from oncelog.config import BrokerConfig
from oncelog.coordinator.group import codec
from oncelog.coordinator.group.coordinator import GroupCoordinator
from oncelog.coordinator.group.metadata import CommittedOffset
from oncelog.coordinator.group.offsets import OFFSETS_RETENTION_CHECK_INTERVAL_MS
from oncelog.coordinator.group.results import OffsetFetchEntry
from oncelog.coordinator.group.state import GroupState
from oncelog.coordinator.group.store import MemoryOffsetsStore
from oncelog.coordinator.store_errors import StoreWrite, translate_store_error
from oncelog.errors import ErrorCode


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(asyncio.wait_for(coro, timeout=5))


NONE = ErrorCode.none


# -- commits and fetches ---------------------------------------------------------------------


def test_standalone_commit_creates_group_and_fetch_returns_it() -> None:
    env = make_env()
    c = env.coordinator
    result = c.commit_offsets("simple", -1, "", None,
                              {("t", 0): (10, 3, "meta"), ("t", 1): (20, -1, None)})
    assert result == {("t", 0): NONE, ("t", 1): NONE}
    fetched = c.fetch_offsets("simple", [("t", 0), ("t", 1), ("t", 2), ("u", 0)])
    assert fetched[("t", 0)] == OffsetFetchEntry(10, 3, "meta", NONE)
    assert fetched[("t", 1)] == (20, -1, "", NONE)  # unpacks as a plain tuple too
    assert fetched[("t", 2)] == (-1, -1, "", NONE)
    assert fetched[("u", 0)] == (-1, -1, "", NONE)
    assert set(c.fetch_offsets("simple", None)) == {("t", 0), ("t", 1)}
    group = c.group("simple")
    assert group is not None and group.state is GroupState.EMPTY
    # Written to the group's own partition, one record per offset.
    partition = codec.partition_for("simple", env.store.num_partitions)
    assert len(env.store.partitions[partition]) == 2


def test_fetch_for_unknown_group() -> None:
    c = make_env().coordinator
    assert c.fetch_offsets("nobody", None) == {}
    assert c.fetch_offsets("nobody", [("t", 0)]) == {("t", 0): (-1, -1, "", NONE)}


def test_commit_overwrites_and_last_write_wins() -> None:
    c = make_env().coordinator
    c.commit_offsets("g", -1, "", None, {("t", 0): (1, -1, "")})
    c.commit_offsets("g", -1, "", None, {("t", 0): (7, -1, "x")})
    assert c.fetch_offsets("g", [("t", 0)])[("t", 0)] == (7, -1, "x", NONE)


def test_commit_rules_for_group_members() -> None:
    async def scenario() -> None:
        env = make_env(initial_delay_ms=0)
        c = env.coordinator
        [m] = await form_group(env, "g", 1)
        tp = ("t", 0)
        assert c.commit_offsets("g", 1, m.member_id, None, {tp: (5, -1, "")}) == {tp: NONE}
        assert c.commit_offsets("g", 0, m.member_id, None, {tp: (6, -1, "")}) == {
            tp: ErrorCode.illegal_generation
        }
        assert c.commit_offsets("g", 1, "nobody", None, {tp: (6, -1, "")}) == {
            tp: ErrorCode.unknown_member_id
        }
        # A group with members does not take standalone commits.
        assert c.commit_offsets("g", -1, "", None, {tp: (6, -1, "")}) == {
            tp: ErrorCode.unknown_member_id
        }
        # An unknown group only takes standalone commits.
        assert c.commit_offsets("other", 3, "m", None, {tp: (1, -1, "")}) == {
            tp: ErrorCode.illegal_generation
        }
        assert c.fetch_offsets("g", [tp])[tp].offset == 5

    run(scenario())


def test_commit_while_completing_rebalance() -> None:
    async def scenario() -> None:
        env = make_env(initial_delay_ms=0)
        c = env.coordinator
        join = await start_join(env, "g")  # alone, delay 0: CompletingRebalance at once
        assert c.group("g").state is GroupState.COMPLETING_REBALANCE  # type: ignore[union-attr]
        assert c.commit_offsets("g", 1, join.member_id, None, {("t", 0): (1, -1, "")}) == {
            ("t", 0): ErrorCode.rebalance_in_progress
        }

    run(scenario())


def test_metadata_too_large_rejects_only_that_partition() -> None:
    env = make_env(offset_metadata_max_bytes=8)
    result = env.coordinator.commit_offsets(
        "g", -1, "", None, {("t", 0): (1, -1, "12345678"), ("t", 1): (1, -1, "123456789")}
    )
    assert result == {("t", 0): NONE, ("t", 1): ErrorCode.offset_metadata_too_large}
    assert env.coordinator.fetch_offsets("g", [("t", 1)])[("t", 1)].offset == -1


def test_store_failure_is_translated_and_nothing_is_applied() -> None:
    env = make_env()
    env.store.fail_with = ErrorCode.not_leader_or_follower
    result = env.coordinator.commit_offsets("g", -1, "", None, {("t", 0): (1, -1, "")})
    assert result == {("t", 0): ErrorCode.not_coordinator}
    assert env.coordinator.group("g") is None
    assert env.coordinator.fetch_offsets("g", [("t", 0)])[("t", 0)].offset == -1


def test_store_error_translation_table() -> None:
    def t(code: ErrorCode, *, for_commit: bool) -> ErrorCode:
        write = StoreWrite.OFFSET_COMMIT if for_commit else StoreWrite.GROUP_METADATA
        return translate_store_error(code, write)

    assert t(ErrorCode.unknown_topic_or_partition, for_commit=True) == (
        ErrorCode.coordinator_not_available
    )
    assert t(ErrorCode.request_timed_out, for_commit=True) == ErrorCode.coordinator_not_available
    assert t(ErrorCode.request_timed_out, for_commit=False) == ErrorCode.rebalance_in_progress
    assert t(ErrorCode.kafka_storage_error, for_commit=False) == ErrorCode.not_coordinator
    assert t(ErrorCode.message_too_large, for_commit=True) == ErrorCode.invalid_commit_offset_size
    assert t(ErrorCode.record_list_too_large, for_commit=False) == ErrorCode.unknown_server_error
    assert t(ErrorCode.invalid_request, for_commit=True) == ErrorCode.invalid_request


def test_failed_assignment_store_tells_members_and_rebalances() -> None:
    async def scenario() -> None:
        env = make_env(initial_delay_ms=0)
        join = await start_join(env, "g")
        env.store.fail_with = ErrorCode.not_enough_replicas
        sync = await start_sync(env, "g", join, {join.member_id: b"a"})
        assert sync.error == ErrorCode.coordinator_not_available
        assert env.coordinator.group("g").state is GroupState.PREPARING_REBALANCE  # type: ignore[union-attr]

    run(scenario())


def test_require_stable_reports_pending_transactional_offsets() -> None:
    env = make_env()
    c = env.coordinator
    c.commit_offsets("g", -1, "", None, {("t", 0): (1, -1, "")})
    group = c.group("g")
    assert group is not None
    # What TxnOffsetCommit will leave behind until the transaction's marker.
    group.pending_txn_offsets[1000] = {("t", 0): CommittedOffset(9, -1, "", 0)}
    assert c.fetch_offsets("g", [("t", 0)])[("t", 0)].offset == 1
    stable = c.fetch_offsets("g", [("t", 0)], require_stable=True)
    assert stable[("t", 0)].error == ErrorCode.unstable_offset_commit


# -- reloading -------------------------------------------------------------------------------


def test_reload_rebuilds_offsets_groups_and_honours_tombstones() -> None:
    async def scenario() -> None:
        env = make_env(initial_delay_ms=3000)
        c = env.coordinator
        leader, follower = await form_group(env, "live", 2)
        c.commit_offsets("live", 1, leader.member_id, None, {("t", 0): (100, 4, "m")})
        c.commit_offsets("live", 1, leader.member_id, None, {("t", 0): (150, 5, "n")})
        c.commit_offsets("gone", -1, "", None, {("t", 0): (1, -1, "")})
        assert c.delete_groups(["gone"]) == {"gone": NONE}
        c.commit_offsets("later", -1, "", None, {("a", 0): (1, -1, ""), ("a", 1): (2, -1, "")})
        # An offset tombstone written directly, as offset expiry or OffsetDelete would.
        key = codec.encode_offset_key(codec.OffsetCommitKey("later", "a", 1))
        env.store.append(codec.partition_for("later", env.store.num_partitions), [(key, None)])

        fresh = env.reloaded()
        assert fresh.fetch_offsets("live", None) == {("t", 0): (150, 5, "n", NONE)}
        assert fresh.fetch_offsets("gone", None) == {}
        assert fresh.group("gone") is None
        assert fresh.fetch_offsets("later", None) == {("a", 0): (1, -1, "", NONE)}

        live = fresh.group("live")
        assert live is not None
        assert live.state is GroupState.STABLE
        assert live.generation_id == 1
        assert live.leader_id == leader.member_id
        assert live.protocol_name == "range"
        assert list(live.members) == [leader.member_id, follower.member_id]
        assert live.members[follower.member_id].assignment == (
            f"assignment-{follower.member_id}".encode()
        )
        assert fresh.statistics().records_loaded == env.store.record_count()
        # Members carry on with the loaded generation.
        assert fresh.heartbeat("live", 1, follower.member_id, None) == NONE
        resync = await fresh.sync_group("live", 1, follower.member_id, None, None, None, {})
        assert resync.assignment == f"assignment-{follower.member_id}".encode()

    run(scenario())


def test_reload_of_empty_group_and_expiry_of_loaded_members() -> None:
    async def scenario() -> None:
        env = make_env(initial_delay_ms=0)
        [m] = await form_group(env, "g", 1)
        env.coordinator.leave_group("g", [(m.member_id, None)])
        await form_group(env, "h", 1)
        fresh = env.reloaded()
        g = fresh.group("g")
        assert g is not None and g.state is GroupState.EMPTY and g.generation_id == 2
        h = fresh.group("h")
        assert h is not None and h.state is GroupState.STABLE
        # Nobody heartbeats after the restart: the loaded member expires.
        env.clock.advance(10_000)
        fresh.tick()
        assert h.state is GroupState.EMPTY and not h.members

    run(scenario())


def test_load_skips_corrupt_and_foreign_records() -> None:
    store = MemoryOffsetsStore(1)
    good_key = codec.encode_offset_key(codec.OffsetCommitKey("g", "t", 0))
    good_value = codec.encode_offset_value(codec.OffsetCommitValue(3, -1, "", 0))
    store.append(
        0,
        [
            (b"\x00", b"junk"),  # corrupt key
            (b"\x00\x05\x00\x01g", b"whatever"),  # a newer record type
            (good_key, b"\x00\x09bad"),  # unknown value version
            (good_key, good_value),
        ],
    )
    c = GroupCoordinator(BrokerConfig(), store, make_env().clock)
    c.load()
    assert c.fetch_offsets("g", None) == {("t", 0): (3, -1, "", NONE)}


# -- list, describe, delete ------------------------------------------------------------------


def test_list_describe_delete() -> None:
    async def scenario() -> None:
        env = make_env(initial_delay_ms=0)
        c = env.coordinator
        [m] = await form_group(env, "active", 1)
        c.commit_offsets("simple", -1, "", None, {("t", 0): (1, -1, "")})

        listed = {g.group_id: g for g in c.list_groups()}
        assert listed["active"].state == "Stable" and listed["active"].protocol_type == "consumer"
        assert listed["simple"].state == "Empty" and listed["simple"].protocol_type == ""
        assert [g.group_id for g in c.list_groups(["empty"])] == ["simple"]

        active, simple, missing = c.describe_groups(["active", "simple", "missing"])
        assert active.state == "Stable" and active.protocol == "range"
        [member] = active.members
        assert member.member_id == m.member_id and member.client_id == "c0"
        assert member.metadata == b"sub-range"
        assert member.assignment == f"assignment-{m.member_id}".encode()
        assert simple.state == "Empty" and simple.members == ()
        assert missing.error == ErrorCode.group_id_not_found and missing.state == "Dead"

        assert c.delete_groups(["active", "simple", "missing"]) == {
            "active": ErrorCode.non_empty_group,
            "simple": NONE,
            "missing": ErrorCode.group_id_not_found,
        }
        assert c.group("simple") is None
        assert c.fetch_offsets("simple", None) == {}

    run(scenario())


def test_describe_hides_metadata_while_rebalancing() -> None:
    async def scenario() -> None:
        env = make_env(initial_delay_ms=3000)
        start_join(env, "g")
        await settle()
        [d] = env.coordinator.describe_groups(["g"])
        assert d.state == "PreparingRebalance" and d.protocol == ""
        assert d.members[0].metadata == b"" and d.members[0].assignment == b""

    run(scenario())


# -- retention -------------------------------------------------------------------------------


def test_offsets_of_empty_groups_expire_after_retention() -> None:
    env = make_env(offsets_retention_minutes=1)
    c = env.coordinator
    c.commit_offsets("g", -1, "", None, {("t", 0): (1, -1, "")})
    env.clock.advance(30_000)
    c.commit_offsets("g", -1, "", None, {("t", 1): (1, -1, "")})
    env.advance(OFFSETS_RETENTION_CHECK_INTERVAL_MS)  # both are older than a minute by now
    assert c.group("g") is None
    fresh = env.reloaded()
    assert fresh.group("g") is None


def test_partial_expiry_keeps_group() -> None:
    env = make_env(offsets_retention_minutes=15)
    c = env.coordinator
    c.commit_offsets("g", -1, "", None, {("t", 0): (1, -1, "")})
    env.clock.advance(OFFSETS_RETENTION_CHECK_INTERVAL_MS)
    c.commit_offsets("g", -1, "", None, {("t", 1): (1, -1, "")})
    env.advance(OFFSETS_RETENTION_CHECK_INTERVAL_MS)  # 20 min after the first, 10 after
    assert set(c.fetch_offsets("g", None)) == {("t", 1)}


# -- the background loop ---------------------------------------------------------------------


def test_run_loop_completes_initial_delay_promptly_and_cancels_cleanly() -> None:
    async def scenario() -> None:
        config = BrokerConfig({"group.initial.rebalance.delay.ms": "50"})
        c = GroupCoordinator(config, MemoryOffsetsStore(4), SystemClock())
        loop = asyncio.get_running_loop()
        runner = asyncio.create_task(c.run())
        started = loop.time()
        result = await c.join_group("g", "", None, "consumer", [("range", b"")], 10_000,
                                    300_000, "cid", "/h", False)
        elapsed = loop.time() - started
        assert result.error == NONE and result.generation_id == 1
        assert 0.04 <= elapsed < 0.9  # the delay, not the 1 s sweep cap or any timeout

        # A join waiting when the loop is cancelled is answered, not left hanging.
        waiting = asyncio.create_task(
            c.join_group("g", "", None, "consumer", [("range", b"")], 10_000, 300_000,
                         "cid", "/h", False)
        )
        await settle()
        runner.cancel()
        try:
            await runner
        except asyncio.CancelledError:
            pass
        assert (await waiting).error == ErrorCode.not_coordinator

    run(scenario())
