"""A fault run on a 3-broker cluster (not in CI): an idempotent acks=all confluent-kafka
producer writes a numbered stream to a replication-factor-3 topic (min.insync.replicas=2)
while, in turn, the leader is kill -9'd (then restarted) or paused with SIGSTOP past the
session timeout (then resumed). At the end every record is read from the leaders and
counted: acknowledged, lost (acknowledged, not in the log), duplicated (in the log twice).

    PYTHONPATH=. python bench/cluster_faults.py --minutes 3
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.support.cluster import ClusterProcess, MetadataView  # noqa: E402
from tests.support.replicated import (  # noqa: E402
    PAUSE_TOLERANT_PRODUCER,
    REPLICATION_CONFIGS,
    NumberedStream,
    create_topic,
    leader_of,
    read_all,
)

PARTITIONS = 3


def _without(node_id: int, view: MetadataView) -> bool:
    return node_id not in view.brokers


def run(minutes: float, base: Path) -> dict[str, object]:
    faults = {"leader_kills": 0, "leader_pauses": 0}
    with ClusterProcess(base, brokers=3, configs=REPLICATION_CONFIGS) as cluster:
        topic = create_topic(cluster, PARTITIONS)
        stream = NumberedStream(cluster.bootstrap, topic, PAUSE_TOLERANT_PRODUCER)
        deadline = time.monotonic() + minutes * 60
        index = 0
        while time.monotonic() < deadline:
            stream.wait_acked(len(stream.acked) + 2000, timeout=120)
            victim = leader_of(cluster, topic, index % PARTITIONS)
            if index % 2 == 0:
                cluster.kill(victim)
                faults["leader_kills"] += 1
            else:
                cluster.pause(victim)
                faults["leader_pauses"] += 1
            cluster.wait_until(functools.partial(_without, victim),
                               f"broker {victim} gone", timeout=60,
                               node_id=next(n for n in cluster.running if n != victim))
            stream.wait_acked(len(stream.acked) + 2000, timeout=120)
            if index % 2 == 0:
                cluster.restart(victim)
            else:
                cluster.resume(victim)
            cluster.wait_until(lambda m: all(len(p.isr) == 3 for p in m.topics[topic].values()),
                               "every replica back in the ISR", timeout=120)
            index += 1
        stream.stop()
        values = read_all(cluster.bootstrap, topic, PARTITIONS)
    acked = set(stream.acked)
    logged = set(values)
    return {
        "minutes": minutes, **faults, "sent": stream.sent, "acknowledged": len(stream.acked),
        "delivery_errors": len(stream.failed), "in_log": len(values),
        "lost": len(acked - logged), "duplicated": len(values) - len(logged),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--minutes", type=float, default=3.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="oncelog-faults-") as tmp:
        print(json.dumps(run(args.minutes, Path(tmp)), indent=2))


if __name__ == "__main__":
    main()
