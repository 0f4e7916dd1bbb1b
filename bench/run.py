"""Throughput of oncelog next to Tansu and Apache Kafka 4.4, with the same confluent-kafka settings.

    .venv/bin/python bench/run.py                       # everything, written to bench/RESULTS.md
    .venv/bin/python bench/run.py --scale 0.1           # a quick run (10% of the records)
    .venv/bin/python bench/run.py --brokers tansu --scenarios 100B-x1M-1p --output /tmp/r.md
    .venv/bin/python bench/run.py --profile             # oncelog under py-spy (or cProfile)
    .venv/bin/python bench/run.py --list                # the scenario registry
    .venv/bin/python bench/run.py --scenarios issue18 --client-bench 200000 --scale 0.5
                                                        # issue 18's targets, one run
    .venv/bin/python bench/run.py --brokers oncelog --scenarios issue18 --profile \
        --flamegraphs bench/flamegraphs                 # one flame graph per scenario
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
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench import brokers, machine, profiles, request_floor  # noqa: E402
from bench.proc_cpu import cpu_times  # noqa: E402
from bench.report import problems, rate, results_table, targets_table  # noqa: E402
from bench.scenarios import SCENARIOS, Scenario, select  # noqa: E402
from bench.txn_stats import merge_txn_rates, without_samples  # noqa: E402

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


def cpu_seconds(pid: int | None) -> float | None:
    """User + system CPU seconds the process (and its reaped children) used so far, from
    /proc; None when it cannot be read. Stable on a noisy machine, unlike wall-clock rates."""
    times = cpu_times(pid)
    return None if times is None else times.with_children


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
    """The transaction-rate phase: ``scenario.producers`` producers at once, each on its own
    partition, ``producers_per_process`` threads to a worker process; their merged result
    with the broker's CPU seconds over the whole phase."""
    job = {**base, "phase": "txn-rate", "config": scenario.producer_config(),
           "txns": scenario.scaled_txns(scale), "client": scenario.client,
           "two_phase": scenario.two_phase}
    before = cpu_snapshot(running)
    merged = merge_txn_rates(run_workers(
        [{**job, "partitions": group} for group in scenario.worker_partitions()], log_path
    ))
    merged.update(cpu_delta(before, cpu_snapshot(running)))
    return without_samples(merged)


def run_ctp(
    running: brokers.Running, scenario: Scenario, base: dict[str, Any], log_path: Path
) -> Result:
    """The consume-transform-produce phase over the input the produce phase wrote."""
    output = f"{base['topic']}-out"
    create_topic(running.bootstrap, output, scenario.partitions,
                 scenario.replication_factor, dict(scenario.topic_config))
    job = {**base, "phase": "ctp", "output_topic": output,
           "commit_every": scenario.ctp_commit_every,
           "config": {**scenario.producer_config(), "linger.ms": 5},
           "consumer": {**scenario.consumer_config(), "isolation.level": "read_committed"}}
    return run_measured(running, job, log_path)


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
    running = brokers.start(broker_name, out_dir, f"{scenario.name}-{tag}", profile=profile,
                            configs=scenario.broker_configs.get(broker_name))
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
        if scenario.ctp_commit_every is not None:
            outcome["ctp"] = run_ctp(running, scenario, base, worker_log)
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


def _shown(path: Path) -> str:
    try:
        return str(path.relative_to(REPO))
    except ValueError:
        return str(path)


