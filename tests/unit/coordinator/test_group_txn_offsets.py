"""Transactional offset commits in the group coordinator: pending per producer, applied on
the COMMIT marker, dropped on ABORT, KIP-447 member checks, producer epoch fencing, and the
same state rebuilt from the offsets log (transactional batches and markers) on reload."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from group_support import Env, form_group, make_env

from oncelog.coordinator.group import codec
from oncelog.coordinator.group.coordinator import GroupCoordinator
from oncelog.coordinator.group.metadata import CommittedOffset
from oncelog.coordinator.group.results import OffsetFetchEntry, TopicPartition
from oncelog.coordinator.group.store import StoredRecord
from oncelog.errors import ErrorCode
from oncelog.records.control import ControlType

NONE = ErrorCode.none
T0: TopicPartition = ("t", 0)
T1: TopicPartition = ("t", 1)
PID = 4000
PID2 = 4001


def run(coro: Coroutine[Any, Any, None]) -> None:
    asyncio.run(asyncio.wait_for(coro, timeout=5))


def txn_commit(
    c: GroupCoordinator,
    group: str,
    offsets: dict[TopicPartition, int],
    *,
    pid: int = PID,
    epoch: int = 0,
    generation: int = -1,
    member: str = "",
    instance: str | None = None,
    metadata: str | None = "",
) -> dict[TopicPartition, ErrorCode]:
    return c.commit_txn_offsets(
        transactional_id=f"txn-{pid}",
        group_id=group,
        producer_id=pid,
        producer_epoch=epoch,
        generation_id=generation,
        member_id=member,
        group_instance_id=instance,
        offsets={tp: (offset, -1, metadata) for tp, offset in offsets.items()},
    )


def plain_commit(c: GroupCoordinator, group: str, offsets: dict[TopicPartition, int]) -> None:
    result = c.commit_offsets(group, -1, "", None,
                              {tp: (o, -1, "") for tp, o in offsets.items()})
    assert set(result.values()) == {NONE}


def committed(c: GroupCoordinator, group: str, tp: TopicPartition = T0) -> int:
    return c.fetch_offsets(group, [tp])[tp].offset


def marker(env: Env, group: str, pid: int, commit: bool, epoch: int = 0) -> None:
    """What the broker does for a marker: append it to the offsets partition, then tell
    the coordinator."""
    partition = env.coordinator.partition_for(group)
    env.store.append_marker(partition, pid, epoch, commit)
    env.coordinator.on_txn_marker(partition, pid, commit, epoch)


def groups_on_one_partition(env: Env, count: int) -> list[str]:
    by_partition: dict[int, list[str]] = {}
    for i in range(1000):
        name = f"group-{i}"
        same = by_partition.setdefault(env.coordinator.partition_for(name), [])
        same.append(name)
        if len(same) == count:
            return same
    raise AssertionError("no partition with enough groups")


def view(c: GroupCoordinator, group: str) -> tuple[
    dict[TopicPartition, OffsetFetchEntry], dict[int, dict[TopicPartition, int]]
]:
    """What a client can see of a group, and what is pending per producer."""
    g = c.group(group)
    pending = {} if g is None else {
        pid: {tp: co.offset for tp, co in offsets.items()}
        for pid, offsets in g.pending_txn_offsets.items()
    }
    return c.fetch_offsets(group, None), pending


# -- visibility ------------------------------------------------------------------------------


def test_offsets_are_invisible_until_the_commit_marker() -> None:
    env = make_env(partitions=5)
    c = env.coordinator
    plain_commit(c, "g", {T0: 1})
    assert txn_commit(c, "g", {T0: 9, T1: 19}) == {T0: NONE, T1: NONE}

    # Durably in the log as the producer's transactional batch...
    records = env.store.partitions[c.partition_for("g")]
    txn_records = [r for r in records if r.transactional]
    assert len(txn_records) == 2
    assert {(r.producer_id, r.producer_epoch, r.control) for r in txn_records} == {(PID, 0, None)}
    assert codec.decode_offset_value(txn_records[0].value or b"").offset == 9
    # ...but not committed yet.
    assert committed(c, "g") == 1
    assert c.fetch_offsets("g", [T1]) == {T1: (-1, -1, "", NONE)}
    stable = c.fetch_offsets("g", [T0, T1, ("t", 2)], require_stable=True)
    assert stable[T0].error == ErrorCode.unstable_offset_commit
    assert stable[T1].error == ErrorCode.unstable_offset_commit
    assert stable[("t", 2)] == (-1, -1, "", NONE)
    assert c.statistics().pending_txn_offsets == 2

    marker(env, "g", PID, commit=True)
    assert committed(c, "g") == 9
    assert committed(c, "g", T1) == 19
    assert c.fetch_offsets("g", [T0, T1], require_stable=True) == {
        T0: (9, -1, "", NONE), T1: (19, -1, "", NONE)
    }
    assert c.statistics().pending_txn_offsets == 0


def test_abort_marker_drops_the_pending_offsets() -> None:
    env = make_env(partitions=5)
    c = env.coordinator
    plain_commit(c, "g", {T0: 1})
    txn_commit(c, "g", {T0: 9})
    marker(env, "g", PID, commit=False)
    assert committed(c, "g") == 1
    assert c.fetch_offsets("g", [T0], require_stable=True)[T0] == (1, -1, "", NONE)
    assert view(c, "g")[1] == {}
    # A later marker of the same producer finds nothing to apply.
    marker(env, "g", PID, commit=True)
    assert committed(c, "g") == 1


def test_several_commits_in_one_transaction_keep_the_last_per_partition() -> None:
    env = make_env(partitions=5)
    c = env.coordinator
    txn_commit(c, "g", {T0: 5})
    txn_commit(c, "g", {T0: 7, T1: 3})
    marker(env, "g", PID, commit=True)
    assert (committed(c, "g"), committed(c, "g", T1)) == (7, 3)


def test_markers_of_other_producers_and_partitions_change_nothing() -> None:
    env = make_env(partitions=5)
    c = env.coordinator
    txn_commit(c, "g", {T0: 9})
    partition = c.partition_for("g")
    c.on_txn_marker(partition, PID2, True)
    c.on_txn_marker((partition + 1) % 5, PID, True)
    assert committed(c, "g") == -1
    assert view(c, "g")[1] == {PID: {T0: 9}}
    c.on_txn_marker(partition, PID, True)
    assert committed(c, "g") == 9


def test_a_commit_marker_applies_to_every_group_of_the_partition() -> None:
    env = make_env(partitions=3)
    c = env.coordinator
    a, b, other = groups_on_one_partition(env, 3)
    txn_commit(c, a, {T0: 10})
    txn_commit(c, b, {T0: 20, T1: 21})
    txn_commit(c, other, {T0: 30}, pid=PID2)
    marker(env, a, PID, commit=True)
    assert committed(c, a) == 10
    assert (committed(c, b), committed(c, b, T1)) == (20, 21)
    assert committed(c, other) == -1  # another producer's transaction is still open
    assert view(c, other)[1] == {PID2: {T0: 30}}
    marker(env, other, PID2, commit=False)
    assert committed(c, other) == -1 and view(c, other)[1] == {}


def test_two_producers_pending_on_one_group() -> None:
    env = make_env(partitions=5)
    c = env.coordinator
    txn_commit(c, "g", {T0: 10})
    txn_commit(c, "g", {T0: 20}, pid=PID2)
    marker(env, "g", PID2, commit=True)
    assert committed(c, "g") == 20
    # PID's offset was written before PID2's: committing it later does not move T0 back.
    marker(env, "g", PID, commit=True)
    assert committed(c, "g") == 20


def test_a_plain_commit_written_after_the_transactional_one_wins() -> None:
    env = make_env(partitions=5)
    c = env.coordinator
    txn_commit(c, "g", {T0: 9, T1: 19})
    plain_commit(c, "g", {T0: 50})
    marker(env, "g", PID, commit=True)
    assert committed(c, "g") == 50  # later in the log
    assert committed(c, "g", T1) == 19
    fresh = env.reloaded()
    assert view(fresh, "g") == view(c, "g")


def test_a_transaction_can_create_a_standalone_group() -> None:
    env = make_env(partitions=5)
    c = env.coordinator
    assert txn_commit(c, "fresh", {T0: 3}) == {T0: NONE}
    assert c.group("fresh") is not None
    assert committed(c, "fresh") == -1
    marker(env, "fresh", PID, commit=True)
    assert committed(c, "fresh") == 3


# -- request checks --------------------------------------------------------------------------


def test_kip_447_member_checks() -> None:
    async def scenario() -> None:
        env = make_env(initial_delay_ms=0, partitions=5)
        c = env.coordinator
        [m] = await form_group(env, "g", 1)
        gen = m.generation_id
        assert txn_commit(c, "g", {T0: 1}, generation=gen + 1, member=m.member_id) == {
            T0: ErrorCode.illegal_generation
        }
        assert txn_commit(c, "g", {T0: 1}, generation=gen, member="stranger") == {
            T0: ErrorCode.unknown_member_id
        }
        assert txn_commit(c, "g", {T0: 1}, generation=gen, member="") == {
            T0: ErrorCode.unknown_member_id
        }
        assert txn_commit(c, "g", {T0: 1}, generation=gen, member=m.member_id) == {T0: NONE}
        # Without any identity (TxnOffsetCommit v0-2) the group is not checked at all.
        assert txn_commit(c, "g", {T1: 1}) == {T1: NONE}
        # Refused requests left nothing behind.
        assert view(c, "g")[1] == {PID: {T0: 1, T1: 1}}
        # An unknown group cannot have the generation a request names.
        assert txn_commit(c, "nope", {T0: 1}, generation=1, member="x") == {
            T0: ErrorCode.illegal_generation
        }
        assert c.group("nope") is None

    run(scenario())


def test_kip_447_static_member_is_fenced() -> None:
    async def scenario() -> None:
        env = make_env(initial_delay_ms=0, partitions=5)
        c = env.coordinator
        join = await c.join_group("g", "", "instance-1", "consumer", [("range", b"")],
                                  10_000, 30_000, "cid", "/h", False)
        await c.sync_group("g", join.generation_id, join.member_id, "instance-1", None, None,
                           {join.member_id: b""})
        assert txn_commit(c, "g", {T0: 1}, generation=join.generation_id,
                          member="old-member-id", instance="instance-1") == {
            T0: ErrorCode.fenced_instance_id
        }
        assert txn_commit(c, "g", {T0: 1}, generation=join.generation_id,
                          member=join.member_id, instance="instance-1") == {T0: NONE}

    run(scenario())


def test_metadata_too_large_is_refused_per_partition() -> None:
    env = make_env(partitions=5, offset_metadata_max_bytes=4)
    c = env.coordinator
    result = c.commit_txn_offsets(
        "txn", "g", PID, 0, -1, "", None, {T0: (1, -1, "12345"), T1: (2, -1, "1234")}
    )
    assert result == {T0: ErrorCode.offset_metadata_too_large, T1: NONE}
    assert view(c, "g")[1] == {PID: {T1: 2}}


def test_invalid_group_and_producer() -> None:
    env = make_env(partitions=5)
    c = env.coordinator
    assert txn_commit(c, "", {T0: 1}) == {T0: ErrorCode.invalid_group_id}
    assert txn_commit(c, "g", {T0: 1}, pid=-1) == {T0: ErrorCode.invalid_producer_id_mapping}
    assert env.store.record_count() == 0


def test_failed_append_leaves_nothing_pending() -> None:
    env = make_env(partitions=5)
    c = env.coordinator
    env.store.fail_with = ErrorCode.not_enough_replicas
    assert txn_commit(c, "g", {T0: 1}) == {T0: ErrorCode.coordinator_not_available}
    env.store.fail_with = ErrorCode.not_leader_or_follower
    assert txn_commit(c, "g", {T0: 1}) == {T0: ErrorCode.not_coordinator}
    assert c.group("g") is None
    env.store.fail_with = None
    c.on_txn_marker(c.partition_for("g"), PID, True)
    assert c.group("g") is None


def test_older_producer_epochs_are_fenced() -> None:
    env = make_env(partitions=5)
    c = env.coordinator
    assert txn_commit(c, "g", {T0: 1}, epoch=5) == {T0: NONE}
    assert txn_commit(c, "g", {T0: 2}, epoch=4) == {T0: ErrorCode.invalid_producer_epoch}
    assert view(c, "g")[1] == {PID: {T0: 1}}
    # The producer id is fenced on every partition, not only where it wrote.
    assert txn_commit(c, "elsewhere", {T0: 2}, epoch=4) == {
        T0: ErrorCode.invalid_producer_epoch
    }
    # The transaction coordinator aborts with a bumped epoch: the marker fences epoch 5.
    marker(env, "g", PID, commit=False, epoch=6)
    assert txn_commit(c, "g", {T0: 3}, epoch=5) == {T0: ErrorCode.invalid_producer_epoch}
    assert txn_commit(c, "g", {T0: 3}, epoch=6) == {T0: NONE}
    # Other producers are not affected.
    assert txn_commit(c, "g", {T1: 3}, pid=PID2, epoch=0) == {T1: NONE}
    # The epochs are rebuilt from the log.
    fresh = env.reloaded()
    assert txn_commit(fresh, "g", {T0: 4}, epoch=5) == {T0: ErrorCode.invalid_producer_epoch}
    assert txn_commit(fresh, "g", {T0: 4}, epoch=6) == {T0: NONE}


def test_idle_producer_epochs_are_forgotten() -> None:
    env = make_env(partitions=5, producer_id_expiration_ms=60_000)
    c = env.coordinator
    txn_commit(c, "g", {T0: 1}, epoch=5)
    txn_commit(c, "g", {T0: 1}, pid=PID2, epoch=5)
    marker(env, "g", PID, commit=True, epoch=5)
    env.advance(600_000)  # one offsets retention check
    # PID2 still has a transaction open on the group: its epoch is kept.
    assert txn_commit(c, "g", {T1: 1}, pid=PID2, epoch=4) == {
        T1: ErrorCode.invalid_producer_epoch
    }
    assert txn_commit(c, "g", {T1: 1}, epoch=4) == {T1: NONE}


# -- interplay with the rest of the group's life ---------------------------------------------


def test_offsets_with_a_pending_transaction_do_not_expire() -> None:
    env = make_env(partitions=5, offsets_retention_minutes=1)
    c = env.coordinator
    plain_commit(c, "g", {T0: 1, T1: 2})
    txn_commit(c, "g", {T0: 9})
    env.advance(600_000)
    assert committed(c, "g") == 1
    assert committed(c, "g", T1) == -1  # expired
    marker(env, "g", PID, commit=True)
    assert committed(c, "g") == 9
    env.advance(600_000)
    assert c.group("g") is None  # everything expired, the group is gone
    fresh = env.reloaded()
    assert fresh.group("g") is None


def test_deleting_a_group_drops_its_pending_offsets_live_and_on_reload() -> None:
    env = make_env(partitions=5)
    c = env.coordinator
    plain_commit(c, "g", {T0: 1})
    txn_commit(c, "g", {T0: 9, T1: 19})  # T1 has no committed offset to tombstone
    assert c.delete_groups(["g"]) == {"g": NONE}
    marker(env, "g", PID, commit=True)
    assert c.group("g") is None
    assert c.fetch_offsets("g", [T0, T1]) == {T0: (-1, -1, "", NONE), T1: (-1, -1, "", NONE)}
    fresh = env.reloaded()
    assert fresh.group("g") is None


# -- reload ----------------------------------------------------------------------------------


def test_reload_replays_transactions_in_log_order() -> None:
    async def scenario() -> None:
        env = make_env(initial_delay_ms=0, partitions=3)
        c = env.coordinator
        a, b = groups_on_one_partition(env, 2)
        [m] = await form_group(env, a, 1)
        plain_commit(c, b, {T0: 1})
        txn_commit(c, a, {T0: 10}, generation=m.generation_id, member=m.member_id)
        txn_commit(c, b, {T0: 11, T1: 12})
        txn_commit(c, b, {T0: 20}, pid=PID2)
        plain_commit(c, b, {T1: 13})  # after PID's T1: survives PID's commit
        marker(env, a, PID, commit=True)
        txn_commit(c, a, {T1: 30}, pid=PID2)
        marker(env, b, PID2, commit=False)
        txn_commit(c, b, {T0: 40}, pid=PID2, epoch=1)  # PID2's next transaction: open
        txn_commit(c, "solo", {T0: 50}, pid=PID2, epoch=1)  # only pending offsets

        assert view(c, a) == ({T0: (10, -1, "", NONE)}, {})
        assert view(c, b) == (
            {T0: (11, -1, "", NONE), T1: (13, -1, "", NONE)}, {PID2: {T0: 40}}
        )
        fresh = env.reloaded()
        for group in (a, b, "solo"):
            assert view(fresh, group) == view(c, group), group
        assert fresh.fetch_offsets(b, [T0], require_stable=True)[T0].error == (
            ErrorCode.unstable_offset_commit
        )
        loaded = fresh.group(a)
        assert loaded is not None and list(loaded.members) == [m.member_id]
        assert fresh.statistics().records_loaded == env.store.record_count()

        # The open transaction ends after the restart, through the reloaded coordinator.
        for partition in sorted({fresh.partition_for(b), fresh.partition_for("solo")}):
            env.store.append_marker(partition, PID2, 1, True)
            fresh.on_txn_marker(partition, PID2, True, 1)
        assert committed(fresh, b) == 40
        assert committed(fresh, "solo") == 50
        again = env.reloaded()
        for group in (a, b, "solo"):
            assert view(again, group) == view(fresh, group), group

    run(scenario())


def test_reload_keeps_a_transaction_open_on_one_partition_while_committed_on_another() -> None:
    env = make_env(partitions=5)
    c = env.coordinator
    first = "g"
    second = next(f"h{i}" for i in range(100)
                  if c.partition_for(f"h{i}") != c.partition_for(first))
    txn_commit(c, first, {T0: 1})
    txn_commit(c, second, {T0: 2})
    # Only the second group's partition has its marker so far (markers are written one
    # partition at a time; the broker stopped in between).
    marker(env, second, PID, commit=True)
    fresh = env.reloaded()
    assert view(fresh, first) == ({}, {PID: {T0: 1}})
    assert view(fresh, second) == ({T0: (2, -1, "", NONE)}, {})
    marker(env, first, PID, commit=True)
    assert view(c, first) == ({T0: (1, -1, "", NONE)}, {})
    fresh.on_txn_marker(fresh.partition_for(first), PID, True)
    assert view(fresh, first) == view(c, first)


def test_reload_skips_unexpected_records_in_transactional_batches() -> None:
    env = make_env(partitions=1)
    group_key = codec.encode_group_key(codec.GroupMetadataKey("g"))
    offset_key = codec.encode_offset_key(codec.OffsetCommitKey("g", "t", 0))
    value = codec.encode_offset_value(codec.OffsetCommitValue(7, -1, "", 0))
    env.store.partitions[0].extend([
        StoredRecord(group_key, b"\x00\x03junk", PID, True, None, 0),  # not an offset
        StoredRecord(None, None, PID, True, None, 0),  # no key
        StoredRecord(offset_key, value, PID, True, None, 0),
        StoredRecord(b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x00", PID, True,
                     int(ControlType.COMMIT), 0),
    ])
    fresh = env.reloaded()
    assert view(fresh, "g") == ({T0: (7, -1, "", NONE)}, {})


def test_pending_offsets_use_the_seam_left_in_group_metadata() -> None:
    env = make_env(partitions=5)
    c = env.coordinator
    txn_commit(c, "g", {T0: 9})
    group = c.group("g")
    assert group is not None
    [(pid, pending)] = group.pending_txn_offsets.items()
    assert pid == PID
    co = pending[T0]
    assert isinstance(co, CommittedOffset)
    assert (co.offset, co.commit_timestamp) == (9, env.clock.now_ms())
    assert group.has_offsets() and group.has_pending_txn_offsets(T0)
