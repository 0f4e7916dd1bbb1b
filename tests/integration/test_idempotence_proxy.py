"""Idempotent producers of confluent-kafka, kafka-python and aiokafka write through the fault
proxy while it loses Produce responses (at random and in bursts) and cuts connections in the
middle of frames: every record must be in the log exactly once, per partition in send order,
at the offset its acknowledgement named, and DescribeProducers must show the producer with
the sequence of its last batch."""

from __future__ import annotations

import pytest
from idem_clients import (
    CLIENT_NAMES,
    ProducerRun,
    broker_starts,
    check_described,
    check_exactly_once,
    describe_producers,
    make_records,
    read_log,
    summary,
)

from oncelog.client import Admin
from oncelog.harness.fault_proxy import ApiKey, FaultRules
from tests.support.names import unique_topic

pytestmark = pytest.mark.integration

PARTITIONS = 4
RECORDS = 4000
SEGMENT_BYTES = 64 * 1024  # several segment rolls, so producer snapshots are written too
# Larger than any Produce request (idem_clients.BATCH_BYTES per partition), so each request
# gets through on some connection, yet small enough to cut connections many times a run.
CUT_AFTER_BYTES = 40_000


def create_topic(bootstrap: str) -> str:
    topic = unique_topic("idem")
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topic(topic, PARTITIONS, config={"segment.bytes": str(SEGMENT_BYTES)})
    return topic


@pytest.mark.parametrize("client", CLIENT_NAMES)
def test_lost_acks_and_cut_connections_write_each_record_once(
    proxied_broker: object, client: str
) -> None:
    broker = proxied_broker.broker  # type: ignore[attr-defined]
    proxy = proxied_broker.proxy  # type: ignore[attr-defined]
    topic = create_topic(broker.bootstrap)
    records = make_records(RECORDS, topics=[topic], partitions=PARTITIONS)

    # Lose a share of Produce responses (the broker appended, the client never hears) and
    # cut every connection after CUT_AFTER_BYTES, wherever in a frame that falls.
    random_faults = FaultRules(
        drop_rate={ApiKey.PRODUCE: 0.15}, cut_after_bytes=CUT_AFTER_BYTES, seed=3
    )
    proxy.set_rules(random_faults)
    with ProducerRun(client, proxy.bootstrap, records, chunk=50, pause=0.02) as run:
        # Mid-stream: a burst of lost responses in a row, so retries of retries are lost too.
        run.wait_acked(RECORDS // 3)
        dropped_before = proxy.stats().responses_dropped[ApiKey.PRODUCE]
        proxy.set_rules(
            FaultRules(drop_next={ApiKey.PRODUCE: 4}, drop_rate={ApiKey.PRODUCE: 0.15},
                       cut_after_bytes=CUT_AFTER_BYTES, seed=4)
        )
        proxy.wait_for(lambda s: s.responses_dropped[ApiKey.PRODUCE] >= dropped_before + 4, 30)
        proxy.set_rules(random_faults)

        outcome = run.join(90)
    stats = proxy.stats()
    proxy.set_rules(None)

    assert not outcome.errors, summary(outcome.errors)
    assert len(outcome.acked) == RECORDS
    # The faults really happened: responses were lost and connections were cut mid-stream
    # beyond the cuts that come with each lost response.
    dropped = stats.responses_dropped[ApiKey.PRODUCE]
    assert dropped >= 4 + 2, stats  # the burst and some random ones
    assert stats.connections_cut > dropped, stats

    log = read_log(broker.bootstrap, [topic], PARTITIONS)
    report = check_exactly_once(records, outcome, log)
    assert not report.problems(), {k: summary(v) for k, v in report.problems().items()}
    assert sum(len(v) for v in log.values()) == RECORDS

    # Lost acks mean retries the broker recognised: each was answered, nothing appended.
    duplicates = [d for start in broker_starts(broker.log_text()) for d in start.duplicates]
    assert any(d.partition.startswith(topic) for d in duplicates)

    # DescribeProducers: every partition knows the producer and its last sequence.
    described = describe_producers(broker.bootstrap, log)
    problems = check_described(log, described)
    assert not problems, summary(problems)
