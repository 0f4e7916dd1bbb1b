"""Issue 16's figures: size on disk of ``__transaction_state`` + ``__consumer_offsets`` and the
broker's restart-to-ready time after N consume-transform-produce transactional commits
(oncelog.client, 4 transactional ids, ``send_offsets_to_transaction`` each commit), with the
log cleaner on and off (``log.cleaner.enable=false`` stands in for "before issue 16").

    PYTHONPATH=. .venv/bin/python bench/compaction.py --commits 10000
    PYTHONPATH=. .venv/bin/python bench/compaction.py --commits 0 --clean-mb 100
    PYTHONPATH=. .venv/bin/python bench/compaction.py --commits 0 --produce-mb 200

``--clean-mb``: cleaner throughput, one ``clean_now`` pass (on this thread, no broker) over a
generated compacted log of that many MB (8 MiB segments, 1 KiB values over 10k keys: about
one record in ten survives), MB read per second. ``--produce-mb``: produce throughput
(confluent-kafka, acks=1, 1 KiB values over 10k keys) into a compacted topic with 1 MiB
segments and ``min.cleanable.dirty.ratio=0.01`` (the cleaner busy the whole run) vs
``log.cleaner.enable=false``: MB/s and the broker's CPU seconds per MB (/proc).

Internal topics use 1 partition each and 1 MiB segments so that they roll (the default
100 MiB segments would hold 10k commits in the active segment, never cleaned). Not asserted:
printed as a Markdown table for bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

from bench.run import cpu_seconds
from oncelog.client import Admin, NewTopic, OffsetAndMetadata, Producer, TopicPartition
from oncelog.clock import SystemClock
from oncelog.config import LogConfig
from oncelog.harness.broker import BrokerProcess
from oncelog.records.batch import parse_header
from oncelog.records.codec import RecordInput, encode_batch
from oncelog.storage.cleaner_run import clean_now
from oncelog.storage.unified_log import UnifiedLog

IDS = 4
INTERNAL = ("__transaction_state", "__consumer_offsets")


def commit_loop(bootstrap: str, topic: str, index: int, commits: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0,
                         "transactional.id": f"bench-{index}"})
    try:
        producer.init_transactions()
        source = TopicPartition(f"source-{index}", 0)
        for n in range(commits):
            producer.begin_transaction()
            producer.send(topic, f"{index}-{n}".encode(), key=f"k{index}".encode())
            producer.send_offsets_to_transaction({source: OffsetAndMetadata(n + 1)},
                                                 f"bench-group-{index}")
            producer.commit_transaction()
    finally:
        producer.close()


def internal_bytes(data_dir: Path) -> int:
    return sum(f.stat().st_size for t in INTERNAL for f in data_dir.glob(f"{t}-*/*"))


def run(commits: int, cleaner: bool, settle_s: float) -> tuple[float, int, float, float]:
    """(commit seconds, internal bytes on disk, restart-to-ready seconds, commits/s)."""
    data_dir = Path(tempfile.mkdtemp(prefix="bench-compaction-")) / "data"
    broker = BrokerProcess(data_dir, log_level="WARNING", configs={
        "transaction.state.log.segment.bytes": 1 << 20,
        "offsets.topic.segment.bytes": 1 << 20,
        "transaction.state.log.num.partitions": 1,
        "offsets.topic.num.partitions": 1,
        "log.cleaner.enable": cleaner,
        "log.cleaner.backoff.ms": 1000,
        "log.cleaner.delete.retention.ms": 1000,
    })
    broker.start()
    try:
        with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
            admin.create_topics([NewTopic("bench-out", 1, 1)])
        started = time.monotonic()
        threads = [threading.Thread(target=commit_loop,
                                    args=(broker.bootstrap, "bench-out", i, commits // IDS))
                   for i in range(IDS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.monotonic() - started
        time.sleep(settle_s)  # let the cleaner catch up with the last rolled segments
        size = internal_bytes(data_dir)
        broker.stop()
        started = time.monotonic()
        broker.start()
        restart = time.monotonic() - started
        return elapsed, size, restart, commits / elapsed
    finally:
        broker.stop()
        shutil.rmtree(data_dir.parent, ignore_errors=True)


KEYS = 10_000
VALUE = 1024
MB = 1 << 20


def clean_throughput(megabytes: int) -> tuple[float, int, int, float]:
    """(seconds, bytes read, bytes after, MB/s) of one pass over a generated log."""
    directory = Path(tempfile.mkdtemp(prefix="bench-clean-"))
    clock = SystemClock()
    config = LogConfig(cleanup_policy="compact", segment_bytes=8 * MB,
                       min_cleanable_dirty_ratio=0.0)
    engine = UnifiedLog.open(directory / "p", config, clock)
    try:
        value = os.urandom(VALUE)
        written, n = 0, 0
        while written < megabytes * MB:
            data = bytearray(encode_batch([
                RecordInput(f"key-{(n + i) * 7919 % KEYS}".encode(), value,
                            timestamp=clock.now_ms()) for i in range(100)]))
            n += 100
            written += len(data)
            engine.append(data, [parse_header(data)])
        engine.flush()
        started = time.monotonic()
        result = clean_now(engine, now_ms=clock.now_ms())
        elapsed = time.monotonic() - started
        assert result is not None
        return elapsed, result.bytes_before, result.bytes_after, \
            result.bytes_before / MB / elapsed
    finally:
        engine.close()
        shutil.rmtree(directory, ignore_errors=True)


def produce_throughput(megabytes: int, cleaner: bool) -> tuple[float, float, int]:
    """(MB/s, broker CPU seconds per MB, passes the cleaner logged) producing ``megabytes``
    into a compacted topic."""
    from confluent_kafka import Producer as ConfluentProducer
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.admin import NewTopic as ConfluentNewTopic

    data_dir = Path(tempfile.mkdtemp(prefix="bench-produce-")) / "data"
    broker = BrokerProcess(data_dir, log_level="INFO", configs={
        "log.cleaner.enable": cleaner, "log.cleaner.backoff.ms": 200,
    })
    broker.start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.create_topics([ConfluentNewTopic("bench-compacted", 1, 1, config={
            "cleanup.policy": "compact", "segment.bytes": str(MB),
            "min.cleanable.dirty.ratio": "0.01"})])["bench-compacted"].result(30)
        producer = ConfluentProducer({"bootstrap.servers": broker.bootstrap, "acks": 1,
                                      "linger.ms": 5, "batch.size": 256 * 1024})
        value = os.urandom(VALUE)
        count = megabytes * MB // VALUE
        cpu_before = cpu_seconds(broker.pid) or 0.0
        started = time.monotonic()
        for i in range(count):
            while True:
                try:
                    producer.produce("bench-compacted", key=f"key-{i % KEYS}".encode(),
                                     value=value)
                    break
                except BufferError:
                    producer.poll(0.05)
            producer.poll(0)
        assert producer.flush(120) == 0
        elapsed = time.monotonic() - started
        cpu = (cpu_seconds(broker.pid) or 0.0) - cpu_before
        passes = broker.log_text().count("bench-compacted-0: cleaned [")
        return megabytes / elapsed, cpu / megabytes, passes
    finally:
        broker.stop()
        shutil.rmtree(data_dir.parent, ignore_errors=True)


def load() -> str:
    return "load " + " / ".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--commits", type=int, nargs="+", default=[10000])
    parser.add_argument("--settle-s", type=float, default=5.0)
    parser.add_argument("--clean-mb", type=int, default=0)
    parser.add_argument("--produce-mb", type=int, default=0)
    args = parser.parse_args()
    commits = [c for c in args.commits if c > 0]
    if commits:
        print("| commits | cleaner | internal topics on disk | restart to ready | commits/s "
              "| machine |")
        print("|---:|---|---:|---:|---:|---|")
    for n in commits:
        for cleaner in (False, True):
            _elapsed, size, restart, rate = run(n, cleaner, args.settle_s)
            print(f"| {n} | {'on' if cleaner else 'off'} | {size / 1024:.0f} KiB "
                  f"| {restart:.2f} s | {rate:.0f} | {load()} |", flush=True)
    if args.clean_mb:
        elapsed, before, after, rate = clean_throughput(args.clean_mb)
        print(f"clean_now over {before / MB:.0f} MB -> {after / MB:.1f} MB in {elapsed:.1f} s: "
              f"{rate:.1f} MB/s ({load()})", flush=True)
    if args.produce_mb:
        print("| cleaner | produce MB/s | broker CPU s per MB | cleaner passes | machine |")
        print("|---|---:|---:|---:|---|")
        for cleaner in (False, True):
            rate, cpu_per_mb, passes = produce_throughput(args.produce_mb, cleaner)
            print(f"| {'busy' if cleaner else 'disabled'} | {rate:.1f} | {cpu_per_mb:.3f} "
                  f"| {passes} | {load()} |", flush=True)


if __name__ == "__main__":
    main()
