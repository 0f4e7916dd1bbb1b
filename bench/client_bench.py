"""Client throughput: oncelog.client next to confluent-kafka and kafka-python, one broker.

    .venv/bin/python bench/client_bench.py                         # 200k x 1 KiB, fresh broker
    .venv/bin/python bench/client_bench.py --records 50000 --clients oncelog,kafka-python
    .venv/bin/python bench/client_bench.py --bootstrap localhost:9092   # an existing broker
    .venv/bin/python bench/client_bench.py --profile               # py-spy on oncelog.client

One ``oncelog serve`` (fresh data dir, log level WARNING) serves every client in the same run.
For each client: a fresh topic, then a produce phase and a consume phase, each in its own
process (``--worker``) so clients never share an interpreter or a GIL with this driver.

- Produce: ``--records`` random values of ``--size`` bytes, no key, idempotent, acks=all,
  linger.ms=5, each client's default batch size unless ``--batch-size``; timed from the first
  send to the return of the final flush.
- Consume: manual assignment of every partition from the earliest offset, read_committed,
  no consumer group; timed from the first poll to the last record.

MB/s counts record values (10^6 bytes). CPU seconds are the client process's whole run
(start-up included) and, when this script started the broker, the broker's during the phase:
on a small machine they say which side is the bottleneck. The markdown table goes to stdout (and to
``--output``), followed by the exact command. With ``--profile`` the oncelog.client phases
run under py-spy; flame data (folded stacks) and a top-functions summary go to bench/out/.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.proc_cpu import cpu_times  # noqa: E402

CLIENTS = ("oncelog", "confluent-kafka", "kafka-python")
LABELS = {
    "oncelog": "oncelog.client",
    "confluent-kafka": "confluent-kafka (librdkafka)",
    "kafka-python": "kafka-python",
}
OUT = REPO / "bench" / "out"

Job = dict[str, Any]
Result = dict[str, Any]


# ---------------------------------------------------------------------- workers (own process)


def _value(job: Job) -> bytes:
    return os.urandom(job["size"])


def produce_oncelog(job: Job) -> Result:
    from oncelog.client import Producer

    config: dict[str, Any] = {
        "bootstrap.servers": job["bootstrap"],
        "acks": "all",
        "linger.ms": 5,
        "enable.idempotence": True,
    }
    if job.get("batch_size"):
        config["batch.size"] = job["batch_size"]
    producer = Producer(config)
    value, topic, count = _value(job), job["topic"], job["records"]
    producer.partitions_for(topic)  # metadata before the clock starts, as the others do
    send = producer.send
    start = time.perf_counter()
    futures = [send(topic, value) for _ in range(count)]
    left = producer.flush(job["timeout"])
    seconds = time.perf_counter() - start
    failed = sum(1 for f in futures if f.exception() is not None) if not left else left
    producer.close()
    return {"records": count, "seconds": seconds, "errors": failed}


def produce_confluent(job: Job) -> Result:
    from confluent_kafka import Producer

    errors: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    config: dict[str, Any] = {
        "bootstrap.servers": job["bootstrap"],
        "acks": "all",
        "linger.ms": 5,
        "enable.idempotence": True,
        "on_delivery": on_delivery,
    }
    if job.get("batch_size"):
        config["batch.size"] = job["batch_size"]
    producer = Producer(config)
    value, topic, count = _value(job), job["topic"], job["records"]
    producer.list_topics(topic, timeout=30)
    produce, poll = producer.produce, producer.poll
    start = time.perf_counter()
    for i in range(count):
        while True:
            try:
                produce(topic, value)
                break
            except BufferError:
                poll(0.005)
        if i & 0x3FF == 0:
            poll(0)
    left = producer.flush(job["timeout"])
    seconds = time.perf_counter() - start
    return {"records": count, "seconds": seconds, "errors": len(errors) + left}


def produce_kafka_python(job: Job) -> Result:
    from kafka import KafkaProducer

    kwargs: dict[str, Any] = {
        "bootstrap_servers": job["bootstrap"],
        "acks": "all",
        "linger_ms": 5,
        "enable_idempotence": True,
    }
    if job.get("batch_size"):
        kwargs["batch_size"] = job["batch_size"]
    producer = KafkaProducer(**kwargs)
    value, topic, count = _value(job), job["topic"], job["records"]
    producer.partitions_for(topic)
    send = producer.send
    start = time.perf_counter()
    futures = [send(topic, value) for _ in range(count)]
    producer.flush(job["timeout"])
    seconds = time.perf_counter() - start
    failed = sum(1 for f in futures if not f.succeeded())
    producer.close()
    return {"records": count, "seconds": seconds, "errors": failed}


def consume_oncelog(job: Job) -> Result:
    from oncelog.client import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": job["bootstrap"],
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
        }
    )
    tps = [TopicPartition(job["topic"], p) for p in range(job["partitions"])]
    consumer.assign(tps)
    consumer.seek_to_beginning(tps)
    return _consume_loop(job, lambda: consumer.poll(1.0), len, consumer.close)


def consume_confluent(job: Job) -> Result:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": job["bootstrap"],
            "group.id": "client-bench-unused",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(job["topic"], p, 0) for p in range(job["partitions"])])

    def count(messages: list[Any]) -> int:
        return sum(1 for m in messages if m.error() is None)

    return _consume_loop(
        job, lambda: consumer.consume(num_messages=1000, timeout=1.0), count, consumer.close
    )


def consume_kafka_python(job: Job) -> Result:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=job["bootstrap"],
        isolation_level="read_committed",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    tps = [TopicPartition(job["topic"], p) for p in range(job["partitions"])]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)

    def count(batches: dict[Any, list[Any]]) -> int:
        return sum(len(records) for records in batches.values())

    return _consume_loop(job, lambda: consumer.poll(timeout_ms=1000), count, consumer.close)


def _consume_loop(job: Job, poll: Any, count: Any, close: Any) -> Result:
    wanted, got = job["records"], 0
    start = time.perf_counter()
    deadline = start + job["timeout"]
    last = start
    while got < wanted and time.perf_counter() < deadline:
        n = count(poll())
        if n:
            got += n
            last = time.perf_counter()
    close()
    return {"records": got, "seconds": last - start, "errors": wanted - got}


WORKERS = {
    ("produce", "oncelog"): produce_oncelog,
    ("produce", "confluent-kafka"): produce_confluent,
    ("produce", "kafka-python"): produce_kafka_python,
    ("consume", "oncelog"): consume_oncelog,
    ("consume", "confluent-kafka"): consume_confluent,
    ("consume", "kafka-python"): consume_kafka_python,
}


def worker_main(text: str) -> None:
    job = json.loads(text)
    before = os.times()
    result = WORKERS[(job["phase"], job["client"])](job)
    after = os.times()
    result["cpu_seconds"] = (after.user - before.user) + (after.system - before.system)
    print(json.dumps(result), flush=True)


def process_cpu_seconds(pid: int | None) -> float | None:
    """User + system CPU time of a process from /proc (None where there is no /proc)."""
    times = cpu_times(pid)
    return None if times is None else times.own


# ---------------------------------------------------------------------- driver


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        metadata = admin.list_topics(topic, timeout=10).topics.get(topic)
        if metadata is not None and metadata.error is None and metadata.partitions:
            return
        time.sleep(0.1)
    raise RuntimeError(f"topic {topic} did not appear")


def py_spy() -> str | None:
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


def run_worker(job: Job, profile_to: Path | None) -> Result:
    argv = [sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(job)]
    if profile_to is not None:
        spy = py_spy()
        if spy is None:
            raise SystemExit("--profile needs py-spy")
        argv = [spy, "record", "--format", "raw", "--rate", "250", "--subprocesses",
                "--threads", "--output", str(profile_to), "--", *argv]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=job["timeout"] + 120, env=env, cwd=REPO
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{job['phase']} {job['client']} failed:\n{done.stderr[-3000:]}")
    result: Result = json.loads(lines[-1])
    return result


def top_functions(folded: Path, limit: int = 25) -> list[tuple[str, float, float]]:
    """(function, self %, total %) from py-spy's folded stacks."""
    own: Counter[str] = Counter()
    total: Counter[str] = Counter()
    samples = 0
    for line in folded.read_text().splitlines():
        stack, _, n_text = line.rpartition(" ")
        if not stack:
            continue
        n = int(n_text)
        samples += n
        frames = stack.split(";")
        own[frames[-1]] += n
        for frame in set(frames):
            total[frame] += n
    if not samples:
        return []
    return [
        (frame, 100 * n / samples, 100 * total[frame] / samples)
        for frame, n in own.most_common(limit)
    ]


