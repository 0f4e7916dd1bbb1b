"""Everything that decides which group state may follow which lives in this one module.

A classic consumer group moves through five states. Each state declares the states it may
be entered from; a missing entry is the error. The table is the specification:

    Empty ──join──► PreparingRebalance ──all joined──► CompletingRebalance ──leader sync──► Stable
      ▲                 ▲       │                          │                                  │
      │                 │       └──all members gone────────┼──────────────► Empty             │
      │                 └─────── member joins / leaves / times out ◄──────────┴───────────────┘
      └── Dead (deleted or unloaded) may be entered from every state and left from none.
"""

from __future__ import annotations

import enum


class GroupState(enum.Enum):
    """The states of a classic group, named as Kafka's DescribeGroups/ListGroups show them."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"

    @property
    def wire_name(self) -> str:
        return self.value


# For each state, the states it may be entered from.
VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    # Entered when the last member leaves or expires, or when a rebalance completes with
    # no members left; a group loaded with no members starts here too.
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    # A member joined, left or timed out, or a member's protocols changed.
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}
    ),
    # Every member rejoined (or the rebalance timed out): waiting for the leader's SyncGroup.
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    # The leader's assignment is durably stored and handed to every member.
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    # The group was deleted, or its offsets partition unloaded.
    GroupState.DEAD: frozenset(
        {
            GroupState.STABLE,
            GroupState.PREPARING_REBALANCE,
            GroupState.COMPLETING_REBALANCE,
            GroupState.EMPTY,
            GroupState.DEAD,
        }
    ),
}


class IllegalStateTransition(Exception):
    """A transition that the table does not allow: a bug in the coordinator, never a client's."""


def can_transition(current: GroupState, target: GroupState) -> bool:
    return current in VALID_PREVIOUS_STATES[target]


def check_transition(current: GroupState, target: GroupState) -> GroupState:
    """Return ``target`` if it may follow ``current``; raise IllegalStateTransition otherwise."""
    if not can_transition(current, target):
        raise IllegalStateTransition(f"group may not go from {current.value} to {target.value}")
    return target


def parse_state(name: str) -> GroupState | None:
    """A state from its wire name, case-insensitively (as ListGroups' states filter is)."""
    lowered = name.lower()
    for state in GroupState:
        if state.value.lower() == lowered:
            return state
    return None
