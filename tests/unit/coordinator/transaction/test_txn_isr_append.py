"""A transaction log write counts only once the in-sync replicas have it (Kafka's
TransactionStateManager.appendTransactionToLog with requiredAcks=-1): the transition
completes, and the markers start, only after the store's ISR wait; a failed wait cancels
the pending transition and answers the translated error; a partition that moved during the
wait answers NOT_COORDINATOR. On a single node the wait never suspends."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from test_txn_coordinator import begin, logged_states
from txn_support import TXN, Env, make_env, run, settle

from oncelog.broker.internal_topic_store import InternalTopicStore
from oncelog.broker.partitions import PartitionRegistry
from oncelog.clock import FakeClock
from oncelog.config import BrokerConfig
from oncelog.coordinator.transaction import TransactionState
from oncelog.coordinator.transaction.results import EndTxnResult
from oncelog.errors import ErrorCode

S = TransactionState
E = ErrorCode


def hold(env: Env) -> asyncio.Event:
    """Keep every ISR wait of the store pending until the returned event is set."""
    gate = asyncio.Event()
    env.store.hold_acks = gate
    return gate


async def commit_held(
    env: Env,
) -> tuple[asyncio.Task[EndTxnResult], asyncio.Event, tuple[int, int]]:
    """Begin a transaction and send EndTxn(commit) with the store's ISR waits held."""
    identity = await begin(env)
    gate = hold(env)
    end = asyncio.create_task(env.coord.handle_end_txn(TXN, *identity, commit=True))
    await settle()
    return end, gate, identity


def test_end_txn_completes_and_marks_only_after_the_isr_has_prepare_commit(
    tmp_path: Path,
) -> None:
    env = make_env(tmp_path)

    async def body() -> None:
        end, gate, (pid, epoch) = await commit_held(env)
        md = env.coord.get(TXN)
        assert md is not None
        # PrepareCommit is in the local log, but not yet applied nor acted upon.
        assert logged_states(env)[-1] is S.PREPARE_COMMIT
        assert env.store.acks_waiting == 1
        assert (md.state, md.pending_state) == (S.ONGOING, S.PREPARE_COMMIT)
        assert env.markers.calls == []
        assert not end.done()
        # Another request for the id meanwhile: the transition is still open.
        again = await env.coord.handle_end_txn(TXN, pid, epoch, commit=True)
        assert again.error is E.concurrent_transactions
        gate.set()
        result = await end
        assert result.error is E.none
        assert env.markers.written
        assert md.state is S.COMPLETE_COMMIT

    run(env, body)


@pytest.mark.parametrize(
    ("ack_error", "answer"),
    [
        (E.not_enough_replicas_after_append, E.coordinator_not_available),
        (E.request_timed_out, E.coordinator_not_available),
        (E.not_leader_or_follower, E.not_coordinator),
    ],
)
def test_a_failed_isr_wait_reverts_the_transition_and_answers_the_mapped_error(
    tmp_path: Path, ack_error: ErrorCode, answer: ErrorCode
) -> None:
    env = make_env(tmp_path)

    async def body() -> EndTxnResult:
        pid, epoch = await begin(env)
        env.store.fail_acks = [ack_error]
        result = await env.coord.handle_end_txn(TXN, pid, epoch, commit=True)
        md = env.coord.get(TXN)
        assert md is not None
        assert (md.state, md.pending_state) == (S.ONGOING, None)
        assert env.markers.calls == []
        # The client retries once the ISR is back: the commit goes through.
        retried = await env.coord.handle_end_txn(TXN, pid, epoch, commit=True)
        assert retried.error is E.none
        assert md.state is S.COMPLETE_COMMIT
        return result

    assert run(env, body).error is answer


def test_a_partition_unloaded_during_the_wait_answers_not_coordinator(tmp_path: Path) -> None:
    env = make_env(tmp_path)

    async def body() -> None:
        end, gate, _ = await commit_held(env)
        env.coord.unload_partition(env.coord.partition_for(TXN))
        gate.set()
        assert (await end).error is E.not_coordinator
        assert env.markers.calls == []

    run(env, body)


def test_complete_commit_waits_for_the_isr_before_the_transaction_is_complete(
    tmp_path: Path,
) -> None:
    env = make_env(tmp_path)

    async def body() -> None:
        end, prepare_gate, _ = await commit_held(env)
        assert env.store.acks_waiting == 1 and env.markers.calls == []
        prepare_gate.set()  # the ISR has PrepareCommit ...
        gate = hold(env)  # ... but not (yet) CompleteCommit
        await settle()
        md = env.coord.get(TXN)
        assert md is not None
        assert env.markers.written
        assert env.store.acks_waiting == 1
        assert (md.state, md.pending_state) == (S.PREPARE_COMMIT, S.COMPLETE_COMMIT)
        gate.set()
        assert (await end).error is E.none
        assert md.state is S.COMPLETE_COMMIT

    run(env, body)


def test_timed_out_abort_waits_for_the_isr_and_a_failed_wait_leaves_it_ongoing(
    tmp_path: Path,
) -> None:
    env = make_env(tmp_path)

    async def body() -> None:
        await begin(env)
        md = env.coord.get(TXN)
        assert md is not None
        env.clock.advance(md.txn_timeout_ms + 1)
        env.store.fail_acks = [E.not_enough_replicas]
        assert await env.coord.abort_timed_out_transactions() == 0
        assert (md.state, md.pending_state) == (S.ONGOING, None)
        assert env.markers.calls == []
        assert await env.coord.abort_timed_out_transactions() == 1
        assert md.state in (S.PREPARE_ABORT, S.COMPLETE_ABORT)

    run(env, body)


def test_a_single_node_write_does_not_suspend(tmp_path: Path) -> None:
    """The broker's store without replication answers the ISR wait at once: a transition
    is applied in the same step of the event loop as its append, as before."""
    registry = PartitionRegistry(tmp_path / "data", BrokerConfig({}), FakeClock())
    store = InternalTopicStore(registry, "__transaction_state", FakeClock())
    wait = store.wait_for_isr(0, 10, 1000)
    with pytest.raises(StopIteration) as done:
        wait.send(None)
    assert done.value.value is E.none


def test_an_add_whose_write_failed_is_never_verified(tmp_path: Path) -> None:
    """The offsets partition's add (AddOffsetsToTxn, or TxnOffsetCommit v5's implicit add)
    is not part of the transaction while its Ongoing record waits for the ISR, nor after the
    wait failed because the coordinator lost its partition's leadership
    (NOT_LEADER_OR_FOLLOWER): verification answers TRANSACTION_ABORTABLE for it, never
    NONE from an in-memory add the log does not hold (the group coordinator would then
    append offsets no marker of this transaction covers)."""
    env = make_env(tmp_path)
    offsets = env.coord.offsets_partition_for("a-group")

    async def body() -> None:
        pid, epoch = await begin(env)
        gate = hold(env)
        add = asyncio.create_task(env.coord.handle_add_offsets(TXN, pid, epoch, "a-group"))
        await settle()
        assert env.coord.verify_partitions(TXN, pid, epoch, [offsets]) == {
            offsets: E.transaction_abortable}
        env.store.hold_acks = None
        env.store.fail_acks = [E.not_leader_or_follower]
        gate.set()
        assert await add is E.not_coordinator
        md = env.coord.get(TXN)
        assert md is not None and offsets not in md.partitions
        assert env.coord.verify_partitions(TXN, pid, epoch, [offsets]) == {
            offsets: E.transaction_abortable}

    run(env, body)
