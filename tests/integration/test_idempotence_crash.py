"""Idempotent producers of confluent-kafka, kafka-python and aiokafka keep writing while the
broker is killed (SIGKILL) and restarted twice under them: no duplicates, no acknowledged
record lost, no reordering within a partition, and duplicate detection still works after
each restart, with producer state rebuilt from snapshots and the log tail.

How a crash is made to test duplicate detection. Just before each kill the proxy starts
holding back every Produce response, and the kill waits until every partition's log (read
from the broker directly) holds more records than the producer has seen acknowledged there;
the proxy then cuts the connections, so the held responses are lost: each partition holds
a batch whose producer never heard of it. (Holding rather than dropping keeps connections
open, so the producer goes on sending new batches to every partition; a dropped response
cuts the connection, and a producer that only retries batches already written makes no
partition grow.) After the restart the producer sends those batches again, and the
restarted broker must recognise them on every partition (it logs each duplicate it
answers, with the original offsets) instead of appending them twice (the log must hold
each record once, at the offset its acknowledgement named).

Two topics take the records, so both ways of rebuilding the state are exercised:
- ``tiny`` has 100-byte segments: every append rolls a segment and (after the append, from a
  worker thread) writes a snapshot at the log end that covers the batch just written -- unlike
  Kafka, whose roll snapshot is at the new segment's base, before the batch -- so after a
  kill (once that snapshot is on disk) the state comes from the snapshot alone and the
  retried batches are recognised from the batches the snapshot retained (up to 5);
- ``small`` has 32 KiB segments: the newest snapshot (if any yet) is some way back and the
  state of the last batches comes from replaying the log tail.

Two partitions per topic: librdkafka puts one partition in each Produce request and keeps at
most 5 requests in flight, so with responses held back only 5 partitions can grow.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from idem_clients import (
    CLIENT_NAMES,
    Duplicate,
    ProducerRun,
    broker_starts,
    check_described,
    check_exactly_once,
    describe_producers,
    end_offsets,
    make_records,
    read_log,
    summary,
)

from oncelog.client import Admin
from oncelog.harness.fault_proxy import ApiKey, FaultProxy, FaultRules
from tests.support.names import unique_topic

pytestmark = pytest.mark.integration

PARTITIONS = 2  # per topic
RECORDS = 4000
TINY_SEGMENT_BYTES = 100  # smaller than any batch: each append rolls (and snapshots)
SMALL_SEGMENT_BYTES = 32 * 1024
KILL_AT = (0.25, 0.6)  # shares of the records acknowledged when the broker is killed
HOLD = 60.0  # seconds the proxy holds Produce responses before a kill (they never arrive)
OUTAGE = 0.3  # seconds between the kill and the restart


def create_topics(bootstrap: str) -> tuple[str, str]:
    tiny, small = unique_topic("idem-tiny"), unique_topic("idem-small")
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topic(tiny, PARTITIONS, config={"segment.bytes": str(TINY_SEGMENT_BYTES)})
        admin.create_topic(
            small, PARTITIONS, config={"segment.bytes": str(SMALL_SEGMENT_BYTES)}
        )
    return tiny, small


def of(topic: str, partition: str) -> bool:
    """Whether a partition directory name (``<topic>-<index>``) belongs to ``topic``."""
    return partition.rpartition("-")[0] == topic


def wait_for_unacknowledged(
    bootstrap: str, run: ProducerRun, tps: list[tuple[str, int]], timeout: float
) -> None:
    """Until every partition's log holds records its producer has not seen acknowledged;
    AssertionError after ``timeout``. (Records go in order, so the first ``n`` offsets of a
    partition are its ``n`` acknowledged records.)"""
    deadline = time.monotonic() + timeout
    while True:
        acked = run.acked_by_partition()
        stored = end_offsets(bootstrap, tps)
        if all(stored[tp] > acked.get(tp, 0) for tp in tps):
            return
        if time.monotonic() >= deadline:
            raise AssertionError(f"no unacknowledged records on every partition: "
                                 f"stored {stored}, acknowledged {acked}")
        time.sleep(0.02)


def wait_for_answered(proxy: FaultProxy, timeout: float) -> None:
    """Until the broker has answered every Produce request the proxy forwarded to it."""
    deadline = time.monotonic() + timeout
    while True:
        waiting = proxy.stats().in_flight.get(ApiKey.PRODUCE, 0)
        if waiting == 0:
            return
        if time.monotonic() >= deadline:
            raise AssertionError(f"{waiting} Produce requests unanswered")
        time.sleep(0.02)


def wait_for_roll_snapshots(
    data_dir: Path, topic: str, log_ends: dict[tuple[str, int], int], timeout: float
) -> None:
    """Until every partition of ``topic`` has a producer snapshot at its log end (the broker
    writes the snapshot of a rolling append, named by the log end after that append, from a
    worker thread, so the file can trail the append); AssertionError after ``timeout``.

    The log end, not the newest segment's base: the append that rolls writes its batch into
    the new segment, so a snapshot at that base (left by the previous append) does not
    cover it -- waiting for the base let a kill find the batch covered by no snapshot."""
    deadline = time.monotonic() + timeout
    while True:
        behind = {}
        for p in range(PARTITIONS):
            files = (data_dir / f"{topic}-{p}").iterdir()
            snapshots = [int(f.name[:20]) for f in files if f.name.endswith(".snapshot")]
            if max(snapshots, default=-1) < log_ends[(topic, p)]:
                behind[p] = (log_ends[(topic, p)], max(snapshots, default=-1))
        if not behind:
            return
        if time.monotonic() >= deadline:
            raise AssertionError(f"roll snapshots not written (log end, newest): {behind}")
        time.sleep(0.02)


@pytest.mark.parametrize("client", CLIENT_NAMES)
def test_kill_and_restart_mid_stream_keep_each_record_once(
    proxied_broker: object, client: str
) -> None:
    broker = proxied_broker.broker  # type: ignore[attr-defined]
    proxy = proxied_broker.proxy  # type: ignore[attr-defined]
    tiny, small = create_topics(broker.bootstrap)
    records = make_records(RECORDS, topics=[tiny, small], partitions=PARTITIONS)

    tps = [(t, p) for t in (tiny, small) for p in range(PARTITIONS)]
    held_before_kill: list[int] = []  # Produce responses held (then lost) at each kill
    with ProducerRun(client, proxy.bootstrap, records, chunk=50, pause=0.08) as run:
        for share in KILL_AT:
            run.wait_acked(int(RECORDS * share), timeout=60)
            held = proxy.stats().responses_delayed[ApiKey.PRODUCE]
            proxy.set_rules(FaultRules(delay={ApiKey.PRODUCE: HOLD}))
            time.sleep(0.1)  # acknowledgements already on their way arrive
            wait_for_unacknowledged(broker.bootstrap, run, tps, 30)
            run.hold()  # the rest of this round cannot let the producer finish its records
            # Quiesce before the kill: no new Produce reaches the broker, every one it got is
            # answered (into the proxy's hold), and the roll snapshots those appends handed to
            # the writer thread are on disk -- the state a kill then finds is deterministic.
            proxy.set_rules(
                FaultRules(delay={ApiKey.PRODUCE: HOLD}, hold_requests=frozenset({ApiKey.PRODUCE}))
            )
            wait_for_answered(proxy, 30)
            # Quiesced, so the log ends are final (each append to `tiny` rolled).
            log_ends = end_offsets(broker.bootstrap, [(tiny, p) for p in range(PARTITIONS)])
            wait_for_roll_snapshots(broker.data_dir, tiny, log_ends, 30)
            broker.kill()
            proxy.cut_all()  # the held responses die with the connections
            held_before_kill.append(proxy.stats().responses_delayed[ApiKey.PRODUCE] - held)
            assert run.sent() < RECORDS, "the producer had sent everything before the kill"
            time.sleep(OUTAGE)
            proxy.set_rules(None)
            broker.start()
            run.release()
        outcome = run.join(90)

    assert not outcome.errors, summary(outcome.errors)
    assert len(outcome.acked) == RECORDS
    assert all(n >= 1 for n in held_before_kill), held_before_kill

    log = read_log(broker.bootstrap, [tiny, small], PARTITIONS)
    report = check_exactly_once(records, outcome, log)
    assert not report.problems(), {k: summary(v) for k, v in report.problems().items()}
    assert sum(len(v) for v in log.values()) == RECORDS

    # After each restart the broker answered, on every partition, a retry of a batch written
    # before the kill as a duplicate: on `tiny` from the batches the snapshot retained (the
    # original lies below the snapshot's offset), on `small` (at least once in the run) from
    # the replayed log tail.
    starts = broker_starts(broker.log_text())
    assert len(starts) == 1 + len(KILL_AT)
    names = {f"{t}-{p}" for t, p in tps}
    from_tail = 0
    for number, start in enumerate(starts[1:], start=2):
        loaded = {p: o for p, o in start.snapshots.items() if p in names}
        assert all(f"{tiny}-{p}" in loaded for p in range(PARTITIONS)), (number, loaded)
        first_dup: dict[str, Duplicate] = {}
        for d in start.duplicates:
            first_dup.setdefault(d.partition, d)
        missing = sorted(names - set(first_dup))
        assert not missing, f"start #{number}: no retry answered as a duplicate on {missing}"
        for partition, d in first_dup.items():
            if of(tiny, partition):
                assert d.last_offset < loaded[partition], (number, d, loaded[partition])
            elif of(small, partition) and d.first_offset >= loaded.get(partition, 0):
                from_tail += 1
    assert from_tail > 0, "no duplicate was recognised from a replayed log tail"
    # By the last restart `small` had rolled segments too: snapshot + tail on every partition.
    assert set(starts[-1].snapshots) >= names, starts[-1].snapshots

    described = describe_producers(broker.bootstrap, log)
    problems = check_described(log, described)
    assert not problems, summary(problems)
