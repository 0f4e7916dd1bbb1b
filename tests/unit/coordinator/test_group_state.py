"""The group state table: every (from, to) pair, written out independently of the module."""

from __future__ import annotations

import itertools

import pytest

from oncelog.coordinator.group.state import (
    GroupState,
    IllegalStateTransition,
    can_transition,
    check_transition,
    parse_state,
)

E, P, C, S, D = (
    GroupState.EMPTY,
    GroupState.PREPARING_REBALANCE,
    GroupState.COMPLETING_REBALANCE,
    GroupState.STABLE,
    GroupState.DEAD,
)

ALLOWED = {
    (P, E),  # rebalance ended with no members
    (E, P), (S, P), (C, P),  # a member joined / left / timed out
    (P, C),  # join phase over
    (C, S),  # leader's assignment stored
    (E, D), (P, D), (C, D), (S, D), (D, D),  # deleted or unloaded
}


@pytest.mark.parametrize("current,target", list(itertools.product(GroupState, repeat=2)))
def test_transition_table(current: GroupState, target: GroupState) -> None:
    expected = (current, target) in ALLOWED
    assert can_transition(current, target) is expected
    if expected:
        assert check_transition(current, target) is target
    else:
        with pytest.raises(IllegalStateTransition):
            check_transition(current, target)


def test_nothing_leaves_dead() -> None:
    assert [t for t in GroupState if can_transition(D, t)] == [D]


def test_wire_names_and_parsing() -> None:
    assert [s.wire_name for s in GroupState] == [
        "Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead",
    ]
    assert parse_state("stable") is S
    assert parse_state("PREPARINGREBALANCE") is P
    assert parse_state("bogus") is None