def mbps(result: Result, size: int) -> float:
    return result["records"] * size / 1e6 / result["seconds"] if result["seconds"] else 0.0


def _cpu(result: Result) -> str:
    """``client CPU s / broker CPU s`` over the phase's wall time."""
    broker = result.get("broker_cpu_seconds")
    text = f"{result['cpu_seconds']:.1f}"
    return text + (f" / {broker:.1f}" if broker is not None else "")


Runs = dict[str, dict[str, list[Result]]]


def median_run(runs: list[Result], size: int) -> Result:
    return sorted(runs, key=lambda r: mbps(r, size))[len(runs) // 2]


def _spread(runs: list[Result], size: int) -> str:
    if len(runs) < 2:
        return ""
    rates = [mbps(r, size) for r in runs]
    return f" ({min(rates):.1f}-{max(rates):.1f})"


def table(results: Runs, size: int) -> list[str]:
    rows = [
        "| client | produce MB/s | records/s | wall s | CPU s client / broker "
        "| consume MB/s | records/s | wall s | CPU s client / broker |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for client, phases in results.items():
        p, c = median_run(phases["produce"], size), median_run(phases["consume"], size)
        rows.append(
            f"| {LABELS[client]} | {mbps(p, size):.1f}{_spread(phases['produce'], size)} "
            f"| {p['records'] / p['seconds']:,.0f} | {p['seconds']:.2f} | {_cpu(p)} "
            f"| {mbps(c, size):.1f}{_spread(phases['consume'], size)} "
            f"| {c['records'] / c['seconds']:,.0f} | {c['seconds']:.2f} | {_cpu(c)} |"
        )
    return rows


def ratios(results: Runs, size: int) -> list[str]:
    if "oncelog" not in results:
        return []
    lines = []
    for phase in ("produce", "consume"):

        def rate(client: str, phase: str = phase) -> float:
            return mbps(median_run(results[client][phase], size), size)

        ours = rate("oncelog")
        parts = []
        if "kafka-python" in results:
            parts.append(f"{ours / rate('kafka-python'):.2f}x kafka-python")
        if "confluent-kafka" in results:
            parts.append(f"confluent-kafka is {rate('confluent-kafka') / ours:.2f}x oncelog.client")
        if parts:
            lines.append(f"- {phase} (medians): " + ", ".join(
                part if part.startswith("confluent") else f"oncelog.client = {part}"
                for part in parts))
    return lines


def run_client(
    args: argparse.Namespace,
    client: str,
    tag: str,
    bootstrap: str,
    broker: Any,
    results: Runs,
    profiles: dict[str, Path],
) -> None:
    """One produce and one consume phase of ``client`` on a fresh topic."""
    topic = f"client-bench-{client}-{tag}-{os.getpid()}"
    create_topic(bootstrap, topic, args.partitions)
    for phase in ("produce", "consume"):
        job = {
            "phase": phase, "client": client, "bootstrap": bootstrap, "topic": topic,
            "records": args.records, "size": args.size, "partitions": args.partitions,
            "batch_size": args.batch_size, "timeout": args.timeout,
        }  # fmt: skip
        profile_to = None
        if args.profile and client == "oncelog" and phase not in profiles:
            OUT.mkdir(parents=True, exist_ok=True)
            profile_to = OUT / f"client-bench-{tag}-{phase}.folded"
            profiles[phase] = profile_to
        pid = broker.pid if broker is not None else None
        broker_cpu = process_cpu_seconds(pid)
        result = run_worker(job, profile_to)
        if broker_cpu is not None:
            # Includes the worker's start-up and metadata calls: an upper bound.
            result["broker_cpu_seconds"] = (process_cpu_seconds(pid) or 0.0) - broker_cpu
        if result["errors"]:
            raise RuntimeError(f"{phase} {client}: {result}")
        results[client][phase].append(result)
        print(
            f"{LABELS[client]:>28} {phase:>7}: {mbps(result, args.size):7.1f} MB/s "
            f"({result['records']} records in {result['seconds']:.2f}s)",
            file=sys.stderr,
            flush=True,
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=1024, help="record value bytes")
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=0, help="0: each client's default")
    parser.add_argument("--clients", default=",".join(CLIENTS))
    parser.add_argument("--bootstrap", help="use this broker instead of starting one")
    parser.add_argument("--repeat", type=int, default=1, help="rounds; the table shows medians")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--profile", action="store_true", help="py-spy the oncelog.client phases")
    parser.add_argument("--output", type=Path, help="also write the report here")
    parser.add_argument("--json", type=Path, help="also write the raw results here")
    args = parser.parse_args()
    if args.worker:
        worker_main(args.worker)
        return 0
    clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    for client in clients:
        if client not in CLIENTS:
            parser.error(f"unknown client {client!r}; choose from {', '.join(CLIENTS)}")

    command = shlex.join([".venv/bin/python", "bench/client_bench.py", *sys.argv[1:]])
    stamp = time.strftime("%Y%m%d-%H%M%S")
    broker = None
    tmp = None
    if args.bootstrap:
        bootstrap = args.bootstrap
    else:
        from oncelog.harness.broker import BrokerProcess

        tmp = Path(tempfile.mkdtemp(prefix="client-bench-"))
        broker = BrokerProcess(tmp / "data", log_level="WARNING", stop_timeout=120.0)
        broker.start()
        bootstrap = broker.bootstrap
    results: Runs = {client: {"produce": [], "consume": []} for client in clients}
    profiles: dict[str, Path] = {}
    load_before = os.getloadavg()
    try:
        for round_ in range(args.repeat):
            for client in clients:
                run_client(args, client, f"{stamp}-{round_}", bootstrap, broker, results, profiles)
    finally:
        if broker is not None:
            broker.kill()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)

    batch = (
        f"batch.size={args.batch_size}" if args.batch_size else "each client's default batch size"
    )
    where = f"given: {bootstrap}" if args.bootstrap else "fresh, loopback"
    report = [
        f"## Client throughput: {args.records:,} records x {args.size} B, "
        f"{args.partitions} partition(s)",
        "",
        f"acks=all, linger.ms=5, idempotent, {batch}; consume: assign, earliest, "
        f"read_committed. One oncelog broker ({where}); "
        f"{platform.python_implementation()} {platform.python_version()}, "
        f"{os.cpu_count()} CPUs, {platform.machine()}; load average "
        f"{load_before[0]:.1f} before, {os.getloadavg()[0]:.1f} after. "
        f"{args.repeat} round(s), clients interleaved; MB/s is the median (min-max).",
        "",
        *table(results, args.size),
        "",
        *ratios(results, args.size),
        "",
        f"Command: `{command}`",
    ]
    for phase, folded in profiles.items():
        report += ["", f"### py-spy: oncelog.client {phase} ({folded.relative_to(REPO)})", ""]
        report += ["| function | self % | total % |", "|---|---:|---:|"]
        report += [f"| `{f}` | {s:.1f} | {t:.1f} |" for f, s, t in top_functions(folded)]
    text = "\n".join(report) + "\n"
    print(text)
    if args.output:
        args.output.write_text(text)
    if args.json:
        args.json.write_text(json.dumps({"records": args.records, "size": args.size,
                                         "command": command, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
