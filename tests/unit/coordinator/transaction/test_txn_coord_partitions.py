"""The transaction coordinator owning ``__transaction_state`` partitions one by one, as a
cluster broker does when it comes to lead them (Kafka's TransactionStateManager loading and
removing a partition): NOT_COORDINATOR for ids of partitions not loaded here,
COORDINATOR_LOAD_IN_PROGRESS while one loads, Prepare* resumed at the new coordinator epoch,
and an unloaded partition's ids and markers gone."""

from __future__ import annotations

import asyncio
from pathlib import Path

from txn_support import A0, B0, TIMEOUT_MS, Env, make_env, run

from oncelog.coordinator.transaction import TransactionState, transaction_log_partition
from oncelog.coordinator.transaction.log_codec import encode_record
from oncelog.coordinator.transaction.metadata import TxnTransitMetadata
from oncelog.errors import ErrorCode

S = TransactionState
E = ErrorCode


def id_on(partition: int, num_partitions: int = 4) -> str:
    """A transactional id whose ``__transaction_state`` partition is ``partition``."""
    return next(
        f"txn-{n}" for n in range(1000)
        if transaction_log_partition(f"txn-{n}", num_partitions) == partition
    )


def cluster_env(tmp_path: Path) -> Env:
    env = make_env(tmp_path, load=False)
    env.coord.start_partitioned()
    return env


def seed_prepared(env: Env, transactional_id: str, commit: bool = True) -> None:
    now = env.clock.now_ms()
    transit = TxnTransitMetadata(
        state=S.PREPARE_COMMIT if commit else S.PREPARE_ABORT, producer_id=42,
        producer_epoch=3, txn_timeout_ms=TIMEOUT_MS, partitions=frozenset({A0, B0}),
        txn_start_timestamp=now, txn_last_update_timestamp=now,
    )
    partition = transaction_log_partition(transactional_id, env.store.num_partitions)
    env.store.append(partition, [encode_record(transactional_id, transit)])


def test_ids_of_partitions_not_loaded_here_are_not_coordinator(tmp_path: Path) -> None:
    env = cluster_env(tmp_path)
    here, elsewhere = id_on(1), id_on(2)
    env.coord.load_partition(1, coordinator_epoch=5)

    async def body() -> None:
        c = env.coord
        assert (await c.handle_init_producer_id(here, TIMEOUT_MS)).error is E.none
        assert (await c.handle_init_producer_id(elsewhere, TIMEOUT_MS)).error is (
            E.not_coordinator
        )
        assert await c.handle_add_partitions(elsewhere, 1, 0, [A0]) == {A0: E.not_coordinator}
        assert c.verify_partitions(elsewhere, 1, 0, [A0]) == {A0: E.not_coordinator}
        assert (await c.handle_end_txn(elsewhere, 1, 0, True)).error is E.not_coordinator
        assert c.describe_transactions([elsewhere])[0].error is E.not_coordinator
        assert [t.transactional_id for t in c.list_transactions().transactions] == [here]
        assert c.owned_partitions() == {1: 5}

    run(env, body)


def test_a_loading_partition_answers_load_in_progress(tmp_path: Path) -> None:
    env = cluster_env(tmp_path)
    tid = id_on(3)
    env.coord.begin_loading(3)

    async def body() -> None:
        c = env.coord
        assert (await c.handle_init_producer_id(tid, TIMEOUT_MS)).error is (
            E.coordinator_load_in_progress
        )
        assert (await c.handle_end_txn(tid, 1, 0, True)).error is E.coordinator_load_in_progress
        assert c.list_transactions().error is E.coordinator_load_in_progress
        c.load_partition(3, coordinator_epoch=1)
        assert (await c.handle_init_producer_id(tid, TIMEOUT_MS)).error is E.none
        assert c.list_transactions().error is E.none

    run(env, body)


