"""The transaction coordinator end to end over an in-memory log and a recording marker
writer, with a fake clock: InitProducerId, AddPartitions/AddOffsets, EndTxn, markers,
recovery, timeouts, expiry and the admin views."""

from __future__ import annotations

from pathlib import Path

import pytest
from txn_support import A0, A1, B0, TIMEOUT_MS, TXN, Env, make_env, run

from oncelog.coordinator.group.codec import partition_for
from oncelog.coordinator.transaction import TransactionState, transaction_log_partition
from oncelog.coordinator.transaction.log_codec import (
    decode_key,
    decode_value,
    encode_record,
)
from oncelog.coordinator.transaction.metadata import (
    MAX_PRODUCER_EPOCH,
    TWO_PHASE_COMMIT_TIMEOUT_MS,
    TxnTransitMetadata,
)
from oncelog.errors import ErrorCode

S = TransactionState
E = ErrorCode


def logged_states(env: Env, transactional_id: str = TXN) -> list[S | None]:
    """The states written for one id, in order (None = tombstone)."""
    partition = transaction_log_partition(transactional_id, env.store.num_partitions)
    out: list[S | None] = []
    for key, value in env.store.partitions[partition]:
        if decode_key(key) == transactional_id:
            t = decode_value(value)
            out.append(None if t is None else t.state)
    return out


async def begin(env: Env, partitions: list[tuple[str, int]] | None = None) -> tuple[int, int]:
    init = await env.coord.handle_init_producer_id(TXN, TIMEOUT_MS)
    assert init.error is E.none
    added = await env.coord.handle_add_partitions(
        TXN, init.producer_id, init.producer_epoch, partitions or [A0, B0]
    )
    assert set(added.values()) == {E.none}
    return init.producer_id, init.producer_epoch


def seed(env: Env, transit: TxnTransitMetadata, transactional_id: str = TXN) -> None:
    """Write a state straight into the log (as a previous broker run left it)."""
    partition = transaction_log_partition(transactional_id, env.store.num_partitions)
    env.store.append(partition, [encode_record(transactional_id, transit)])


# -- InitProducerId ---------------------------------------------------------------------------


def test_init_new_id_then_bump(tmp_path: Path) -> None:
    env = make_env(tmp_path)

    async def body() -> None:
        first = await env.coord.handle_init_producer_id(TXN, TIMEOUT_MS)
        assert (first.error, first.producer_epoch) == (E.none, 0)
        second = await env.coord.handle_init_producer_id(TXN, TIMEOUT_MS)
        assert (second.error, second.producer_id, second.producer_epoch) == (
            E.none, first.producer_id, 1,
        )
        other = await env.coord.handle_init_producer_id("txn-b", TIMEOUT_MS)
        assert other.producer_id != first.producer_id

    run(env, body)
    assert logged_states(env) == [S.EMPTY, S.EMPTY]


def test_init_without_transactional_id_is_idempotent_producer(tmp_path: Path) -> None:
    env = make_env(tmp_path)

    async def body() -> None:
        a = await env.coord.handle_init_producer_id(None, 0)
        b = await env.coord.handle_init_producer_id(None, 0)
        assert (a.error, a.producer_epoch, b.producer_epoch) == (E.none, 0, 0)
        assert a.producer_id != b.producer_id

    run(env, body)
    assert env.store.appends == 0


@pytest.mark.parametrize("timeout", [0, -1, 900_001])
def test_init_rejects_bad_timeouts(tmp_path: Path, timeout: int) -> None:
    env = make_env(tmp_path)
    result = run(env, lambda: env.coord.handle_init_producer_id(TXN, timeout))
    assert result.error is E.invalid_transaction_timeout
    assert env.store.appends == 0


def test_init_bad_requests(tmp_path: Path) -> None:
    env = make_env(tmp_path)

    async def body() -> None:
        assert (await env.coord.handle_init_producer_id("", TIMEOUT_MS)).error is E.invalid_request
        half = await env.coord.handle_init_producer_id(TXN, TIMEOUT_MS, producer_id=5)
        assert half.error is E.invalid_request

    run(env, body)


def test_epoch_overflow_gives_a_new_producer_id(tmp_path: Path) -> None:
    env = make_env(tmp_path, load=False)
    seed(env, TxnTransitMetadata(
        state=S.COMPLETE_COMMIT, producer_id=7, producer_epoch=MAX_PRODUCER_EPOCH - 1,
        txn_timeout_ms=TIMEOUT_MS, txn_start_timestamp=1, txn_last_update_timestamp=2,
    ))
    env.coord.load()

    async def body() -> None:
        result = await env.coord.handle_init_producer_id(TXN, TIMEOUT_MS)
        assert result.error is E.none
        assert result.producer_id != 7 and result.producer_epoch == 0
        md = env.coord.get(TXN)
        assert md is not None and md.prev_producer_id == 7

    run(env, body)


