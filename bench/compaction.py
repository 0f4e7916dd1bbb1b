"""Issue 16's figures: size on disk of ``__transaction_state`` + ``__consumer_offsets`` and the
broker's restart-to-ready time after N consume-transform-produce transactional commits
(oncelog.client, 4 transactional ids, ``send_offsets_to_transaction`` each commit), with the
log cleaner on and off (``log.cleaner.enable=false`` stands in for "before issue 16").

    PYTHONPATH=. .venv/bin/python bench/compaction.py --commits 10000

Internal topics use 1 partition each and 1 MiB segments so that they roll (the default
100 MiB segments would hold 10k commits in the active segment, never cleaned). Not asserted:
printed as a Markdown table for bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import threading
import time
from pathlib import Path

from oncelog.client import Admin, NewTopic, OffsetAndMetadata, Producer, TopicPartition
from tests.support.broker import BrokerProcess

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--commits", type=int, nargs="+", default=[10000])
    parser.add_argument("--settle-s", type=float, default=5.0)
    args = parser.parse_args()
    print("| commits | cleaner | internal topics on disk | restart to ready | commits/s |")
    print("|---:|---|---:|---:|---:|")
    for commits in args.commits:
        for cleaner in (False, True):
            _elapsed, size, restart, rate = run(commits, cleaner, args.settle_s)
            print(f"| {commits} | {'on' if cleaner else 'off'} | {size / 1024:.0f} KiB "
                  f"| {restart:.2f} s | {rate:.0f} |", flush=True)


if __name__ == "__main__":
    main()
