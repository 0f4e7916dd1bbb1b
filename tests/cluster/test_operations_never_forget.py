"""The "never forget" property through the routine operations of issue 25, on 3 brokers and
etcd with confluent-kafka clients: a broker restarted on an empty data directory (a
replaced disk) and stalled while it catches up, a rolling restart of every broker, a
preferred election right after a restart, and etcd paused past the brokers' sessions —
each once, in that order (tests/support/fault_kinds.py), while

- an idempotent acks=all producer writes a numbered stream (tests/support/replicated.py),
- two transactional producers commit and abort transactions over 3 partitions
  (tests/support/txn_workload.py),
- a third topic, filled with 4 MB before the faults, stays idle (as most topics of a
  cluster do: a follower's last known log end there is still the high watermark),
- a read_committed and a read_uncommitted consumer read the three topics from the leaders
  for the whole run (tests/support/consumed_observer.py), again from offset 0 after each
  fault.

Checked: no record a consumer has read is later another record, or missing, at its offset
(consumed-then-changed, tests/support/never_forget.py); no acknowledged write lost or
duplicated; no transactional anomaly; no unclean exit after SIGTERM; after each fault
heals, every partition (``__consumer_offsets`` and ``__transaction_state`` included) has
its full ISR within ``ISR_BOUND_S`` and keeps it past ``replica.lag.time.max.ms``; and no
replica is counted in an ISR while its log ends below the high watermark. Everything found
is reported together.

The session and lag timeouts are the cluster tests' short ones (2 s), so that a run takes
under a minute when nothing is wrong; bench/cluster_faults.py runs the same faults, and
the older ones, for as long as asked. The etcd pause stops the module's etcd, which is why
this module holds this one test.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

import pytest

from oncelog.harness.cluster import ClusterProcess
from tests.support.consumed_observer import ConsumedObserver
from tests.support.fault_kinds import OPERATIONS, FaultInjector, wait_full_isr
from tests.support.replicated import (
    PAUSE_TOLERANT_PRODUCER,
    REPLICATION_CONFIGS,
    NumberedStream,
    create_topic,
    fill,
    read_all,
)
from tests.support.txn_workload import (
    ANOMALIES,
    COMMITTED,
    TransactionalWorkload,
    check_transactions,
)

pytestmark = pytest.mark.integration

ClusterFactory = Callable[..., ClusterProcess]
ISR_BOUND_S = 30.0
STREAM_PARTITIONS, TXN_PARTITIONS = 2, 3
STREAM_RATE = 100  # records per second
PROGRESS_RECORDS, PROGRESS_TXNS = 50, 3
COLD_PARTITIONS = 3
FILL_RECORDS, FILL_BYTES = 512, 8192  # 4 MB a broker on an empty disk must fetch again
TXN_PAUSE_S = 0.05


def test_never_forget_through_operations(
    cluster_factory: ClusterFactory, streams: list[NumberedStream]
) -> None:
    started = time.monotonic()
    cluster = cluster_factory(3, REPLICATION_CONFIGS)
    stream_topic = create_topic(cluster, STREAM_PARTITIONS)
    txn_topic = create_topic(cluster, TXN_PARTITIONS)
    cold_topic = create_topic(cluster, COLD_PARTITIONS)
    filled = fill(cluster.bootstrap, cold_topic, FILL_RECORDS, FILL_BYTES)
    observer = ConsumedObserver(cluster.bootstrap, {
        stream_topic: STREAM_PARTITIONS, txn_topic: TXN_PARTITIONS,
        cold_topic: COLD_PARTITIONS})
    stream = NumberedStream(cluster.bootstrap, stream_topic, PAUSE_TOLERANT_PRODUCER,
                            rate=STREAM_RATE)
    streams.append(stream)
    workload = TransactionalWorkload(cluster.bootstrap, txn_topic, TXN_PARTITIONS,
                                     producers=2, seed=25, configs=PAUSE_TOLERANT_PRODUCER,
                                     pause=TXN_PAUSE_S)

    def progress() -> None:
        stream.wait_acked(len(stream.acked) + PROGRESS_RECORDS, timeout=30)
        workload.wait_committed(workload.count(COMMITTED) + PROGRESS_TXNS, timeout=30)

    injector = FaultInjector(cluster, topics=[stream_topic, txn_topic, cold_topic],
                             rng=random.Random(25),
                             progress=progress, isr_bound=ISR_BOUND_S,
                             transactional_ids=workload.transactional_ids, wipe_scope="disk",
                             say=print)
    problems: list[str] = []
    try:
        progress()
        for kind in OPERATIONS:
            record = injector.inject(kind)
            problems += [f"{kind}: {p}" for p in record.problems]
            observer.request_pass()
        try:
            progress()
        except AssertionError as exc:
            problems.append(f"no progress after the last fault: {exc}")
        for step, stop in (("the stream's end", stream.stop),
                           ("the transactions' end", workload.stop)):
            try:
                stop()
            except AssertionError as exc:
                problems.append(f"{step}: {exc}")
        took, shortfall = wait_full_isr(cluster, ISR_BOUND_S)
        if took is None:
            problems.append(f"no full ISR at the end: {shortfall}")
        forgotten = observer.finish()
    finally:
        observer.stop()
        workload._stop.set()
    values = read_all(cluster.bootstrap, stream_topic, STREAM_PARTITIONS)
    cold = read_all(cluster.bootstrap, cold_topic, COLD_PARTITIONS)
    committed = read_all(cluster.bootstrap, txn_topic, TXN_PARTITIONS, committed=True)
    uncommitted = read_all(cluster.bootstrap, txn_topic, TXN_PARTITIONS)
    counts = check_transactions(workload.transactions, committed, uncommitted)

    lost = sorted(set(stream.acked) - set(values), key=int) + sorted(
        v[:v.index(b"-", 5)] for v in set(filled) - set(cold))
    duplicated = len(values) - len(set(values)) + len(cold) - len(set(cold))
    if forgotten:
        problems.append(f"{observer.rule.forgotten_offsets()} records consumed then changed:\n  "
                        + "\n  ".join(str(f) for f in forgotten[:20]))
    if lost:
        problems.append(f"{len(lost)} acknowledged acks=all writes lost: "
                        f"{b', '.join(lost[:20]).decode()}")
    if duplicated:
        problems.append(f"{duplicated} records in the log twice")
    problems += [f"transactions: {counts[a]} {a}" for a in ANOMALIES if counts[a]]
    print(f"{time.monotonic() - started:.0f}s: {len(stream.acked)} acknowledged writes, "
          f"{counts[COMMITTED]} committed transactions, {observer.statistics()}, "
          f"transactions {counts}")
    assert counts[COMMITTED] > 0 and stream.acked
    assert not problems, "\n".join(problems)
