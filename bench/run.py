"""Throughput of oncelog next to Tansu and Apache Kafka 4.4, with the same confluent-kafka settings.

    .venv/bin/python bench/run.py                       # everything, written to bench/RESULTS.md
    .venv/bin/python bench/run.py --scale 0.1           # a quick run (10% of the records)
    .venv/bin/python bench/run.py --brokers tansu --scenarios 100B-x1M-1p --output /tmp/r.md
    .venv/bin/python bench/run.py --profile             # oncelog under py-spy (or cProfile)
    .venv/bin/python bench/run.py --list                # the scenario registry
    .venv/bin/python bench/run.py --brokers oncelog,oncelog-cluster3,kafka-cluster3 \
        --scenarios 1KiB-x200k-6p-rf1-acks1,1KiB-x200k-6p-rf3-acksall   # replication

For every scenario and broker: start a fresh broker on loopback (oncelog with a temporary
data dir; Tansu with in-memory storage; Kafka 4.4, one KRaft node, with a temporary log dir,
see docs/reference-kafka.md; or one of the three-broker clusters of bench/brokers.py),
create the topic, run the producer and then the consumer, each in its own process
(bench/workload.py), and stop the broker. A scenario whose replication factor exceeds a
run's broker count is skipped for it (n/a). Logs, raw
results and profiles go to bench/out/ (git-ignored).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench import brokers, machine, profiles  # noqa: E402
from bench.scenarios import SCENARIOS, Scenario, select  # noqa: E402

logger = logging.getLogger("bench")

Result = dict[str, Any]


def create_topic(
    bootstrap: str, topic: str, partitions: int, replication_factor: int = 1,
    config: dict[str, str] | None = None,
) -> None:
    """Create the topic and wait until every partition has a leader and a full ISR."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(topic, partitions, replication_factor, config=dict(config or {}))
    admin.create_topics([new])[topic].result(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        metadata = admin.list_topics(topic, timeout=10).topics.get(topic)
        if metadata is not None and metadata.error is None and len(metadata.partitions) == (
            partitions
        ) and all(p.leader >= 0 and len(p.isrs) >= replication_factor
                  for p in metadata.partitions.values()):
            return
        time.sleep(0.1)
    raise RuntimeError(f"topic {topic} did not appear with {partitions} partitions in sync")


def spawn_worker(job: dict[str, Any], log: Any) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if "PYTHONPATH" in env else "")
    argv = [sys.executable, "-m", "bench.workload", json.dumps(job)]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, cwd=REPO, env=env)


def collect_worker(proc: subprocess.Popen[bytes], timeout: float) -> Result:
    try:
        stdout, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, _ = proc.communicate()
    lines = stdout.decode(errors="replace").strip().splitlines()
    if not lines:
        return {"records": 0, "bytes": 0, "seconds": 0.0, "errors": 1,
                "first_errors": [f"worker exited {proc.returncode} without a result"]}
    result: Result = json.loads(lines[-1])
    return result


def run_worker(job: dict[str, Any], log_path: Path) -> Result:
    with open(log_path, "ab") as log:
        return collect_worker(spawn_worker(job, log), job["timeout"] + 120)


def run_workers(jobs: list[dict[str, Any]], log_path: Path) -> list[Result]:
    """The jobs' workers all at once; their results in the jobs' order."""
    with open(log_path, "ab") as log:
        procs = [spawn_worker(job, log) for job in jobs]
        return [collect_worker(proc, job["timeout"] + 120)
                for proc, job in zip(procs, jobs, strict=True)]