def test_loading_resumes_prepared_transactions_at_the_new_coordinator_epoch(
    tmp_path: Path,
) -> None:
    env = cluster_env(tmp_path)
    tid = id_on(0)
    seed_prepared(env, tid, commit=True)

    async def body() -> None:
        assert env.coord.load_partition(0, coordinator_epoch=7) == 1
        await env.advance(10)
        md = env.coord.get(tid)
        assert md is not None and md.state is S.COMPLETE_COMMIT

    run(env, body)
    assert {(c.coordinator_epoch, c.commit) for c in env.markers.calls} == {(7, True)}
    assert sorted(env.markers.written) == [(A0, True, 42, 3), (B0, True, 42, 3)]


def test_unloading_drops_the_ids_and_stops_their_markers(tmp_path: Path) -> None:
    env = cluster_env(tmp_path)
    moved, kept = id_on(0), id_on(1)
    seed_prepared(env, moved)
    env.markers.plan[A0] = [E.not_leader_or_follower] * 100  # never lands while we own it

    async def body() -> None:
        c = env.coord
        c.load_partition(0, coordinator_epoch=2)
        c.load_partition(1, coordinator_epoch=4)
        assert (await c.handle_init_producer_id(kept, TIMEOUT_MS)).error is E.none
        await env.advance(100)
        calls = len(env.markers.calls)
        assert calls >= 1 and c.statistics().markers_in_flight == 1
        assert c.unload_partition(0) == 1
        for _ in range(5):
            await env.advance(1000)
        assert len(env.markers.calls) == calls
        assert c.statistics().markers_in_flight == 0
        assert c.get(moved) is None and c.get(kept) is not None
        assert (await c.handle_init_producer_id(moved, TIMEOUT_MS)).error is E.not_coordinator
        assert c.owned_partitions() == {1: 4}

    run(env, body)
    # The partition's log is untouched: the next leader resumes the transaction from it.
    assert env.store.partitions[0][-1][1] is not None


def test_loading_again_at_a_newer_epoch_replaces_the_partitions_ids(tmp_path: Path) -> None:
    env = cluster_env(tmp_path)
    tid = id_on(2)
    env.coord.load_partition(2, coordinator_epoch=1)

    async def body() -> None:
        c = env.coord
        init = await c.handle_init_producer_id(tid, TIMEOUT_MS)
        assert init.error is E.none
        c.load_partition(2, coordinator_epoch=3)  # led again after a leader change
        md = c.get(tid)
        assert md is not None and md.producer_id == init.producer_id
        assert c.owned_partitions() == {2: 3}

    run(env, body)


async def lose_an_ongoing_write(env: Env, tid: str, epoch: int) -> asyncio.Event:
    """``tid`` (initialized, its partition owned at ``epoch``) logs Ongoing, but the record
    reaches this replica's log only: the session is lost during the ISR wait
    (NOT_LEADER_OR_FOLLOWER, answered NOT_COORDINATOR) and the partition unloaded (fenced);
    registered again, the broker leads it at the same epoch while the followers still lack
    the record, and loads it. Every ISR wait stays pending until the returned event is set."""
    c = env.coord
    partition = c.partition_for(tid)
    held = len(env.store.partitions[partition])
    env.store.high_watermarks[partition] = held
    env.store.fail_acks = [E.not_leader_or_follower]
    assert await c.handle_add_partitions(tid, *PID_EPOCH, [A0, B0]) == {
        A0: E.not_coordinator, B0: E.not_coordinator}
    assert len(env.store.partitions[partition]) == held + 1  # in the local log only
    c.unload_partition(partition)
    gate = asyncio.Event()
    env.store.hold_acks = gate
    c.begin_loading(partition)
    c.load_partition(partition, coordinator_epoch=epoch)
    return gate


PID_EPOCH = (0, 0)  # the first producer id of a fresh ProducerIdManager, epoch 0


