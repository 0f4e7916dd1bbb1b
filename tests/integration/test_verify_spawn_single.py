"""Issue 15's CI run on one node: ``oncelog verify --spawn single`` for two minutes with
broker kills, pauses, client crashes and cut connections, every client (oncelog,
confluent-kafka and the Java client, which ``make reference`` builds), as a user runs it.

It must find nothing but G0 and it must have done real work: the floors below are about a
third of what a run achieves on a loaded two-core machine (a run measured while writing
this test: 2300-2500 committed transactions, ~3200 polled records, 9 faults), so a run in
which the workload, the group or a client stopped working cannot pass.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.verify_cli import run_verify

FAULTS = ["kill", "pause", "client-crash", "cut"]
CLIENTS = ["oncelog", "confluent-kafka", "java"]
SEED = 15
MIN_OK = 750
MIN_FAULTS = 6


@pytest.mark.timeout(600)
def test_verify_spawn_single_two_minutes_of_faults_finds_nothing(tmp_path: Path) -> None:
    run = run_verify(tmp_path / "report", "--spawn", "single", "--duration", "2m",
                     "--faults", ",".join(FAULTS), "--clients", ",".join(CLIENTS),
                     "--seed", str(SEED), timeout=540)

    assert run.problems(min_ok=MIN_OK, min_faults=MIN_FAULTS, fault_kinds=FAULTS,
                        clients=CLIENTS, min_ok_per_client=20, min_polled=1000,
                        min_derived=800) == []
    assert "verdict: VALID" in run.output