def test_init_with_an_exhausted_epoch_answers_an_error(tmp_path: Path) -> None:
    # Kafka's prepareIncrementProducerEpoch throws on an exhausted epoch when the expected
    # epoch does not allow a new producer id; the request gets UNKNOWN_SERVER_ERROR. The
    # same for an ongoing transaction at Short.MAX_VALUE, which cannot be fenced.
    env = make_env(tmp_path, load=False)
    seed(env, TxnTransitMetadata(
        state=S.COMPLETE_COMMIT, producer_id=7, producer_epoch=MAX_PRODUCER_EPOCH,
        txn_timeout_ms=TIMEOUT_MS, txn_start_timestamp=1, txn_last_update_timestamp=2,
    ))
    seed(env, TxnTransitMetadata(
        state=S.ONGOING, producer_id=8, producer_epoch=MAX_PRODUCER_EPOCH,
        txn_timeout_ms=TIMEOUT_MS, partitions=frozenset({A0}), txn_start_timestamp=1,
        txn_last_update_timestamp=2,
    ), "txn-max")
    env.coord.load()

    async def body() -> None:
        stale = await env.coord.handle_init_producer_id(
            TXN, TIMEOUT_MS, producer_id=7, producer_epoch=3
        )
        assert stale.error is E.unknown_server_error
        ongoing = await env.coord.handle_init_producer_id("txn-max", TIMEOUT_MS)
        assert ongoing.error is E.unknown_server_error
        md = env.coord.get("txn-max")
        assert md is not None and md.state is S.ONGOING and not md.pending_transition
        # The usual way out still works: no expected epoch gives a new producer id.
        fresh = await env.coord.handle_init_producer_id(TXN, TIMEOUT_MS)
        assert fresh.error is E.none and fresh.producer_id != 7

    run(env, body)


def test_kip360_epoch_checks(tmp_path: Path) -> None:
    env = make_env(tmp_path)

    async def body() -> None:
        first = await env.coord.handle_init_producer_id(TXN, TIMEOUT_MS)
        pid = first.producer_id
        bumped = await env.coord.handle_init_producer_id(TXN, TIMEOUT_MS, pid, 0)
        assert (bumped.error, bumped.producer_id, bumped.producer_epoch) == (E.none, pid, 1)
        # The same request again (its answer was lost): the previous epoch, no new bump.
        retried = await env.coord.handle_init_producer_id(TXN, TIMEOUT_MS, pid, 0)
        assert (retried.error, retried.producer_epoch) == (E.none, 1)
        stale = await env.coord.handle_init_producer_id(TXN, TIMEOUT_MS, pid, 5)
        assert stale.error is E.producer_fenced
        other = await env.coord.handle_init_producer_id(TXN, TIMEOUT_MS, pid + 100, 1)
        assert other.error is E.producer_fenced

    run(env, body)


def test_init_fences_an_ongoing_transaction(tmp_path: Path) -> None:
    env = make_env(tmp_path)

    async def body() -> None:
        pid, epoch = await begin(env)
        again = await env.coord.handle_init_producer_id(TXN, TIMEOUT_MS)
        assert again.error is E.concurrent_transactions
        # The old transaction was aborted with a bumped epoch on both partitions.
        assert sorted(env.markers.written) == [
            (A0, False, pid, epoch + 1), (B0, False, pid, epoch + 1),
        ]
        md = env.coord.get(TXN)
        assert md is not None and md.state is S.COMPLETE_ABORT
        retry = await env.coord.handle_init_producer_id(TXN, TIMEOUT_MS)
        assert (retry.error, retry.producer_id, retry.producer_epoch) == (E.none, pid, epoch + 2)
        # The zombie is fenced everywhere.
        added = await env.coord.handle_add_partitions(TXN, pid, epoch, [A1])
        assert added == {A1: E.producer_fenced}
        assert (await env.coord.handle_end_txn(TXN, pid, epoch, True)).error is E.producer_fenced
        offsets = await env.coord.handle_add_offsets(TXN, pid, epoch, "g")
        assert offsets is E.producer_fenced

    run(env, body)
    assert logged_states(env) == [S.EMPTY, S.ONGOING, S.PREPARE_ABORT, S.COMPLETE_ABORT, S.EMPTY]