def test_a_loaded_record_the_in_sync_replicas_lack_is_not_served(tmp_path: Path) -> None:
    """The torn transaction of the 20-minute fault run (faults-1-2, transaction 2690): its
    Ongoing record reached only the coordinator's log before an etcd pause fenced that
    broker; registered again, the broker led ``__transaction_state`` at the same epoch and
    loaded its log to the end, record included, and answered the client's retried
    AddPartitionsToTxn and two partitions' verifications NONE from it; the next leader
    lacked it, knew no transaction, refused the third partition, and the producer's next
    epoch committed the two partitions' records. A loaded partition is served only once the
    in-sync replicas hold everything read from it."""
    env = cluster_env(tmp_path)
    tid = id_on(1)
    env.coord.load_partition(1, coordinator_epoch=14)

    async def body() -> None:
        c = env.coord
        init = await c.handle_init_producer_id(tid, TIMEOUT_MS)
        assert (init.error, init.producer_id, init.producer_epoch) == (E.none, *PID_EPOCH)
        gate = await lose_an_ongoing_write(env, tid, epoch=14)
        await env.advance(1000)
        loading = {A0: E.coordinator_load_in_progress, B0: E.coordinator_load_in_progress}
        assert await c.handle_add_partitions(tid, *PID_EPOCH, [A0, B0]) == loading
        assert c.verify_partitions(tid, *PID_EPOCH, [A0, B0]) == loading
        # The leadership moves to a follower without the record (epoch 15).
        c.unload_partition(1)
        del env.store.partitions[1][env.store.high_watermarks.pop(1):]
        env.store.hold_acks = None
        gate.set()
        c.begin_loading(1)
        c.load_partition(1, coordinator_epoch=15)
        md = c.get(tid)
        assert md is not None and md.state is S.EMPTY
        assert c.verify_partitions(tid, *PID_EPOCH, [A0]) == {A0: E.transaction_abortable}

    run(env, body)


def test_a_loaded_partition_is_served_once_the_in_sync_replicas_hold_it(
    tmp_path: Path,
) -> None:
    """The same, but the followers catch up under the same leader: the record is committed
    and the transaction it logged is served."""
    env = cluster_env(tmp_path)
    tid = id_on(1)
    env.coord.load_partition(1, coordinator_epoch=14)

    async def body() -> None:
        c = env.coord
        await c.handle_init_producer_id(tid, TIMEOUT_MS)
        gate = await lose_an_ongoing_write(env, tid, epoch=14)
        await env.advance(1000)
        assert c.verify_partitions(tid, *PID_EPOCH, [A0]) == {
            A0: E.coordinator_load_in_progress}
        assert c.owned_partitions() == {1: 14}  # its leadership is not loaded again
        gate.set()
        await env.advance(10)
        md = c.get(tid)
        assert md is not None and md.state is S.ONGOING
        assert c.verify_partitions(tid, *PID_EPOCH, [A0, B0]) == {A0: E.none, B0: E.none}
        assert await c.handle_add_partitions(tid, *PID_EPOCH, [A0]) == {A0: E.none}

    run(env, body)


def test_a_loaded_prepare_commit_is_resumed_only_once_the_in_sync_replicas_hold_it(
    tmp_path: Path,
) -> None:
    """Markers are written only for a decision that is committed in the log: a
    PrepareCommit only the new leader has would otherwise commit some partitions of a
    transaction that a later leader, without it, aborts."""
    env = cluster_env(tmp_path)
    tid = id_on(0)
    seed_prepared(env, tid, commit=True)
    env.store.high_watermarks[0] = 0
    gate = asyncio.Event()
    env.store.hold_acks = gate

    async def body() -> None:
        env.coord.begin_loading(0)
        env.coord.load_partition(0, coordinator_epoch=7)
        await env.advance(1000)
        assert env.markers.calls == []
        gate.set()
        await env.advance(100)
        md = env.coord.get(tid)
        assert md is not None and md.state is S.COMPLETE_COMMIT

    run(env, body)
    assert {(c.coordinator_epoch, c.commit) for c in env.markers.calls} == {(7, True)}


def test_a_single_node_owns_every_partition_at_its_epoch(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    assert env.coord.owned_partitions() == {p: 0 for p in range(4)}