def profile_section(
    outcomes: list[dict[str, Any]], out_dir: Path, flame_dir: Path | None = None
) -> str:
    """All py-spy profiles together, then one flame graph (in ``flame_dir``, or ``out_dir``)
    and a top-functions table per scenario; or the cProfile summaries."""
    folded_by: dict[str, list[Path]] = {}
    for o in outcomes:
        if o.get("profile_kind") == "py-spy" and Path(o["profile"]).exists():
            folded_by.setdefault(o["scenario"], []).append(Path(o["profile"]))
    folded = [path for paths in folded_by.values() for path in paths]
    pstats_files = [Path(o["profile"]) for o in outcomes
                    if o.get("profile_kind") == "cprofile" and Path(o["profile"]).exists()]
    parts = ["## Profile of the oncelog broker", ""]
    if folded:
        stacks = profiles.read_folded(folded)
        svg = out_dir / "oncelog-flamegraph.svg"
        svg.write_text(profiles.flamegraph_svg(stacks, "oncelog serve, all scenarios"))
        parts.append(
            f"py-spy, 100 samples/s, all scenarios together ({sum(stacks.values())} samples); "
            f"folded stacks in `{_shown(out_dir)}/`."
        )
        parts.append("")
        parts.append(profiles.markdown(profiles.summarise(stacks), "Top functions by own samples:"))
        for scenario, paths in folded_by.items():
            mine = profiles.read_folded(paths)
            target = (flame_dir or out_dir) / f"{scenario}.svg"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(profiles.flamegraph_svg(mine, f"oncelog serve, {scenario}"))
            parts += ["", profiles.markdown(
                profiles.summarise(mine, top=10),
                f"`{scenario}`: {sum(mine.values())} samples, flame graph `{_shown(target)}`; "
                "top functions by own samples:")]
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
    client: dict[str, Any] | None = None,
    client_report: str | None = None,
    floor: dict[str, dict[str, Any]] | None = None,
) -> str:
    from bench.scenarios import BASE_CONSUMER, BASE_PRODUCER

    command = " ".join(shlex.quote(a) for a in [".venv/bin/python", "bench/run.py", *argv])
    extras = [f"- `{s.name}`: {s.description}"
              + "".join(f"; {brokers.LABELS.get(b, b)} broker configs `{json.dumps(dict(c))}`"
                        for b, c in s.broker_configs.items())
              for s in scenarios if s.description]
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
        *(["Transaction scenarios (bench/txn_workload.py): each producer has its own",
           "transactional id and partition; several producers in one worker process run in",
           "threads that start together once every producer is initialised. Consume-",
           "transform-produce: confluent-kafka consumer (read_committed, a fresh group) and",
           "transactional producer in one process, committing the consumed positions with",
           "send_offsets_to_transaction. 2PC: oncelog.client's KIP-939 prepare/complete (the",
           "Java client 4.4.0 has no prepareTransaction/completeTransaction, see",
           "tests/java/harness/.../TxnClient.java); broker configs per scenario below."]
          if any(s.small_txns is not None or s.ctp_commit_every is not None
                 for s in scenarios) else []),
        "MB = 10^6 bytes of record values. "
        f"Repeats: {args.repeat} (median shown). Scale: {args.scale}.",
        *(["", *extras] if extras else []),
        "",
        "## Results",
        "",
        results_table(outcomes, broker_names, scenarios),
    ]
    if client_report:
        text += ["", "## oncelog.client vs confluent-kafka (bench/client_bench.py, same run)",
                 "", client_report.replace("## Client throughput", "Client throughput", 1)]
    if floor:
        text += ["", "## The per-request floor (bench/request_floor.py, same run)", "",
                 "Broker CPU per request for empty Metadata v12 requests sent one after the "
                 "other on one connection (what any request costs before its handler does "
                 "anything; a confluent-kafka small transaction is three requests):", "",
                 request_floor.table(floor)]
    if args.targets:
        text += ["", "## Targets (issue 18)", "", targets_table(outcomes, client, floor)]
    found = problems(outcomes)
    if found:
        text += ["", "## Problems", "", *[f"- {p}" for p in found]]
    if args.profile:
        text += ["", profile_section(outcomes, out_dir, args.flamegraphs),
                 "", "(Profiling slows oncelog down; its numbers above are not comparable.)"]
    return "\n".join(text) + "\n"


def run_client_bench(records: int, out_dir: Path) -> tuple[dict[str, Any] | None, str | None]:
    """bench/client_bench.py with oncelog.client and confluent-kafka (its own fresh oncelog
    broker, ``records`` x 1 KiB): its raw results and its markdown report, or (None, a line
    saying why not) when it failed."""
    raw, markdown = out_dir / "client-bench.json", out_dir / "client-bench.md"
    argv = [sys.executable, str(REPO / "bench" / "client_bench.py"), "--clients",
            "oncelog,confluent-kafka", "--records", str(records), "--json", str(raw),
            "--output", str(markdown)]
    logger.info("client_bench: %d records x 1 KiB, oncelog.client and confluent-kafka", records)
    with open(out_dir / "client-bench.log", "ab") as log:
        done = subprocess.run(argv, stdout=log, stderr=log, cwd=REPO, check=False)
    if done.returncode != 0 or not raw.exists():
        return None, (f"bench/client_bench.py failed (exit {done.returncode}), see "
                      f"`{_shown(out_dir / 'client-bench.log')}`")
    return json.loads(raw.read_text()), markdown.read_text().strip()


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--brokers", default="oncelog,tansu,kafka")
    parser.add_argument("--scenarios", default=None,
                        help="comma-separated names, 'all', or a named selection (issue18: "
                        "also --targets); default: the default set")
    parser.add_argument("--scale", type=float, default=1.0, help="share of the records")
    parser.add_argument("--repeat", type=int, default=1, help="runs per scenario (median)")
    parser.add_argument("--profile", action="store_true", help="profile oncelog with py-spy")
    parser.add_argument("--output", type=Path, default=REPO / "bench" / "RESULTS.md")
    parser.add_argument("--out-dir", type=Path, default=REPO / "bench" / "out")
    parser.add_argument("--list", action="store_true", help="list the scenarios and exit")
    parser.add_argument("--flamegraphs", type=Path, default=None,
                        help="with --profile: write each scenario's flame graph here")
    parser.add_argument("--client-bench", type=int, default=0, metavar="RECORDS",
                        help="also run bench/client_bench.py (oncelog.client and "
                        "confluent-kafka, RECORDS x 1 KiB) and report it")
    parser.add_argument("--targets", action="store_true",
                        help="add the table of issue 18's targets")
    parser.add_argument("--request-floor", type=int, default=0, metavar="REQUESTS",
                        help="also measure each broker's CPU per minimal request "
                        "(bench/request_floor.py) with REQUESTS requests")
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
    args.targets = args.targets or args.scenarios == "issue18"
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
    client, client_report = (run_client_bench(args.client_bench, out_dir)
                             if args.client_bench else (None, None))
    floor = (request_floor.run(broker_names, args.request_floor, out_dir)
             if args.request_floor else None)

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
    report = write_report(args, argv, outcomes, broker_names, scenarios, info, out_dir,
                          client, client_report, floor)
    print(report)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(report)
    logger.info("wrote %s (details in %s)", args.output, out_dir)
    return 1 if problems(outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
