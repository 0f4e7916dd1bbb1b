"""Issue 15's CI run on one node: ``oncelog verify --spawn single`` for two minutes with
broker kills, pauses, client crashes and cut connections, every client (oncelog,
confluent-kafka and the Java client, which ``make reference`` builds), as a user runs it.

It must find nothing but G0 and it must have done real work: the floors are about a third
of what a run achieves on a loaded two-core machine (runs measured while writing this test:
2300-2500 committed transactions, ~3200 polled records, ~2900 derived records, 9 faults),
so a run in which the workload, the group or a client stopped working cannot pass.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.verify_cli import Floors, check_spawned_run

FLOORS = Floors(ok=750, faults=6, ok_per_client=20, polled=1000, derived=800)


@pytest.mark.timeout(600)
def test_verify_spawn_single_two_minutes_of_faults_finds_nothing(tmp_path: Path) -> None:
    check_spawned_run(tmp_path, "single", ["kill", "pause", "client-crash", "cut"],
                      ["oncelog", "confluent-kafka", "java"], FLOORS, seed=15, timeout=540)