def merge_txn_rates(results: list[Result]) -> Result:
    """Concurrent transaction-rate results as one: transactions over the span from the first
    worker's start to the last one's end; latency percentiles over every transaction."""
    failed = [r for r in results if r.get("errors")]
    if failed or not results:
        return {"records": 0, "bytes": 0, "seconds": 0.0, "producers": len(results),
                "errors": sum(int(r.get("errors", 1)) for r in failed) or 1,
                "first_errors": [e for r in failed for e in r.get("first_errors", [])][:5]}
    seconds = max(r["ended_at"] for r in results) - min(r["started_at"] for r in results)
    latencies = sorted(x for r in results for x in r["latencies_ms"])
    txns = sum(int(r["txns"]) for r in results)

    def pct(p: float) -> float:
        return float(latencies[min(len(latencies) - 1, int(p * len(latencies)))])

    return {
        "records": sum(int(r["records"]) for r in results),
        "bytes": sum(int(r["bytes"]) for r in results),
        "seconds": seconds,
        "txns": txns,
        "txn_per_s": txns / seconds,
        "p50_ms": pct(0.50),
        "p99_ms": pct(0.99),
        "producers": len(results),
        "errors": 0,
        "first_errors": [],
    }


def cpu_seconds(pid: int | None) -> float | None:
    """User + system CPU seconds the process (and its reaped children) used so far, from
    /proc; None when it cannot be read. Stable on a noisy machine, unlike wall-clock rates."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    # After the ")": state is field 3; utime, stime, cutime, cstime are fields 14-17.
    ticks = sum(int(v) for v in fields[11:15])
    return ticks / os.sysconf("SC_CLK_TCK")


def cpu_snapshot(running: brokers.Running) -> dict[str, float] | None:
    """``broker_cpu_s``: CPU seconds so far summed over the broker processes; and
    ``<name>_cpu_s`` for each side process (etcd). None when a broker's cannot be read."""
    per_broker = [cpu_seconds(server.pid) for server in running.servers]
    if any(value is None for value in per_broker):
        return None
    snapshot = {"broker_cpu_s": sum(v for v in per_broker if v is not None)}
    for name, server in running.side.items():
        value = cpu_seconds(server.pid)
        if value is not None:
            snapshot[f"{name}_cpu_s"] = value
    return snapshot


def cpu_delta(
    before: dict[str, float] | None, after: dict[str, float] | None
) -> dict[str, float]:
    """The CPU seconds used between two ``cpu_snapshot``s, for what both have."""
    if before is None or after is None:
        return {}
    return {key: after[key] - value for key, value in before.items() if key in after}


def run_measured(running: brokers.Running, job: dict[str, Any], log_path: Path) -> Result:
    """``run_worker`` with the brokers' CPU seconds over the phase (``broker_cpu_s``, and
    ``etcd_cpu_s`` for a cluster's etcd)."""
    before = cpu_snapshot(running)
    result = run_worker(job, log_path)
    result.update(cpu_delta(before, cpu_snapshot(running)))
    return result


def run_txn_rate(
    running: brokers.Running, scenario: Scenario, base: dict[str, Any], scale: float,
    log_path: Path,
) -> Result:
    """The transaction-rate phase: one worker, or ``scenario.producers`` at once (each on its
    own partition), with the broker's CPU seconds over the whole phase."""
    job = {**base, "phase": "txn-rate", "config": scenario.producer_config(),
           "txns": scenario.scaled_txns(scale)}
    if scenario.producers == 1:
        return run_measured(running, job, log_path)
    before = cpu_snapshot(running)
    merged = merge_txn_rates(run_workers(
        [{**job, "partition": p} for p in range(scenario.producers)], log_path
    ))
    merged.update(cpu_delta(before, cpu_snapshot(running)))
    return merged


