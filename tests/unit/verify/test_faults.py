"""The verify fault schedule (oncelog/verify/faults.py): seeded, spaced, one broker fault
at a time, only kinds the deployment can inject."""

from __future__ import annotations

import itertools

import pytest

from oncelog.verify.faults import (
    CLUSTER_KINDS,
    GAP_S,
    HOLD_S,
    QUIET_END_S,
    SINGLE_KINDS,
    WARM_UP_S,
    PlannedFault,
    UnsupportedFault,
    check_kinds,
    choose,
    plan,
)

ALL_CLUSTER = [*CLUSTER_KINDS, "partition"]


def test_same_seed_same_schedule_and_kind_order_does_not_matter() -> None:
    first = plan(7, 600, SINGLE_KINDS, "single")
    assert first == plan(7, 600, list(reversed(SINGLE_KINDS)), "single")
    assert first != plan(8, 600, SINGLE_KINDS, "single")
    assert len(first) >= 600 / (GAP_S[1] + HOLD_S[1]) - 2


@pytest.mark.parametrize("seed", range(20))
def test_spacing_warm_up_holds_and_quiet_end(seed: int) -> None:
    duration = 300.0
    faults = plan(seed, duration, ALL_CLUSTER, "cluster", netns=True)
    assert faults
    assert faults[0].at_s >= WARM_UP_S + GAP_S[0]
    for before, after in itertools.pairwise(faults):
        assert after.at_s - before.at_s >= GAP_S[0] - 0.01
    for fault in faults:
        if fault.kind == "client-crash":
            assert fault.hold_s == 0
        else:
            assert HOLD_S[0] - 0.01 <= fault.hold_s <= HOLD_S[1] + 0.01
        assert fault.end_s <= duration - QUIET_END_S


@pytest.mark.parametrize("seed", range(20))
def test_one_broker_fault_at_a_time(seed: int) -> None:
    broker_faults = [f for f in plan(seed, 600, ALL_CLUSTER, "cluster", netns=True)
                     if f.hits_broker]
    assert len(broker_faults) > 10
    for before, after in itertools.pairwise(broker_faults):
        assert after.at_s >= before.end_s, (before, after)


def test_every_requested_kind_appears_and_no_other() -> None:
    faults = plan(3, 1800, ["kill", "cut"], "single")
    assert {f.kind for f in faults} == {"kill", "cut"}
    faults = plan(3, 1800, ALL_CLUSTER, "cluster", netns=True)
    assert {f.kind for f in faults} == set(ALL_CLUSTER)


@pytest.mark.parametrize(("kinds", "deployment", "netns"), [
    (["leader-kill"], "single", False),
    (["coordinator-kill"], "single", False),
    (["partition"], "single", False),
    (["partition"], "cluster", False),
    (["kill"], "external", False),
    (["meteor"], "cluster", True),
])
def test_kinds_the_deployment_cannot_inject_are_an_error(
        kinds: list[str], deployment: str, netns: bool) -> None:
    with pytest.raises(UnsupportedFault, match=kinds[0]):
        plan(1, 120, kinds, deployment, netns=netns)


def test_kinds_checked_and_sorted() -> None:
    assert check_kinds(["cut", "kill", "cut"], "single") == ["cut", "kill"]
    assert check_kinds(["client-crash"], "external") == ["client-crash"]
    assert check_kinds(["partition"], "cluster", netns=True) == ["partition"]
    with pytest.raises(ValueError, match="deployment kind"):
        check_kinds(["kill"], "moon")


def test_no_kinds_or_too_short_a_run_plans_nothing() -> None:
    assert plan(1, 600, [], "single") == []
    assert plan(1, WARM_UP_S + QUIET_END_S + GAP_S[0], SINGLE_KINDS, "single") == []


def test_choose_is_deterministic_and_salted() -> None:
    picks = [choose(p, 3) for p in range(300)]
    assert picks == [choose(p, 3) for p in range(300)]
    assert set(picks) == {0, 1, 2}
    assert [choose(p, 3, salt=1) for p in range(300)] != picks
    with pytest.raises(ValueError):
        choose(1, 0)


def test_planned_fault_end() -> None:
    fault = PlannedFault(10.0, "kill", 3.5, 1)
    assert fault.end_s == 13.5 and fault.hits_broker
    assert not PlannedFault(10.0, "client-crash", 0.0, 1).hits_broker
