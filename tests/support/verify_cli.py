"""``oncelog verify`` as a user runs it, for the end-to-end tests (issue 15): the command as a
subprocess with the repository first on PYTHONPATH (its spawned brokers and workers run
this checkout), and what its report directory says about the run.

``Run.problems(...)`` lists every way the run falls short of a healthy one: anomalies other
than G0, an incomplete final read, and too little work (floors on committed transactions,
faults, polled and derived records, per client), so that a run in which nothing worked
cannot pass.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from oncelog.verify.history import DERIVED_PREFIX, NOT_FAILURES, OK, History, read_history

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Run:
    returncode: int
    output: str
    report: Path

    @property
    def results(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.report / "results.json").read_text())
        return data

    @property
    def history(self) -> History:
        return read_history(self.report / "history.jsonl")

    def failures(self) -> dict[str, int]:
        """Anomaly counts of the classes that are failures (all but G0)."""
        counts: dict[str, int] = self.results["counts"]
        return {k: n for k, n in counts.items() if n and k not in NOT_FAILURES}

    def examples(self, kind: str) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self.results["anomalies"].get(kind, [])
        return found

    def problems(self, *, min_ok: int, min_faults: int, fault_kinds: list[str],
                 clients: list[str], min_ok_per_client: int = 5,
                 min_polled: int = 50, min_derived: int = 50) -> list[str]:
        """Everything wrong with the run as a healthy one (empty: it passes)."""
        out: list[str] = []
        if self.returncode != 0:
            out.append(f"exit code {self.returncode}")
        if not (self.report / "report.html").is_file():
            out.append("no report.html")
        failures = self.failures()
        if failures:
            out.append(f"anomalies {failures}: "
                       f"{[self.examples(k)[:2] for k in failures]}")
        totals = self.results["totals"]
        ok = totals["txns"]["ok"]
        if ok < min_ok:
            out.append(f"{ok} committed transactions < {min_ok}")
        faults: dict[str, int] = totals["faults"]
        if sum(faults.values()) < min_faults:
            out.append(f"{sum(faults.values())} faults < {min_faults}: {faults}")
        missing = [k for k in fault_kinds if faults.get(k, 0) < 1]
        if missing:
            out.append(f"fault kinds never injected: {missing} ({faults})")
        if totals["polled_records"] < min_polled:
            out.append(f"{totals['polled_records']} polled records < {min_polled}")
        history = self.history
        committed = Counter(op.client for op in history.ops if op.outcome == OK)
        slow = {c: committed[c] for c in clients if committed[c] < min_ok_per_client}
        if slow:
            out.append(f"clients with < {min_ok_per_client} commits: {slow}")
        final = history.final
        if final is None or not final.complete:
            out.append("the final read is missing or incomplete")
        else:
            derived = sum(1 for records in final.reads.values() for _, v in records
                          if v.startswith(DERIVED_PREFIX))
            if derived < min_derived:
                out.append(f"{derived} derived (consume-transform-produce) records in the "
                           f"final read < {min_derived}")
            if not final.committed:
                out.append("the group committed no offsets")
        return out


def run_verify(report: Path, *args: str, timeout: float,
               env: dict[str, str] | None = None) -> Run:
    """``oncelog verify --report REPORT ARGS...``; its output is printed (pytest shows it
    when the test fails)."""
    environment = {**os.environ, **(env or {})}
    environment["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO), environment.get("PYTHONPATH", "")) if p)
    proc = subprocess.run(
        [sys.executable, "-m", "oncelog.cli.main", "verify", "--report", str(report), *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        text=True, timeout=timeout, env=environment, cwd=REPO)
    print(proc.stdout)
    return Run(proc.returncode, proc.stdout, report)



@dataclass(frozen=True)
class Floors:
    """The least work a healthy run does (see ``Run.problems``)."""
    ok: int
    faults: int
    ok_per_client: int
    polled: int
    derived: int


def check_spawned_run(tmp_path: Path, spawn: str, faults: list[str], clients: list[str],
                      floors: Floors, *, seed: int, timeout: float) -> Run:
    """Two minutes of ``oncelog verify --spawn SPAWN`` with those faults and clients; fails
    the test unless the run was healthy and valid."""
    run = run_verify(tmp_path / "report", "--spawn", spawn, "--duration", "2m", "--faults",
                     ",".join(faults), "--clients", ",".join(clients), "--seed", str(seed),
                     timeout=timeout)
    assert run.problems(min_ok=floors.ok, min_faults=floors.faults, fault_kinds=faults,
                        clients=clients, min_ok_per_client=floors.ok_per_client,
                        min_polled=floors.polled, min_derived=floors.derived) == []
    assert "verdict: VALID" in run.output
    return run
