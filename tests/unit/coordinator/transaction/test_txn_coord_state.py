"""The transaction state table: every (current, target) pair, ids and names as Kafka's."""

from __future__ import annotations

import itertools

import pytest

from oncelog.coordinator.transaction.state import (
    EXPIRATION_ALLOWED,
    VALID_PREVIOUS_STATES,
    IllegalStateTransition,
    TransactionState,
    can_transition,
    check_transition,
    parse_state,
    state_from_id,
)

S = TransactionState

# Written out independently of the module, from Kafka's TransactionState.
EXPECTED_VALID: set[tuple[S, S]] = {
    (S.EMPTY, S.EMPTY),
    (S.COMPLETE_COMMIT, S.EMPTY),
    (S.COMPLETE_ABORT, S.EMPTY),
    (S.ONGOING, S.ONGOING),
    (S.EMPTY, S.ONGOING),
    (S.COMPLETE_COMMIT, S.ONGOING),
    (S.COMPLETE_ABORT, S.ONGOING),
    (S.ONGOING, S.PREPARE_COMMIT),
    (S.ONGOING, S.PREPARE_ABORT),
    (S.PREPARE_EPOCH_FENCE, S.PREPARE_ABORT),
    (S.EMPTY, S.PREPARE_ABORT),
    (S.COMPLETE_COMMIT, S.PREPARE_ABORT),
    (S.COMPLETE_ABORT, S.PREPARE_ABORT),
    (S.PREPARE_COMMIT, S.COMPLETE_COMMIT),
    (S.PREPARE_ABORT, S.COMPLETE_ABORT),
    (S.EMPTY, S.DEAD),
    (S.COMPLETE_COMMIT, S.DEAD),
    (S.COMPLETE_ABORT, S.DEAD),
    (S.ONGOING, S.PREPARE_EPOCH_FENCE),
}

ALL_PAIRS = list(itertools.product(S, S))


@pytest.mark.parametrize(("current", "target"), ALL_PAIRS, ids=lambda s: s.wire_name)
def test_every_pair_is_valid_exactly_when_kafka_allows_it(current: S, target: S) -> None:
    valid = (current, target) in EXPECTED_VALID
    assert can_transition(current, target) is valid
    if valid:
        assert check_transition(current, target) is target
    else:
        with pytest.raises(IllegalStateTransition, match=target.wire_name):
            check_transition(current, target)


def test_table_covers_every_state() -> None:
    assert set(VALID_PREVIOUS_STATES) == set(S)


def test_ids_and_names_are_kafkas() -> None:
    expected = {
        "Empty": 0, "Ongoing": 1, "PrepareCommit": 2, "PrepareAbort": 3,
        "CompleteCommit": 4, "CompleteAbort": 5, "Dead": 6, "PrepareEpochFence": 7,
    }
    assert {s.wire_name: s.id for s in S} == expected
    for name, state_id in expected.items():
        assert parse_state(name) is state_from_id(state_id)


def test_parse_state_is_exact_and_unknown_is_none() -> None:
    assert parse_state("ongoing") is None
    assert parse_state("Nope") is None
    with pytest.raises(ValueError, match="unknown transaction state id 8"):
        state_from_id(8)


def test_expiration_only_without_an_open_transaction() -> None:
    assert {s for s in S if s.expiration_allowed} == EXPIRATION_ALLOWED
    assert EXPIRATION_ALLOWED == {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}
    assert {s for s in S if s.is_prepared} == {S.PREPARE_COMMIT, S.PREPARE_ABORT}
    assert {s for s in S if s.is_complete} == {S.COMPLETE_COMMIT, S.COMPLETE_ABORT}
    # Empty is falsy nowhere: states are plain enums, not ints.
    assert all(bool(s) for s in S)
