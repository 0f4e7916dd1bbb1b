"""A fault run on a 3-broker cluster (not in CI).

``--mode idempotent`` (the default): an idempotent acks=all confluent-kafka producer writes a
numbered stream to a replication-factor-3 topic (min.insync.replicas=2) while, in turn, the
leader is kill -9'd (then restarted) or paused with SIGSTOP past the session timeout (then
resumed). At the end every record is read from the leaders and counted: acknowledged, lost
(acknowledged, not in the log), duplicated (in the log twice).

``--mode transactions``: three transactional producers (tests/support/txn_workload.py) write
transactions over 2-3 partitions of such a topic, committing most and aborting some, while a
seeded schedule kills or pauses a partition leader or kills the transaction coordinator of
one of the transactional ids (the leader of its ``__transaction_state`` partition). At the
end read_committed and read_uncommitted consumers read everything and the checker counts
committed / aborted / unknown transactions and anomalies (duplicates, lost writes, aborted
reads, torn transactions).

    PYTHONPATH=. python bench/cluster_faults.py --minutes 3
    PYTHONPATH=. python bench/cluster_faults.py --mode transactions --minutes 10 --seed 1
"""

from __future__ import annotations

import argparse
import functools
import json
import random
import re
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from oncelog.coordinator.transaction import transaction_log_partition  # noqa: E402
from oncelog.harness.cluster import ClusterProcess, MetadataView  # noqa: E402
from oncelog.internal_topics import TRANSACTION_STATE_TOPIC  # noqa: E402
from tests.support.replicated import (  # noqa: E402
    PAUSE_TOLERANT_PRODUCER,
    REPLICATION_CONFIGS,
    NumberedStream,
    create_topic,
    leader_of,
    read_all,
)
from tests.support.txn_workload import (  # noqa: E402
    ANOMALIES,
    COMMITTED,
    TransactionalWorkload,
    check_transactions,
)

PARTITIONS = 3
TXN_PROGRESS = 20  # committed transactions under each fault and after it


def _without(node_id: int, view: MetadataView) -> bool:
    return node_id not in view.brokers


def _full_isr(topics: tuple[str, ...], view: MetadataView) -> bool:
    return all(len(p.isr) == 3 for t in topics for p in view.topics[t].values())


def inject(cluster: ClusterProcess, victim: int, pause: bool,
           progress: Callable[[], None], topics: tuple[str, ...]) -> None:
    """kill -9 (or SIGSTOP) ``victim``, wait until the others see it gone and for
    ``progress`` under the fault, restart (or resume) it, wait until ``topics`` have every
    replica back in their ISR."""
    if pause:
        cluster.pause(victim)
    else:
        cluster.kill(victim)
    cluster.wait_until(functools.partial(_without, victim),
                       f"broker {victim} gone", timeout=60,
                       node_id=next(n for n in cluster.running if n != victim))
    progress()
    if pause:
        cluster.resume(victim)
    else:
        cluster.restart(victim)
    cluster.wait_until(functools.partial(_full_isr, topics),
                       "every replica back in the ISR", timeout=120)


def run(minutes: float, base: Path) -> dict[str, object]:
    faults = {"leader_kills": 0, "leader_pauses": 0}
    with ClusterProcess(base, brokers=3, configs=REPLICATION_CONFIGS) as cluster:
        topic = create_topic(cluster, PARTITIONS)
        stream = NumberedStream(cluster.bootstrap, topic, PAUSE_TOLERANT_PRODUCER)

        def progress() -> None:
            stream.wait_acked(len(stream.acked) + 2000, timeout=120)

        deadline = time.monotonic() + minutes * 60
        index = 0
        while time.monotonic() < deadline:
            progress()
            victim = leader_of(cluster, topic, index % PARTITIONS)
            pause = index % 2 == 1
            faults["leader_pauses" if pause else "leader_kills"] += 1
            inject(cluster, victim, pause, progress, (topic,))
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