def run_one(
    broker_name: str, scenario: Scenario, scale: float, out_dir: Path, tag: str, profile: bool
) -> dict[str, Any]:
    records = scenario.scaled_records(scale)
    topic = f"bench-{scenario.name}-{tag}"
    timeout = 600.0
    outcome: dict[str, Any] = {"broker": broker_name, "scenario": scenario.name,
                               "records": records}
    if scenario.replication_factor > brokers.SIZES[broker_name]:
        outcome["skipped"] = (f"replication factor {scenario.replication_factor} on "
                              f"{brokers.SIZES[broker_name]} broker(s)")
        return outcome
    running = brokers.start(broker_name, out_dir, f"{scenario.name}-{tag}", profile=profile)
    try:
        try:
            create_topic(running.bootstrap, topic, scenario.partitions,
                         scenario.replication_factor, dict(scenario.topic_config))
        except Exception as exc:  # reported in the results, the run goes on
            failure = {"records": 0, "bytes": 0, "seconds": 0.0, "errors": 1,
                       "first_errors": [f"creating the topic failed: {exc}"]}
            outcome["produce"] = outcome["consume"] = failure
            return outcome
        base = {"bootstrap": running.bootstrap, "topic": topic, "records": records,
                "record_size": scenario.record_size, "timeout": timeout}
        worker_log = out_dir / f"workers-{broker_name}-{scenario.name}-{tag}.log"
        if scenario.small_txns is not None:
            outcome["txn-rate"] = run_txn_rate(running, scenario, base, scale, worker_log)
            return outcome
        outcome["produce"] = run_measured(
            running,
            {**base, "phase": "produce", "config": scenario.producer_config(),
             "txn_records": scenario.txn_records, "txn_interval_ms": scenario.txn_interval_ms},
            worker_log,
        )
        if scenario.consume:
            outcome["consume"] = run_measured(
                running, {**base, "phase": "consume", "config": scenario.consumer_config()},
                worker_log,
            )
    finally:
        outcome["exit_code"] = brokers.stop(running)
        if running.profile is not None:
            outcome["profile"] = str(running.profile)
            outcome["profile_kind"] = running.profile_kind
    return outcome


def rate(result: Result | None) -> tuple[float, float] | None:
    """(records/s, MB/s) of a phase result, None when it failed."""
    if not result or result.get("errors") or not result.get("seconds"):
        return None
    seconds = result["seconds"]
    return result["records"] / seconds, result["bytes"] / seconds / 1e6


