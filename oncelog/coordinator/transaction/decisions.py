"""The state rules of InitProducerId and EndTxn: what each request does to one transactional
id, decided from its metadata alone.

Pure functions, no I/O: each returns the prepared transition (``metadata.py``) the
coordinator then has logged, or raises KafkaError with the error code to answer. A new
producer id, when the rules need one (an exhausted epoch), comes from ``new_producer_id``.
"""

from __future__ import annotations

from collections.abc import Callable

from oncelog.coordinator.transaction.metadata import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TV_EPOCH_BUMP,
    TransactionMetadata,
    TxnTransitMetadata,
    is_epoch_exhausted,
)
from oncelog.coordinator.transaction.results import EndTxnResult
from oncelog.coordinator.transaction.state import IllegalStateTransition, TransactionState
from oncelog.errors import ErrorCode, KafkaError

_S = TransactionState


def decide_init(
    md: TransactionMetadata,
    timeout_ms: int,
    expected: tuple[int, int] | None,
    keep_prepared: bool,
    now: int,
    new_producer_id: Callable[[], int],
) -> tuple[TxnTransitMetadata, tuple[int, int] | None] | None:
    """The transition InitProducerId makes (and the kept transaction's identity), or
    None when an open transaction must be fenced first. Raises KafkaError to refuse."""
    if md.pending_transition:
        raise KafkaError(ErrorCode.concurrent_transactions, "a transition is in progress")
    client_id, _ = md.client_identity()
    if expected is not None and not (
        md.producer_epoch == NO_PRODUCER_EPOCH  # just created: safe to hand it out
        or expected[0] in (client_id, md.producer_id)
        or (expected[0] == md.prev_producer_id and is_epoch_exhausted(expected[1]))
    ):
        raise KafkaError(ErrorCode.producer_fenced, f"producer id {expected[0]} is not current")
    state = md.state
    if state.is_prepared:
        raise KafkaError(ErrorCode.concurrent_transactions, "markers are being written")
    if state in (_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT):
        if md.is_epoch_exhausted and (expected is None or expected[1] == md.producer_epoch):
            transit = md.prepare_producer_id_rotation(
                new_producer_id(), timeout_ms, now, expected is not None
            )
        else:
            transit = md.prepare_increment_producer_epoch(
                timeout_ms, None if expected is None else expected[1], now
            )
        return transit, None
    if state is _S.ONGOING:
        if not keep_prepared:
            return None
        client = md.client_identity()
        if is_epoch_exhausted(client[1]):
            new_client = (new_producer_id(), 0)
        else:
            new_client = (client[0], client[1] + 1)
        return (
            md.prepare_keep_prepared(new_client, timeout_ms, now),
            (md.producer_id, md.producer_epoch),
        )
    raise IllegalStateTransition(f"{md.transactional_id} found in {state.wire_name}")


def decide_end(
    md: TransactionMetadata,
    producer_id: int,
    producer_epoch: int,
    commit: bool,
    client_version: int,
    now: int,
    new_producer_id: Callable[[], int],
) -> TxnTransitMetadata | EndTxnResult:
    """The transition EndTxn makes, or the answer to a retry of an EndTxn already done.
    Raises KafkaError to refuse."""
    state = md.state
    client = md.client_identity()
    ended_v2 = md.client_transaction_version >= TV_EPOCH_BUMP
    tv2 = client_version >= TV_EPOCH_BUMP
    # A retried EndTxn of transactions v2: the client still has the identity it ended
    # the transaction with (it never got the answer carrying its new one). Only a v2
    # request can be that retry (Kafka 4.4): an EndTxn below v5 at the old epoch is fenced.
    is_retry = (
        (state.is_prepared or state.is_complete)
        and ended_v2
        and tv2
        and (producer_id, producer_epoch) == (md.prev_producer_id, md.last_producer_epoch)
    )
    if producer_id != client[0] and not is_retry:
        raise KafkaError(ErrorCode.invalid_producer_id_mapping, f"producer id {producer_id}")
    if producer_epoch != client[1] and not is_retry:
        raise KafkaError(ErrorCode.producer_fenced, f"epoch {producer_epoch} != {client[1]}")
    if md.pending_transition:
        raise KafkaError(ErrorCode.concurrent_transactions, "a transition is in progress")
    wants = _S.PREPARE_COMMIT if commit else _S.PREPARE_ABORT
    done = _S.COMPLETE_COMMIT if commit else _S.COMPLETE_ABORT

    if state is _S.ONGOING:
        new_id = NO_PRODUCER_ID
        if tv2 and is_epoch_exhausted(client[1]):
            new_id = new_producer_id()
        return md.prepare_end(commit, now, client_version, new_id)
    # A v1 retry is one at the current epoch; a v2 request is a retry only at the old
    # identity (at the current epoch it would end a transaction that never began).
    if state.is_complete and (is_retry or not (tv2 or ended_v2)):
        if state is done:
            return EndTxnResult(ErrorCode.none, md.producer_id, md.producer_epoch)
        raise KafkaError(ErrorCode.invalid_txn_state, f"already {state.wire_name}")
    if state.is_prepared:
        if state is wants:
            raise KafkaError(ErrorCode.concurrent_transactions, "markers are being written")
        raise KafkaError(ErrorCode.invalid_txn_state, f"already {state.wire_name}")
    if state in (_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT):
        if not commit and tv2:
            # Transactions v2: a client unsure whether its transaction began may abort;
            # the epoch is still bumped.
            new_id = new_producer_id() if is_epoch_exhausted(client[1]) else -1
            return md.prepare_end(False, now, client_version, new_id)
        raise KafkaError(ErrorCode.invalid_txn_state, f"no transaction in {state.wire_name}")
    raise IllegalStateTransition(f"{md.transactional_id} found in {state.wire_name}")
