"""Idempotent producers of confluent-kafka, kafka-python and aiokafka keep writing while the
broker is killed (SIGKILL) and restarted twice under them: no duplicates, no acknowledged
record lost, no reordering within a partition, and duplicate detection still works after
each restart, from producer state rebuilt out of snapshots and the log tail.

How a crash is made to test duplicate detection. Just before each kill the proxy starts
swallowing every Produce response, and the kill waits until it has swallowed some: those
batches are in the log but their producer never heard so. After the restart the producer
sends them again, and the restarted broker must recognise them (the broker logs each
duplicate it answers; the test counts them per start) rather than append them twice (the
log must hold each record once, at the offset its acknowledgement named).
"""

from __future__ import annotations

import time

import pytest
from idem_clients import (
    CLIENT_NAMES,
    ProducerRun,
    check_exactly_once,
    count_lines,
    describe_producers,
    last_batches,
    log_by_start,
    make_records,
    read_log,
    summary,
)

from oncelog.client import Admin
from tests.support.fault_proxy import ApiKey, FaultRules
from tests.support.names import unique_topic

pytestmark = pytest.mark.integration

PARTITIONS = 4
RECORDS = 4000
# Small segments: they roll every hundred records or so, and each roll writes a producer
# state snapshot, so a restart loads a snapshot and replays only the log tail.
SEGMENT_BYTES = 16 * 1024
KILL_AT = (0.25, 0.6)  # shares of the records acknowledged when the broker is killed
OUTAGE = 0.3  # seconds between the kill and the restart


def create_topic(bootstrap: str) -> str:
    topic = unique_topic("idem-crash")
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topic(topic, PARTITIONS, config={"segment.bytes": str(SEGMENT_BYTES)})
    return topic


@pytest.mark.parametrize("client", CLIENT_NAMES)
def test_kill_and_restart_mid_stream_keep_each_record_once(
    proxied_broker: object, client: str
) -> None:
    broker = proxied_broker.broker  # type: ignore[attr-defined]
    proxy = proxied_broker.proxy  # type: ignore[attr-defined]
    topic = create_topic(broker.bootstrap)
    records = make_records(RECORDS, partitions=PARTITIONS)
    lost_before_kill: list[int] = []  # Produce responses lost just before each kill
    with ProducerRun(client, proxy.bootstrap, topic, records, chunk=50, pause=0.08) as run:
        for share in KILL_AT:
            run.wait_acked(int(RECORDS * share), timeout=60)
            dropped = proxy.stats().responses_dropped[ApiKey.PRODUCE]
            proxy.set_rules(FaultRules(drop_rate={ApiKey.PRODUCE: 1.0}))
            proxy.wait_for(lambda s, d=dropped: s.responses_dropped[ApiKey.PRODUCE] >= d + 2, 30)
            broker.kill()
            lost_before_kill.append(proxy.stats().responses_dropped[ApiKey.PRODUCE] - dropped)
            assert run.sent() < RECORDS, "the producer had sent everything before the kill"
            time.sleep(OUTAGE)
            proxy.set_rules(None)
            broker.start()

        outcome = run.join(90)
    assert not outcome.errors, summary(outcome.errors)
    assert len(outcome.acked) == RECORDS
    assert all(n >= 2 for n in lost_before_kill), lost_before_kill
    assert proxy.stats().upstream_failures + proxy.stats().connections_cut > 0

    log = read_log(broker.bootstrap, topic, PARTITIONS)
    report = check_exactly_once(records, outcome, log)
    assert not report.problems(), {k: summary(v) for k, v in report.problems().items()}
    assert sum(len(v) for v in log.values()) == RECORDS

    # Each restart rebuilt the producer state from a snapshot plus the log tail, and then
    # answered retries of batches written before the kill as duplicates.
    starts = log_by_start(broker.log_text())
    assert len(starts) == 1 + len(KILL_AT)
    for number, text in enumerate(starts[1:], start=2):
        assert count_lines(text, f"loaded producer snapshot partition={topic}-") >= 1, (
            f"start #{number} loaded no producer snapshot of {topic}"
        )
        assert count_lines(text, f"duplicate batch partition={topic}-") >= 1, (
            f"start #{number} answered no retried batch as a duplicate"
        )

    described = describe_producers(broker.bootstrap, topic, PARTITIONS)
    for p, last in last_batches(log).items():
        assert last, f"partition {p} has no idempotent batches"
        views = {v.producer_id: v for v in described[p]}
        for producer_id, record in last.items():
            assert producer_id in views, (p, producer_id, described[p])
            assert views[producer_id].producer_epoch == record.producer_epoch
            assert views[producer_id].last_sequence == record.sequence
