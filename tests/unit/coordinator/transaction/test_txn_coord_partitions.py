"""The transaction coordinator owning ``__transaction_state`` partitions one by one, as a
cluster broker does when it comes to lead them (Kafka's TransactionStateManager loading and
removing a partition): NOT_COORDINATOR for ids of partitions not loaded here,
COORDINATOR_LOAD_IN_PROGRESS while one loads, Prepare* resumed at the new coordinator epoch,
and an unloaded partition's ids and markers gone."""

from __future__ import annotations

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


def test_a_single_node_owns_every_partition_at_its_epoch(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    assert env.coord.owned_partitions() == {p: 0 for p in range(4)}