FAULT_KINDS = ("leader_kills", "leader_pauses", "coordinator_kills")
# A coordinator that loaded a transaction in PrepareCommit/PrepareAbort (its broker log):
# the previous coordinator died between the Prepare* record and the markers.
PREPARED_LOADED = re.compile(r"loaded '[^']*' in Prepare(?:Commit|Abort): resuming")


def run_transactions(minutes: float, base: Path, seed: int) -> dict[str, object]:
    """The transactional mode: each round of three faults is a seeded permutation of
    FAULT_KINDS, with seeded victims (a data partition's leader, a transactional id's
    coordinator)."""
    rng = random.Random(seed)
    faults = dict.fromkeys(FAULT_KINDS, 0)
    schedule: list[str] = []
    started = time.monotonic()
    with ClusterProcess(base, brokers=3, configs=REPLICATION_CONFIGS) as cluster:
        topic = create_topic(cluster, PARTITIONS)
        txn_partitions = len(cluster.metadata().topics[TRANSACTION_STATE_TOPIC])
        workload = TransactionalWorkload(cluster.bootstrap, topic, PARTITIONS, seed=seed,
                                         configs=PAUSE_TOLERANT_PRODUCER)

        def progress() -> None:
            workload.wait_committed(workload.count(COMMITTED) + TXN_PROGRESS)

        deadline = started + minutes * 60
        kinds: list[str] = []
        while time.monotonic() < deadline:
            progress()
            if not kinds:
                kinds = rng.sample(FAULT_KINDS, len(FAULT_KINDS))
            kind = kinds.pop()
            if kind == "coordinator_kills":
                txn_id = rng.choice(workload.transactional_ids)
                index = transaction_log_partition(txn_id, txn_partitions)
                victim = cluster.metadata().topics[TRANSACTION_STATE_TOPIC][index].leader
            else:
                victim = leader_of(cluster, topic, rng.randrange(PARTITIONS))
            faults[kind] += 1
            schedule.append(f"{kind[:-1]}:{victim}")
            print(f"{time.monotonic() - started:7.1f}s {kind[:-1]} broker {victim}; "
                  f"{workload.count(COMMITTED)} committed", file=sys.stderr, flush=True)
            inject(cluster, victim, kind == "leader_pauses", progress,
                   (topic, TRANSACTION_STATE_TOPIC))
        workload.stop()
        resumed = sum(len(PREPARED_LOADED.findall(b.log_path.read_text(errors="replace")))
                      for b in cluster.brokers.values())
        committed_read = read_all(cluster.bootstrap, topic, PARTITIONS, committed=True)
        uncommitted_read = read_all(cluster.bootstrap, topic, PARTITIONS)
    counts = check_transactions(workload.transactions, committed_read, uncommitted_read)
    return {
        "mode": "transactions", "minutes": minutes, "seed": seed,
        "elapsed_s": round(time.monotonic() - started), **faults,
        "prepared_completed_by_new_coordinator": resumed,
        "transactions": counts,
        "anomalies": sum(counts[a] for a in ANOMALIES),
        "producer_errors": dict(workload.errors), "producers_recreated": workload.recreated,
        "schedule": schedule,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--minutes", type=float, default=3.0)
    parser.add_argument("--mode", choices=("idempotent", "transactions"), default="idempotent")
    parser.add_argument("--seed", type=int, default=1,
                        help="transactions mode: the fault schedule and the workload")
    parser.add_argument("--keep", action="store_true",
                        help="keep the brokers' data directories and logs (path on stderr)")
    args = parser.parse_args()
    if args.keep:
        base = Path(tempfile.mkdtemp(prefix="oncelog-faults-"))
        print(f"data and logs under {base}", file=sys.stderr)
        print(json.dumps(_run_mode(args, base), indent=2))
        return
    with tempfile.TemporaryDirectory(prefix="oncelog-faults-") as tmp:
        print(json.dumps(_run_mode(args, Path(tmp)), indent=2))


def _run_mode(args: argparse.Namespace, base: Path) -> dict[str, object]:
    return (run(args.minutes, base) if args.mode == "idempotent"
            else run_transactions(args.minutes, base, args.seed))


if __name__ == "__main__":
    main()
