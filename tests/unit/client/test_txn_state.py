"""The transactional state machine's table: every transition, and every refused one."""

from __future__ import annotations

import pytest

from oncelog.client.errors import IllegalStateError, ProducerFencedError, TransactionAbortableError
from oncelog.client.txn_state import ALLOWED_CALLS, TRANSITIONS, TxnEvent, TxnState, TxnStateMachine

S, E = TxnState, TxnEvent

EXPECTED = {
    (S.UNINITIALIZED, E.INIT): S.INITIALIZING,
    (S.INITIALIZING, E.INIT_DONE): S.READY,
    (S.INITIALIZING, E.INIT_DONE_PREPARED): S.PREPARED_TRANSACTION,
    (S.INITIALIZING, E.INIT_FAILED): S.UNINITIALIZED,
    (S.READY, E.BEGIN): S.IN_TRANSACTION,
    (S.IN_TRANSACTION, E.PREPARE): S.PREPARED_TRANSACTION,
    (S.IN_TRANSACTION, E.COMMIT): S.COMMITTING_TRANSACTION,
    (S.IN_TRANSACTION, E.ABORT): S.ABORTING_TRANSACTION,
    (S.IN_TRANSACTION, E.ABORTABLE_ERROR): S.ABORTABLE_ERROR,
    (S.PREPARED_TRANSACTION, E.COMMIT): S.COMMITTING_TRANSACTION,
    (S.PREPARED_TRANSACTION, E.ABORT): S.ABORTING_TRANSACTION,
    (S.COMMITTING_TRANSACTION, E.END_DONE): S.READY,
    (S.COMMITTING_TRANSACTION, E.COMMIT): S.COMMITTING_TRANSACTION,
    (S.ABORTING_TRANSACTION, E.END_DONE): S.READY,
    (S.ABORTING_TRANSACTION, E.ABORT): S.ABORTING_TRANSACTION,
    (S.ABORTABLE_ERROR, E.ABORT): S.ABORTING_TRANSACTION,
}


def _machine_in(state: TxnState) -> TxnStateMachine:
    machine = TxnStateMachine()
    machine.state = state
    return machine


@pytest.mark.parametrize(("start", "event"), list(EXPECTED))
def test_listed_transitions(start: TxnState, event: TxnEvent) -> None:
    machine = _machine_in(start)
    assert machine.fire(event) is EXPECTED[(start, event)]
    assert machine.state is EXPECTED[(start, event)]


@pytest.mark.parametrize("state", [s for s in TxnState if s is not S.FATAL_ERROR])
def test_fatal_error_is_reachable_from_every_live_state(state: TxnState) -> None:
    machine = _machine_in(state)
    fenced = ProducerFencedError("fenced")
    assert machine.fire(E.FATAL_ERROR, fenced) is S.FATAL_ERROR
    assert machine.error is fenced


def test_fatal_state_refuses_everything_with_the_fatal_error() -> None:
    machine = _machine_in(S.FATAL_ERROR)
    machine.error = ProducerFencedError("fenced")
    for event in TxnEvent:
        with pytest.raises(ProducerFencedError):
            machine.fire(event)
    with pytest.raises(ProducerFencedError):
        machine.check_call("commit_transaction")


def test_missing_entries_are_illegal_state() -> None:
    refused = [
        (state, event)
        for state in TxnState
        for event in TxnEvent
        if event not in TRANSITIONS[state] and state not in (S.ABORTABLE_ERROR, S.FATAL_ERROR)
    ]
    assert (S.READY, E.COMMIT) in refused
    assert (S.PREPARED_TRANSACTION, E.PREPARE) in refused
    assert (S.UNINITIALIZED, E.BEGIN) in refused
    for state, event in refused:
        with pytest.raises(IllegalStateError):
            _machine_in(state).fire(event)


def test_table_has_exactly_the_expected_non_error_transitions() -> None:
    listed = {
        (state, event): target
        for state, events in TRANSITIONS.items()
        for event, target in events.items()
        if event not in (E.FATAL_ERROR,)
        and not (state is S.ABORTABLE_ERROR and event is E.ABORTABLE_ERROR)
        and not (state is S.COMMITTING_TRANSACTION and event is E.ABORTABLE_ERROR)
        and not (state is S.INITIALIZING and event is E.INIT)
    }
    assert listed == EXPECTED


def test_abortable_error_keeps_its_error_and_allows_only_abort() -> None:
    machine = _machine_in(S.IN_TRANSACTION)
    error = TransactionAbortableError("partition gone")
    machine.fire(E.ABORTABLE_ERROR, error)
    with pytest.raises(TransactionAbortableError):
        machine.check_call("commit_transaction")
    with pytest.raises(TransactionAbortableError):
        machine.check_call("send")
    machine.check_call("abort_transaction")
    machine.fire(E.ABORT)
    assert machine.error is None
    machine.fire(E.END_DONE)
    assert machine.state is S.READY


def test_prepared_transaction_allows_only_commit_abort_complete() -> None:
    assert ALLOWED_CALLS[S.PREPARED_TRANSACTION] == {
        "commit_transaction",
        "abort_transaction",
        "complete_transaction",
    }
    machine = _machine_in(S.PREPARED_TRANSACTION)
    for call in ("send", "send_offsets_to_transaction", "begin_transaction", "prepare_transaction"):
        with pytest.raises(IllegalStateError):
            machine.check_call(call)


def test_send_only_inside_a_transaction() -> None:
    for state in TxnState:
        allowed = "send" in ALLOWED_CALLS[state]
        assert allowed == (state is S.IN_TRANSACTION)