def median_phase(runs: list[dict[str, Any]], phase: str) -> Result | None:
    """The run with the median records/s for a phase (failed runs excluded)."""
    good = [r[phase] for r in runs if rate(r.get(phase)) is not None]
    if not good:
        return None
    good.sort(key=lambda res: rate(res)[0])  # type: ignore[index]
    return good[(len(good) - 1) // 2]


def cpu_per(result: Result | None, unit: str, scale: float, key: str = "broker_cpu_s") -> str:
    """Broker CPU milliseconds per ``unit`` of a phase result (per MB: unit "bytes", 1e6);
    ``key`` another process's CPU (``etcd_cpu_s``)."""
    if not result or result.get(key) is None or not result.get(unit):
        return "—"
    return f"{result[key] * 1000 / (result[unit] / scale):.2f}"


def ratio_pairs(broker_names: list[str]) -> list[tuple[str, str]]:
    """(oncelog run, other broker) pairs whose rates are compared: same broker count."""
    ours = [n for n in broker_names if n.startswith("oncelog")]
    return [(o, t) for o in ours for t in broker_names
            if not t.startswith("oncelog") and brokers.SIZES[o] == brokers.SIZES[t]]


def skipped(runs: list[dict[str, Any]]) -> bool:
    """Every run of a (scenario, broker) skipped (replication factor above its size)."""
    return bool(runs) and all("skipped" in r for r in runs)


def fmt_int(value: float) -> str:
    return f"{value:,.0f}"


def results_table(
    outcomes: list[dict[str, Any]], broker_names: list[str], scenarios: list[Scenario]
) -> str:
    by_key: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for outcome in outcomes:
        by_key[(outcome["scenario"], outcome["broker"])].append(outcome)
    # oncelog's rate over each other broker's of the same size, e.g. "oncelog/Tansu".
    pairs = ratio_pairs(broker_names)
    header = ["scenario", "records", "phase"]
    for name in broker_names:
        label = brokers.LABELS[name]
        header += [f"{label} records/s", f"{label} MB/s", f"{label} CPU ms/MB"]
    header += [f"{brokers.LABELS[o]}/{brokers.LABELS[t]}" for o, t in pairs]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * 3 + "---:|" * (len(header) - 3)]
    joins = ["| scenario | " + " | ".join(f"{brokers.LABELS[n]} join s" for n in broker_names)
             + " |", "|---|" + "---:|" * len(broker_names)]
    rate_scenarios = [sc for sc in scenarios if sc.small_txns is not None]
    for scenario in scenarios:
        if scenario.small_txns is not None:
            continue
        join_cells = []
        for phase in ("produce", "consume") if scenario.consume else ("produce",):
            cells = [scenario.name, fmt_int(scenario_records(outcomes, scenario)), phase]
            rates: dict[str, float] = {}
            for name in broker_names:
                chosen = median_phase(by_key[(scenario.name, name)], phase)
                r = rate(chosen)
                if skipped(by_key[(scenario.name, name)]):
                    cells += ["n/a", "—", "—"]
                elif r is None:
                    cells += ["failed", "—", "—"]
                else:
                    rates[name] = r[0]
                    cells += [fmt_int(r[0]), f"{r[1]:.1f}", cpu_per(chosen, "bytes", 1e6)]
                if phase == "consume":
                    join = chosen.get("join_seconds") if chosen else None
                    join_cells.append(f"{join:.2f}" if join is not None else "—")
            for ours, other in pairs:
                ratio = (rates[ours] / rates[other]
                         if ours in rates and other in rates else None)
                cells.append(f"{ratio:.2f}" if ratio is not None else "—")
            lines.append("| " + " | ".join(cells) + " |")
        if join_cells:
            joins.append(f"| {scenario.name} | " + " | ".join(join_cells) + " |")
    parts = ["\n".join(lines)] if len(rate_scenarios) < len(scenarios) else []
    if len(joins) > 2:
        parts.append("Consumer group join (subscribe to partition assignment):\n\n"
                     + "\n".join(joins))
    parts.append(side_cpu_table(outcomes, scenarios))
    if rate_scenarios:
        parts.append(txn_rate_table(outcomes, broker_names, rate_scenarios))
    return "\n\n".join(part for part in parts if part)


def side_cpu_table(outcomes: list[dict[str, Any]], scenarios: list[Scenario]) -> str:
    """etcd's CPU over each phase of the oncelog cluster runs (not in its broker CPU)."""
    lines = ["etcd (the oncelog cluster's metadata service) over the same phases, not "
             "included in the broker CPU above:", "",
             "| scenario | broker | phase | etcd CPU s | etcd CPU ms/MB or ms/txn |",
             "|---|---|---|---:|---:|"]
    order = {s.name: i for i, s in enumerate(scenarios)}
    rows = 0
    for o in sorted(outcomes, key=lambda o: order.get(o["scenario"], 0)):
        for phase in ("produce", "consume", "txn-rate"):
            res = o.get(phase)
            if not res or res.get("etcd_cpu_s") is None or res.get("errors"):
                continue
            unit = ("txns", 1.0) if phase == "txn-rate" else ("bytes", 1e6)
            lines.append(f"| {o['scenario']} | {brokers.LABELS[o['broker']]} | {phase} "
                         f"| {res['etcd_cpu_s']:.2f} | {cpu_per(res, *unit, key='etcd_cpu_s')} |")
            rows += 1
    return "\n".join(lines) if rows else ""