def test_init_while_markers_are_in_flight(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    env.markers.plan[A0] = [E.not_leader_or_follower] * 3

    async def body() -> None:
        pid, epoch = await begin(env)
        ended = await env.coord.handle_end_txn(TXN, pid, epoch, True)
        assert ended.error is E.none  # the outcome is durable; markers continue
        assert env.coord.get(TXN).state is S.PREPARE_COMMIT  # type: ignore[union-attr]
        busy = await env.coord.handle_init_producer_id(TXN, TIMEOUT_MS)
        assert busy.error is E.concurrent_transactions
        await env.advance(10_000)
        done = await env.coord.handle_init_producer_id(TXN, TIMEOUT_MS)
        assert (done.error, done.producer_epoch) == (E.none, epoch + 1)

    run(env, body)


def test_append_failure_changes_nothing_and_is_translated(tmp_path: Path) -> None:
    env = make_env(tmp_path)

    async def body() -> None:
        first = await env.coord.handle_init_producer_id(TXN, TIMEOUT_MS)
        env.store.fail_next = [E.not_enough_replicas]
        failed = await env.coord.handle_init_producer_id(TXN, TIMEOUT_MS)
        assert failed.error is E.coordinator_not_available
        md = env.coord.get(TXN)
        assert md is not None and md.producer_epoch == 0 and not md.pending_transition
        env.store.fail_next = [E.kafka_storage_error]
        added = await env.coord.handle_add_partitions(TXN, first.producer_id, 0, [A0])
        assert added == {A0: E.not_coordinator}
        assert md.state is S.EMPTY and not md.pending_transition
        ok = await env.coord.handle_init_producer_id(TXN, TIMEOUT_MS)
        assert (ok.error, ok.producer_epoch) == (E.none, 1)

    run(env, body)


def test_requests_before_load_are_refused(tmp_path: Path) -> None:
    env = make_env(tmp_path, load=False)

    async def body() -> None:
        c = env.coord
        assert (await c.handle_init_producer_id(TXN, TIMEOUT_MS)).error is (
            E.coordinator_load_in_progress
        )
        assert await c.handle_add_partitions(TXN, 1, 0, [A0]) == {
            A0: E.coordinator_load_in_progress
        }
        assert (await c.handle_end_txn(TXN, 1, 0, True)).error is E.coordinator_load_in_progress
        assert c.list_transactions().error is E.coordinator_load_in_progress
        assert c.describe_transactions([TXN])[0].error is E.coordinator_load_in_progress

    run(env, body)


# -- AddPartitionsToTxn / AddOffsetsToTxn --------------------------------------------------------


def test_add_partitions_through_the_states(tmp_path: Path) -> None:
    env = make_env(tmp_path)

    async def body() -> None:
        init = await env.coord.handle_init_producer_id(TXN, TIMEOUT_MS)
        pid, epoch = init.producer_id, init.producer_epoch
        start = env.clock.now_ms()
        assert await env.coord.handle_add_partitions(TXN, pid, epoch, [A0]) == {A0: E.none}
        md = env.coord.get(TXN)
        assert md is not None and md.state is S.ONGOING and md.txn_start_timestamp == start
        env.clock.advance(5)
        appends = env.store.appends
        # Already in the transaction: answered without a log write.
        assert await env.coord.handle_add_partitions(TXN, pid, epoch, [A0]) == {A0: E.none}
        assert env.store.appends == appends
        assert await env.coord.handle_add_partitions(TXN, pid, epoch, [A1, B0]) == {
            A1: E.none, B0: E.none,
        }
        assert md.partitions == {A0, A1, B0} and md.txn_start_timestamp == start
        assert (await env.coord.handle_end_txn(TXN, pid, epoch, True)).error is E.none
        # A new transaction from CompleteCommit.
        assert await env.coord.handle_add_partitions(TXN, pid, epoch, [B0]) == {B0: E.none}
        assert md.partitions == {B0} and md.txn_start_timestamp == env.clock.now_ms()

    run(env, body)
    assert logged_states(env) == [
        S.EMPTY, S.ONGOING, S.ONGOING, S.PREPARE_COMMIT, S.COMPLETE_COMMIT, S.ONGOING,
    ]


def test_add_partitions_errors(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    env.markers.plan[A0] = [E.request_timed_out] * 2

    async def body() -> None:
        c = env.coord
        assert await c.handle_add_partitions("nope", 1, 0, [A0]) == {
            A0: E.invalid_producer_id_mapping
        }
        assert await c.handle_add_partitions("", 1, 0, [A0]) == {A0: E.invalid_request}
        pid, epoch = await begin(env, [A0])
        assert await c.handle_add_partitions(TXN, pid + 1, epoch, [A1]) == {
            A1: E.invalid_producer_id_mapping
        }
        assert await c.handle_add_partitions(TXN, pid, epoch + 1, [A1]) == {
            A1: E.producer_fenced
        }
        assert (await c.handle_end_txn(TXN, pid, epoch, False)).error is E.none
        assert c.get(TXN).state is S.PREPARE_ABORT  # type: ignore[union-attr]
        assert await c.handle_add_partitions(TXN, pid, epoch, [A1]) == {
            A1: E.concurrent_transactions
        }
        assert await c.handle_add_offsets(TXN, pid, epoch, "g") is E.concurrent_transactions

    run(env, body)


def test_verify_only_answers_membership(tmp_path: Path) -> None:
    env = make_env(tmp_path)

    async def body() -> None:
        pid, epoch = await begin(env, [A0])
        appends = env.store.appends
        answer = await env.coord.handle_add_partitions(TXN, pid, epoch, [A0, A1], verify_only=True)
        assert answer == {A0: E.none, A1: E.transaction_abortable}
        assert env.store.appends == appends
        fenced = await env.coord.handle_add_partitions(TXN, pid, epoch - 1, [A0], verify_only=True)
        assert fenced == {A0: E.producer_fenced}

    run(env, body)


def test_verification_needs_exactly_the_current_epoch(tmp_path: Path) -> None:
    # Kafka's handleVerifyPartitionsInTransaction: any epoch but the current one is fenced,
    # a newer one too (a batch at epoch+1 would hold an open transaction that the marker,
    # at the current epoch, could never end).
    env = make_env(tmp_path)

    async def body() -> None:
        pid, epoch = await begin(env, [A0])
        verify = env.coord.verify_partitions
        assert verify(TXN, pid, epoch, [A0, A1]) == {A0: E.none, A1: E.transaction_abortable}
        assert verify(TXN, pid, epoch + 1, [A0]) == {A0: E.producer_fenced}
        assert verify(TXN, pid, epoch - 1, [A0]) == {A0: E.producer_fenced}
        assert verify(TXN, pid + 1, epoch, [A0]) == {A0: E.invalid_producer_id_mapping}
        assert verify("nobody", pid, epoch, [A0]) == {A0: E.invalid_producer_id_mapping}

    run(env, body)


def test_verification_after_keep_prepared_fences_the_old_instance(tmp_path: Path) -> None:
    env = make_env(tmp_path, {"transaction.two.phase.commit.enable": "true"})

    async def body() -> None:
        init = await env.coord.handle_init_producer_id(TXN, 0, enable_2pc=True)
        pid = init.producer_id
        await env.coord.handle_add_partitions(TXN, pid, 0, [A0])
        kept = await env.coord.handle_init_producer_id(
            TXN, 0, enable_2pc=True, keep_prepared=True
        )
        assert (kept.producer_epoch, kept.ongoing_txn_producer_epoch) == (1, 0)
        # The zombie still writes at the transaction's data epoch 0: fenced, on produce and
        # on TxnOffsetCommit (v0-4 verify, v5 adds).
        assert env.coord.verify_partitions(TXN, pid, 0, [A0]) == {A0: E.producer_fenced}
        assert await env.coord.handle_add_partitions(TXN, pid, 0, [A0], verify_only=True) == {
            A0: E.producer_fenced
        }
        # The new owner may only end the kept transaction, not write into it.
        assert env.coord.verify_partitions(TXN, pid, 1, [A0]) == {A0: E.invalid_txn_state}

    run(env, body)


def test_add_offsets_adds_the_groups_offsets_partition(tmp_path: Path) -> None:
    env = make_env(tmp_path, {"offsets.topic.num.partitions": "7"})

    async def body() -> None:
        init = await env.coord.handle_init_producer_id(TXN, TIMEOUT_MS)
        code = await env.coord.handle_add_offsets(TXN, init.producer_id, 0, "my-group")
        assert code is E.none
        md = env.coord.get(TXN)
        assert md is not None
        assert md.partitions == {("__consumer_offsets", partition_for("my-group", 7))}
        assert md.state is S.ONGOING

    run(env, body)


# -- EndTxn -------------------------------------------------------------------------------------


@pytest.mark.parametrize("commit", [True, False])
def test_end_txn_happy_path(tmp_path: Path, commit: bool) -> None:
    env = make_env(tmp_path)

    async def body() -> None:
        pid, epoch = await begin(env, [A0, A1, B0])
        result = await env.coord.handle_end_txn(TXN, pid, epoch, commit)
        assert (result.error, result.producer_id, result.producer_epoch) == (E.none, pid, epoch)
        md = env.coord.get(TXN)
        assert md is not None
        assert md.state is (S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT)
        assert md.partitions == set() and (md.producer_id, md.producer_epoch) == (pid, epoch)

    run(env, body)
    assert sorted(env.markers.written) == [
        (tp, commit, 0, 0) for tp in (A0, A1, B0)
    ]
    assert env.markers.calls[0].coordinator_epoch == 0
    prepare, complete = (S.PREPARE_COMMIT, S.COMPLETE_COMMIT) if commit else (
        S.PREPARE_ABORT, S.COMPLETE_ABORT)
    assert logged_states(env) == [S.EMPTY, S.ONGOING, prepare, complete]


def test_end_txn_error_paths(tmp_path: Path) -> None:
    env = make_env(tmp_path)

    async def body() -> None:
        c = env.coord
        assert (await c.handle_end_txn("nope", 0, 0, True)).error is E.invalid_producer_id_mapping
        assert (await c.handle_end_txn("", 0, 0, True)).error is E.invalid_request
        init = await c.handle_init_producer_id(TXN, TIMEOUT_MS)
        pid, epoch = init.producer_id, init.producer_epoch
        # Nothing begun.
        assert (await c.handle_end_txn(TXN, pid, epoch, True)).error is E.invalid_txn_state
        assert (await c.handle_end_txn(TXN, pid, epoch, False)).error is E.invalid_txn_state
        await c.handle_add_partitions(TXN, pid, epoch, [A0])
        assert (await c.handle_end_txn(TXN, pid + 1, epoch, True)).error is (
            E.invalid_producer_id_mapping
        )
        assert (await c.handle_end_txn(TXN, pid, epoch + 1, True)).error is E.producer_fenced
        assert (await c.handle_end_txn(TXN, pid, epoch - 1, True)).error is E.producer_fenced
        assert (await c.handle_end_txn(TXN, pid, epoch, True)).error is E.none
        # A retried commit is answered as it ended; the opposite is an invalid state.
        assert (await c.handle_end_txn(TXN, pid, epoch, True)).error is E.none
        assert (await c.handle_end_txn(TXN, pid, epoch, False)).error is E.invalid_txn_state

    run(env, body)


def test_end_txn_while_prepared(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    env.markers.plan[B0] = [E.not_enough_replicas] * 5

    async def body() -> None:
        pid, epoch = await begin(env)
        assert (await env.coord.handle_end_txn(TXN, pid, epoch, True)).error is E.none
        again = await env.coord.handle_end_txn(TXN, pid, epoch, True)
        assert again.error is E.concurrent_transactions
        other = await env.coord.handle_end_txn(TXN, pid, epoch, False)
        assert other.error is E.invalid_txn_state
        described = env.coord.describe_transactions([TXN])[0]
        assert described.state is S.PREPARE_COMMIT and described.partitions == (B0,)
        await env.advance(60_000)
        final = await env.coord.handle_end_txn(TXN, pid, epoch, True)
        assert final.error is E.none

    run(env, body)
    assert env.markers.written.count((B0, True, 0, 0)) == 1
    assert env.markers.written.count((A0, True, 0, 0)) == 1


def test_transactions_v2_bump_the_epoch_every_transaction(tmp_path: Path) -> None:
    env = make_env(tmp_path)

    async def body() -> None:
        pid, epoch = await begin(env, [A0])
        ended = await env.coord.handle_end_txn(TXN, pid, epoch, True, client_version=2)
        assert (ended.error, ended.producer_id, ended.producer_epoch) == (E.none, pid, epoch + 1)
        assert env.markers.written == [(A0, True, pid, epoch + 1)]
        # The answer was lost: the client retries with the identity it ended with.
        retry = await env.coord.handle_end_txn(TXN, pid, epoch, True, client_version=2)
        assert (retry.error, retry.producer_id, retry.producer_epoch) == (
            E.none, pid, epoch + 1,
        )
        # The old epoch is fenced for anything else.
        assert await env.coord.handle_add_partitions(TXN, pid, epoch, [A0]) == {
            A0: E.producer_fenced
        }
        # v2 lets a client abort when unsure whether it began: still an epoch bump.
        aborted = await env.coord.handle_end_txn(TXN, pid, epoch + 1, False, client_version=2)
        assert (aborted.error, aborted.producer_epoch) == (E.none, epoch + 2)
        assert env.coord.get(TXN).state is S.COMPLETE_ABORT  # type: ignore[union-attr]

    run(env, body)


def test_only_a_v2_end_txn_is_a_retry_at_the_old_epoch(tmp_path: Path) -> None:
    """Kafka 4.4: after a v2 commit, EndTxn v4 at the epoch the transaction ended with is
    fenced (PRODUCER_FENCED), not a retry; only EndTxn v5 is recognised as the retry."""
    env = make_env(tmp_path)

    async def body() -> None:
        pid, epoch = await begin(env, [A0])
        ended = await env.coord.handle_end_txn(TXN, pid, epoch, True, client_version=2)
        assert (ended.error, ended.producer_epoch) == (E.none, epoch + 1)
        for commit in (True, False):
            v1 = await env.coord.handle_end_txn(TXN, pid, epoch, commit, client_version=0)
            assert v1.error is E.producer_fenced
        v2 = await env.coord.handle_end_txn(TXN, pid, epoch, True, client_version=2)
        assert (v2.error, v2.producer_epoch) == (E.none, epoch + 1)

    run(env, body)


def test_v2_end_txn_commit_of_a_completed_v1_transaction_is_invalid(tmp_path: Path) -> None:
    """Kafka 4.4: a v1 commit retried at the same epoch is answered NONE, but EndTxn v5
    (transactions v2) commit at that epoch is INVALID_TXN_STATE: no transaction began."""
    env = make_env(tmp_path)

    async def body() -> None:
        pid, epoch = await begin(env, [A0])
        ended = await env.coord.handle_end_txn(TXN, pid, epoch, True)
        assert (ended.error, ended.producer_epoch) == (E.none, epoch)
        v1 = await env.coord.handle_end_txn(TXN, pid, epoch, True)
        assert v1.error is E.none
        v2 = await env.coord.handle_end_txn(TXN, pid, epoch, True, client_version=2)
        assert v2.error is E.invalid_txn_state

    run(env, body)


def test_transactions_v2_next_transaction_adds_at_the_bumped_epoch(tmp_path: Path) -> None:
    """What Produce v12 does: the next transaction's partitions are added at the epoch
    EndTxn v5 answered; the markers of the second transaction carry one more."""
    env = make_env(tmp_path)

    async def body() -> None:
        pid, epoch = await begin(env, [A0])
        first = await env.coord.handle_end_txn(TXN, pid, epoch, True, client_version=2)
        assert await env.coord.handle_add_partitions(TXN, pid, first.producer_epoch, [B0]) == {
            B0: E.none
        }
        second = await env.coord.handle_end_txn(
            TXN, pid, first.producer_epoch, False, client_version=2
        )
        assert (second.error, second.producer_epoch) == (E.none, epoch + 2)
        assert env.markers.written == [(A0, True, pid, epoch + 1), (B0, False, pid, epoch + 2)]

    run(env, body)


def test_transactions_v2_epoch_overflow_moves_to_a_new_producer_id(tmp_path: Path) -> None:
    env = make_env(tmp_path, load=False)
    old_epoch = MAX_PRODUCER_EPOCH - 1
    seed(env, TxnTransitMetadata(
        state=S.ONGOING, producer_id=42, producer_epoch=old_epoch, txn_timeout_ms=TIMEOUT_MS,
        partitions=frozenset({A0}), txn_start_timestamp=env.clock.now_ms(),
        txn_last_update_timestamp=env.clock.now_ms(),
    ))
    env.coord.load()

    async def body() -> None:
        ended = await env.coord.handle_end_txn(TXN, 42, old_epoch, True, client_version=2)
        assert ended.error is E.none
        assert ended.producer_id != 42 and ended.producer_epoch == 0
        assert env.markers.written == [(A0, True, 42, MAX_PRODUCER_EPOCH)]
        md = env.coord.get(TXN)
        assert md is not None and (md.producer_id, md.producer_epoch) == (ended.producer_id, 0)
        retry = await env.coord.handle_end_txn(TXN, 42, old_epoch, True, client_version=2)
        assert (retry.error, retry.producer_id, retry.producer_epoch) == (
            E.none, ended.producer_id, 0,
        )

    run(env, body)


# -- markers --------------------------------------------------------------------------------------


def test_markers_are_retried_until_every_partition_has_one(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    env.markers.plan[A0] = [E.not_leader_or_follower, E.request_timed_out, E.kafka_storage_error]
    env.markers.plan[B0] = [E.unknown_topic_or_partition]  # deleted topic: done
    env.markers.raise_times = 1

    async def body() -> None:
        pid, epoch = await begin(env)
        ended = await env.coord.handle_end_txn(TXN, pid, epoch, True)
        assert ended.error is E.none
        md = env.coord.get(TXN)
        assert md is not None and md.state is S.PREPARE_COMMIT
        for _ in range(10):
            await env.advance(1000)
        assert md.state is S.COMPLETE_COMMIT

    run(env, body)
    assert env.markers.written == [(A0, True, 0, 0)]
    # First call raised, then A0 failed three times; B0 was only ever asked until it answered.
    assert [call.partitions for call in env.markers.calls] == [
        (A0, B0), (A0, B0), (A0,), (A0,), (A0,),
    ]
    assert env.coord.statistics().marker_retries == 4


def test_a_marker_refused_for_its_epoch_is_retried_not_counted(tmp_path: Path) -> None:
    # A partition answering INVALID_PRODUCER_EPOCH may still hold the producer's open
    # transaction (the broker's writer answers NONE when it holds nothing): counting it as
    # marked would complete the transaction with that partition's LSO stuck for good.
    env = make_env(tmp_path)
    env.markers.plan[A0] = [E.invalid_producer_epoch, E.producer_fenced]

    async def body() -> None:
        pid, epoch = await begin(env)
        assert (await env.coord.handle_end_txn(TXN, pid, epoch, True)).error is E.none
        md = env.coord.get(TXN)
        assert md is not None
        await env.advance(1)
        assert md.state is S.PREPARE_COMMIT and md.partitions == {A0}
        for _ in range(10):
            await env.advance(1000)
        assert md.state is S.COMPLETE_COMMIT

    run(env, body)
    assert sorted(env.markers.written) == [(A0, True, 0, 0), (B0, True, 0, 0)]


def test_a_fenced_coordinator_stops_sending_markers(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    env.markers.plan[A0] = [E.transaction_coordinator_fenced]

    async def body() -> None:
        pid, epoch = await begin(env, [A0])
        assert (await env.coord.handle_end_txn(TXN, pid, epoch, True)).error is E.none
        await env.advance(100)
        assert env.coord.get(TXN).state is S.PREPARE_COMMIT  # type: ignore[union-attr]
        assert len(env.markers.calls) == 1

    run(env, body)


def test_recovery_finishes_a_logged_prepare_commit(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    env.markers.plan[B0] = [E.not_leader_or_follower] * 1000

    async def first_life() -> tuple[int, int]:
        pid, epoch = await begin(env)
        assert (await env.coord.handle_end_txn(TXN, pid, epoch, True)).error is E.none
        return pid, epoch

    pid, epoch = run(env, first_life)  # "crash": stopped while B0 has no marker
    assert logged_states(env)[-1] is S.PREPARE_COMMIT
    env.markers.plan.clear()
    second = env.restart()
    assert second.coord.load() == 1
    md = second.coord.get(TXN)
    assert md is not None and md.state is S.PREPARE_COMMIT and md.partitions == {A0, B0}

    async def second_life() -> None:
        await second.coord.wait_completions()
        assert md.state is S.COMPLETE_COMMIT
        again = await second.coord.handle_end_txn(TXN, pid, epoch, True)
        assert again.error is E.none

    run(second, second_life)
    assert logged_states(env)[-1] is S.COMPLETE_COMMIT
    # Both partitions have a COMMIT marker (A0 possibly twice: harmless, as KIP-98 notes).
    assert {(tp, commit) for tp, commit, _, _ in env.markers.written} == {(A0, True), (B0, True)}


def test_restart_restores_every_field(tmp_path: Path) -> None:
    env = make_env(tmp_path)

    async def body() -> None:
        await begin(env, [A0, A1])
        await env.coord.handle_init_producer_id("txn-b", 1234)

    run(env, body)
    second = env.restart()
    second.coord.load()
    for transactional_id in (TXN, "txn-b"):
        before, after = env.coord.get(transactional_id), second.coord.get(transactional_id)
        assert before is not None and after is not None
        assert before.snapshot() == after.snapshot()


# -- timeouts and expiry ------------------------------------------------------------------------


def test_timed_out_transaction_is_aborted_and_the_zombie_fenced(tmp_path: Path) -> None:
    env = make_env(tmp_path)

    async def body() -> None:
        init = await env.coord.handle_init_producer_id(TXN, 20_000)
        pid, epoch = init.producer_id, init.producer_epoch
        await env.coord.handle_add_partitions(TXN, pid, epoch, [A0, B0])
        await env.advance(15_000)
        assert env.coord.get(TXN).state is S.ONGOING  # type: ignore[union-attr]
        await env.advance(15_000)  # at 20 s it is not yet older than 20 s; at 30 s it is
        md = env.coord.get(TXN)
        assert md is not None and md.state is S.COMPLETE_ABORT
        assert md.producer_epoch == epoch + 1
        assert sorted(env.markers.written) == [
            (A0, False, pid, epoch + 1), (B0, False, pid, epoch + 1),
        ]
        assert (await env.coord.handle_end_txn(TXN, pid, epoch, True)).error is E.producer_fenced
        assert env.coord.statistics().timed_out_aborts == 1

    run(env, body)


def test_two_phase_commit_transactions_never_time_out(tmp_path: Path) -> None:
    env = make_env(tmp_path, {"transaction.two.phase.commit.enable": "true"})

    async def body() -> None:
        init = await env.coord.handle_init_producer_id(TXN, 5_000, enable_2pc=True)
        assert init.error is E.none
        md = env.coord.get(TXN)
        assert md is not None and md.txn_timeout_ms == TWO_PHASE_COMMIT_TIMEOUT_MS
        await env.coord.handle_add_partitions(TXN, init.producer_id, 0, [A0])
        await env.advance(3_600_000)
        assert md.state is S.ONGOING
        stats = env.coord.statistics()
        assert stats.two_phase_commit_transactions == 1
        assert stats.oldest_open_transaction_age_ms == 3_600_000
        assert env.coord.describe_transactions([TXN])[0].two_phase_commit

    run(env, body)


def test_two_phase_commit_needs_the_broker_config(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    result = run(env, lambda: env.coord.handle_init_producer_id(TXN, 5_000, enable_2pc=True))
    assert result.error is E.transactional_id_authorization_failed


def test_keep_prepared_transaction_survives_a_client_restart(tmp_path: Path) -> None:
    env = make_env(tmp_path, {"transaction.two.phase.commit.enable": "true"})

    async def body() -> None:
        init = await env.coord.handle_init_producer_id(TXN, 0, enable_2pc=True)
        pid = init.producer_id
        await env.coord.handle_add_partitions(TXN, pid, 0, [A0, B0])
        # The client prepared (pid, 0), crashed, and comes back keeping the transaction.
        kept = await env.coord.handle_init_producer_id(
            TXN, 0, enable_2pc=True, keep_prepared=True
        )
        assert (kept.error, kept.producer_id, kept.producer_epoch) == (E.none, pid, 1)
        assert (kept.ongoing_txn_producer_id, kept.ongoing_txn_producer_epoch) == (pid, 0)
        md = env.coord.get(TXN)
        assert md is not None and md.state is S.ONGOING and md.partitions == {A0, B0}
        # Crashes again: the ongoing identity stays, the client's moves on.
        kept2 = await env.coord.handle_init_producer_id(
            TXN, 0, enable_2pc=True, keep_prepared=True
        )
        assert (kept2.producer_epoch, kept2.ongoing_txn_producer_epoch) == (2, 0)
        # Only ending is allowed now; the previous incarnation is fenced.
        assert await env.coord.handle_add_partitions(TXN, pid, 2, [A1]) == {
            A1: E.invalid_txn_state
        }
        assert (await env.coord.handle_end_txn(TXN, pid, 1, True)).error is E.producer_fenced
        done = await env.coord.handle_end_txn(TXN, pid, 2, True)
        assert (done.error, done.producer_id, done.producer_epoch) == (E.none, pid, 2)
        assert md.state is S.COMPLETE_COMMIT and not md.keeping_prepared

    run(env, body)
    # Markers carry the transaction's producer id with an epoch above its data's.
    assert sorted(env.markers.written) == [(A0, True, 0, 1), (B0, True, 0, 1)]
    second = env.restart()
    second.coord.load()
    assert second.coord.get(TXN).snapshot() == env.coord.get(TXN).snapshot()  # type: ignore[union-attr]


def test_force_terminate_aborts_a_kept_transaction(tmp_path: Path) -> None:
    env = make_env(tmp_path, {"transaction.two.phase.commit.enable": "true"})

    async def body() -> None:
        init = await env.coord.handle_init_producer_id(TXN, 0, enable_2pc=True)
        await env.coord.handle_add_partitions(TXN, init.producer_id, 0, [A0])
        await env.coord.handle_init_producer_id(TXN, 0, enable_2pc=True, keep_prepared=True)
        terminated = await env.coord.handle_init_producer_id(TXN, TIMEOUT_MS)
        assert terminated.error is E.concurrent_transactions
        md = env.coord.get(TXN)
        assert md is not None and md.state is S.COMPLETE_ABORT
        # Above the kept client's epoch 1, so that one is fenced too.
        assert md.producer_epoch == 2
        assert (await env.coord.handle_end_txn(TXN, init.producer_id, 1, True)).error is (
            E.producer_fenced
        )

    run(env, body)
    assert env.markers.written == [(A0, False, 0, 1)]


def test_idle_transactional_ids_expire(tmp_path: Path) -> None:
    env = make_env(
        tmp_path,
        {
            "transactional.id.expiration.ms": "60000",
            "transaction.remove.expired.transaction.cleanup.interval.ms": "30000",
        },
    )

    async def body() -> None:
        await env.coord.handle_init_producer_id("idle", TIMEOUT_MS)
        busy = await env.coord.handle_init_producer_id(TXN, 900_000)
        await env.coord.handle_add_partitions(TXN, busy.producer_id, 0, [A0])
        await env.advance(90_000)
        assert env.coord.get("idle") is None
        assert env.coord.get(TXN) is not None  # an open transaction never expires
        assert env.coord.statistics().expired_transactional_ids == 1
        # The id starts over.
        fresh = await env.coord.handle_init_producer_id("idle", TIMEOUT_MS)
        assert fresh.producer_epoch == 0

    run(env, body)
    assert logged_states(env, "idle") == [S.EMPTY, None, S.EMPTY]


def test_expiry_tombstone_failure_keeps_the_id(tmp_path: Path) -> None:
    env = make_env(tmp_path, {"transactional.id.expiration.ms": "1000"})

    async def body() -> None:
        await env.coord.handle_init_producer_id(TXN, TIMEOUT_MS)
        env.clock.advance(2000)
        env.store.fail_next = [E.not_enough_replicas]
        assert env.coord.remove_expired_transactional_ids() == 0
        md = env.coord.get(TXN)
        assert md is not None and not md.pending_transition
        assert env.coord.remove_expired_transactional_ids() == 1
        assert env.coord.get(TXN) is None

    run(env, body)
    second = env.restart()
    assert second.coord.load() == 0


# -- admin views ---------------------------------------------------------------------------


def test_list_and_describe(tmp_path: Path) -> None:
    env = make_env(tmp_path)

    async def body() -> None:
        pid, _ = await begin(env, [A0, B0])
        other = await env.coord.handle_init_producer_id("other", TIMEOUT_MS)
        env.clock.advance(5000)
        c = env.coord
        every = c.list_transactions()
        assert {(t.transactional_id, t.state) for t in every.transactions} == {
            (TXN, S.ONGOING), ("other", S.EMPTY),
        }
        ongoing = c.list_transactions(state_filters=["Ongoing", "Bogus"])
        assert [t.transactional_id for t in ongoing.transactions] == [TXN]
        assert ongoing.unknown_state_filters == ("Bogus",)
        by_pid = c.list_transactions(producer_id_filters=[other.producer_id])
        assert [t.transactional_id for t in by_pid.transactions] == ["other"]
        # Running longer than 4 s: the ongoing one; longer than 6 s: none.
        long = c.list_transactions(state_filters=["Ongoing"], duration_filter_ms=4000)
        assert [t.transactional_id for t in long.transactions] == [TXN]
        longer = c.list_transactions(state_filters=["Ongoing"], duration_filter_ms=6000)
        assert not longer.transactions
        assert [t.transactional_id for t in c.list_transactions(
            transactional_id_pattern="txn-.*").transactions] == [TXN]
        assert c.list_transactions(transactional_id_pattern="(").error is (
            E.invalid_regular_expression
        )
        described, missing, empty = c.describe_transactions([TXN, "missing", ""])
        assert described.error is E.none and described.state is S.ONGOING
        assert (described.producer_id, described.timeout_ms) == (pid, TIMEOUT_MS)
        assert described.partitions == (A0, B0)
        assert missing.error is E.transactional_id_not_found
        assert empty.error is E.invalid_request
        stats = c.statistics()
        assert (stats.transactional_ids, stats.open_transactions) == (2, 1)
        assert stats.oldest_open_transaction_age_ms == 5000

    run(env, body)