def txn_rate_table(
    outcomes: list[dict[str, Any]], broker_names: list[str], scenarios: list[Scenario]
) -> str:
    """Transactions/s and commit latency (begin to commit returned) per broker."""
    lines = [
        "Small transactions, one after the other (begin, sends, commit) in each producer;",
        "with several producers, transactions/s is the total over all of them:",
        "",
        "| scenario | broker | producers | transactions | transactions/s "
        "| oncelog/broker (txn/s) | p50 ms | p99 ms | broker CPU ms/txn |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    pairs = dict((t, o) for o, t in ratio_pairs(broker_names))
    for scenario in scenarios:
        chosen: dict[str, Result] = {}
        not_run: set[str] = set()
        for name in broker_names:
            mine = [o for o in outcomes if o["scenario"] == scenario.name and o["broker"] == name]
            if skipped(mine):
                not_run.add(name)
            runs = [o.get("txn-rate") for o in mine]
            good = sorted((r for r in runs if r and not r.get("errors")),
                          key=lambda r: r["txn_per_s"])
            if good:
                chosen[name] = good[(len(good) - 1) // 2]
        for name in broker_names:
            label = brokers.LABELS[name]
            r = chosen.get(name)
            if r is None:
                state = "n/a" if name in not_run else "failed"
                lines.append(f"| {scenario.name} | {label} | {scenario.producers} | — | {state} "
                             "| — | — | — | — |")
                continue
            ours = chosen.get(pairs[name]) if name in pairs else None
            ratio = (f"{ours['txn_per_s'] / r['txn_per_s']:.2f}"
                     if ours is not None else "—")
            lines.append(
                f"| {scenario.name} | {label} | {scenario.producers} | {fmt_int(r['txns'])} "
                f"| {r['txn_per_s']:,.0f} | {ratio} "
                f"| {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {cpu_per(r, 'txns', 1)} |"
            )
    return "\n".join(lines)


def scenario_records(outcomes: list[dict[str, Any]], scenario: Scenario) -> int:
    for outcome in outcomes:
        if outcome["scenario"] == scenario.name:
            return int(outcome["records"])
    return 0


def problems(outcomes: list[dict[str, Any]]) -> list[str]:
    found = []
    for o in outcomes:
        if "skipped" in o:
            continue
        where = f"{o['broker']} {o['scenario']}"
        phases = (("txn-rate",) if "txn-rate" in o
                  else ("produce", "consume") if "consume" in o or "produce" not in o
                  else ("produce",))
        for phase in phases:
            res = o.get(phase)
            if res is None:
                found.append(f"{where} {phase}: not run")
            elif res.get("errors"):
                found.append(f"{where} {phase}: {res['errors']} errors, e.g. "
                             f"{'; '.join(res.get('first_errors', []))[:300]}")
        if o.get("exit_code") not in (0, None):
            found.append(f"{where}: broker exited with code {o['exit_code']} on SIGTERM")
    return found


def _shown(path: Path) -> str:
    try:
        return str(path.relative_to(REPO))
    except ValueError:
        return str(path)


def profile_section(outcomes: list[dict[str, Any]], out_dir: Path) -> str:
    folded = [Path(o["profile"]) for o in outcomes
              if o.get("profile_kind") == "py-spy" and Path(o["profile"]).exists()]
    pstats_files = [Path(o["profile"]) for o in outcomes
                    if o.get("profile_kind") == "cprofile" and Path(o["profile"]).exists()]
    parts = ["## Profile of the oncelog broker", ""]
    if folded:
        stacks = profiles.read_folded(folded)
        svg = out_dir / "oncelog-flamegraph.svg"
        svg.write_text(profiles.flamegraph_svg(stacks, "oncelog serve, all scenarios"))
        for path in folded:
            path.with_suffix(".svg").write_text(
                profiles.flamegraph_svg(profiles.read_folded([path]), path.stem)
            )
        parts.append(
            f"py-spy, 100 samples/s, all scenarios together ({sum(stacks.values())} samples); "
            f"flame graphs and folded stacks in `{_shown(out_dir)}/`."
        )
        parts.append("")
        parts.append(profiles.markdown(profiles.summarise(stacks), "Top functions by own samples:"))
    elif pstats_files:
        where = _shown(out_dir)
        parts.append(f"cProfile (py-spy could not attach); files in `{where}/`.")
        for path in pstats_files:
            parts.append("")
            parts.append(profiles.markdown(profiles.summarise_cprofile(path), f"`{path.name}`:"))
    else:
        parts.append("No profile was written.")
    return "\n".join(parts)


def write_report(
    args: argparse.Namespace,
    argv: list[str],
    outcomes: list[dict[str, Any]],
    broker_names: list[str],
    scenarios: list[Scenario],
    info: dict[str, str],
    out_dir: Path,
) -> str:
    from bench.scenarios import BASE_CONSUMER, BASE_PRODUCER

    command = " ".join(shlex.quote(a) for a in [".venv/bin/python", "bench/run.py", *argv])
    extras = [f"- `{s.name}`: {s.description}" for s in scenarios if s.description]
    text = [
        "# oncelog vs Tansu and Apache Kafka: produce and consume throughput",
        "",
        f"Command: `{command}` — {time.strftime('%Y-%m-%d %H:%M %Z')}",
        "",
        "## Machine",
        "",
        *[f"- {k}: {v}" for k, v in info.items()],
        "",
        "## Method",
        "",
        "The brokers on loopback, one at a time, started fresh for each scenario (oncelog:",
        "`oncelog serve` with a new data dir on the filesystem above, log level WARNING;",
        "Tansu: `tansu broker --storage-engine memory://tansu/`, i.e. nothing on disk;",
        "Kafka: Apache Kafka 4.4 as one KRaft broker+controller with Kafka's defaults and a",
        "new log dir, see docs/reference-kafka.md and the JVM settings above).",
        *(["oncelog-3: etcd and three `oncelog serve` (node ids 1-3, log level WARNING,",
           f"{json.dumps(brokers.ONCELOG_CLUSTER_CONFIGS)}), oncelog/harness/cluster.py's",
           "ClusterProcess, each with its own data dir; its CPU is the sum over the three",
           "brokers, etcd's is listed apart."] if "oncelog-cluster3" in broker_names else []),
        *(["Kafka-3: three Kafka 4.4 KRaft nodes, each broker and controller (a static quorum",
           "of the three), each with the JVM settings above, "
           f"{json.dumps(brokers.KAFKA_CLUSTER_CONFIGS)};",
           "its CPU is the sum over the three JVMs."] if "kafka-cluster3" in broker_names
          else []),
        *(["The clusters are killed (-9) after the last phase, so no exit code is checked."]
          if any(brokers.SIZES[n] > 1 for n in broker_names) else []),
        "Producer and consumer are confluent-kafka, each in its own process, same settings",
        f"for every broker. Producer: `{json.dumps(dict(BASE_PRODUCER))}`; one unkeyed",
        "record value of the scenario's size, produced as fast as the client accepts;",
        "timed from the first `produce()` to the return of the final `flush()`.",
        f"Consumer: `{json.dumps(dict(BASE_CONSUMER))}`, a fresh group, `consume(10000)`",
        "until every record is read; timed from the partition assignment to the last record",
        "(the group join, from `subscribe()` to the assignment, is listed separately).",
        "Broker CPU is the broker processes' user + system time over the phase, read from",
        "/proc (stable on a noisy machine, unlike the rates).",
        "MB = 10^6 bytes of record values. "
        f"Repeats: {args.repeat} (median shown). Scale: {args.scale}.",
        *(["", *extras] if extras else []),
        "",
        "## Results",
        "",
        results_table(outcomes, broker_names, scenarios),
    ]
    found = problems(outcomes)
    if found:
        text += ["", "## Problems", "", *[f"- {p}" for p in found]]
    if args.profile:
        text += ["", profile_section(outcomes, out_dir),
                 "", "(Profiling slows oncelog down; its numbers above are not comparable.)"]
    return "\n".join(text) + "\n"


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--brokers", default="oncelog,tansu,kafka")
    parser.add_argument("--scenarios", default=None,
                        help="comma-separated names, or 'all' (default: the default set)")
    parser.add_argument("--scale", type=float, default=1.0, help="share of the records")
    parser.add_argument("--repeat", type=int, default=1, help="runs per scenario (median)")
    parser.add_argument("--profile", action="store_true", help="profile oncelog with py-spy")
    parser.add_argument("--output", type=Path, default=REPO / "bench" / "RESULTS.md")
    parser.add_argument("--out-dir", type=Path, default=REPO / "bench" / "out")
    parser.add_argument("--list", action="store_true", help="list the scenarios and exit")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    if args.list:
        for s in SCENARIOS.values():
            mark = "" if s.default else "  (not in the default set)"
            print(f"{s.name}: {s.records} x {s.record_size} B, {s.partitions} partition(s)"
                  f"{' — ' + s.description if s.description else ''}{mark}")
        return 0
    broker_names = [b.strip() for b in args.brokers.split(",") if b.strip()]
    for name in broker_names:
        if name not in brokers.BROKERS:
            raise SystemExit(f"unknown broker {name!r}; known: {', '.join(brokers.BROKERS)}")
    scenarios = select(args.scenarios)
    run_id = time.strftime("%Y%m%d-%H%M%S")
    out_dir = (args.out_dir / run_id).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)

    load_before = os.getloadavg()
    outcomes: list[dict[str, Any]] = []
    for scenario in scenarios:
        for name in broker_names:
            for rep in range(args.repeat):
                logger.info("%s on %s (run %d of %d), %d records", scenario.name, name,
                            rep + 1, args.repeat, scenario.scaled_records(args.scale))
                try:
                    outcome = run_one(name, scenario, args.scale, out_dir, f"r{rep}",
                                      args.profile and name == "oncelog")
                except Exception as exc:  # e.g. the broker did not start: report, go on
                    logger.exception("%s on %s failed", scenario.name, name)
                    failure = {"records": 0, "bytes": 0, "seconds": 0.0, "errors": 1,
                               "first_errors": [str(exc).splitlines()[0]]}
                    outcome = {"broker": name, "scenario": scenario.name,
                               "records": scenario.scaled_records(args.scale),
                               "produce": failure, "consume": failure, "exit_code": None}
                outcomes.append(outcome)
                if "skipped" in outcome:
                    logger.info("  skipped: %s", outcome["skipped"])
                    continue
                if "txn-rate" in outcome:
                    tr = outcome["txn-rate"]
                    logger.info("  transactions: %s", f"{tr.get('txn_per_s', 0):,.0f}/s, p50 "
                                f"{tr.get('p50_ms', 0):.2f} ms, p99 {tr.get('p99_ms', 0):.2f} ms"
                                if not tr.get("errors") else "FAILED")
                    continue
                for phase in ("produce", "consume") if "consume" in outcome else ("produce",):
                    r = rate(outcome.get(phase))
                    logger.info("  %s: %s", phase,
                                f"{r[0]:,.0f} records/s, {r[1]:.1f} MB/s" if r else "FAILED")
    (out_dir / "results.json").write_text(json.dumps(outcomes, indent=2))

    tansu_version = None
    if "tansu" in broker_names:
        from tests.support.tansu import tansu_binary

        tansu_version = machine._run(str(tansu_binary()), "--version")
    info = machine.describe(REPO, Path(tempfile.gettempdir()), tansu_version)
    # The machine may be shared: the load average (1, 5, 15 min) around the run says how much.
    info["load average at start"] = " / ".join(f"{x:.2f}" for x in load_before)
    info["load average at end"] = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    if "kafka" in broker_names or "kafka-cluster3" in broker_names:
        from tests.support.kafka import describe as describe_kafka

        info["Kafka"] = describe_kafka()
    if "oncelog-cluster3" in broker_names:
        from oncelog.harness.etcd import etcd_binary

        info["etcd"] = machine._run(etcd_binary(), "--version").splitlines()[0]
    report = write_report(args, argv, outcomes, broker_names, scenarios, info, out_dir)
    print(report)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(report)
    logger.info("wrote %s (details in %s)", args.output, out_dir)
    return 1 if problems(outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
