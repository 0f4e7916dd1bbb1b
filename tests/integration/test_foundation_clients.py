"""Issue 2 end to end: each real client against a real ``oncelog serve`` process.

For each of confluent-kafka, kafka-python and aiokafka: create a 3-partition topic, produce
10k keyed records with headers under every codec, consume them through a consumer group and
check every key, value and header and the per-partition order, commit, restart the broker
with SIGTERM and check records and committed offsets survived; then ``kill -9`` the broker
while producing with acks=all and check every acknowledged record is there after restart.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict

import pytest
from clients import CLIENTS, CODECS, Acked, Got, StopFlag, end_offsets, make_records

from oncelog.harness.broker import BrokerProcess

pytestmark = pytest.mark.integration

RECORDS_PER_CODEC = 10_000
PARTITIONS = 3


def check_exact(acked: list[Acked], got: list[Got]) -> None:
    """Every acknowledged record read back exactly once, at its offset, in order."""
    by_position = {(g.partition, g.offset): g for g in got}
    assert len(by_position) == len(got), "a record was delivered twice"
    for ack in acked:
        g = by_position.get((ack.partition, ack.offset))
        assert g is not None, f"acknowledged record missing at {ack.partition}/{ack.offset}"
        assert g.key == ack.sent.key
        assert g.value == ack.sent.value
        assert g.headers == ack.sent.headers
    # Per partition, offsets strictly increase in delivery order and each key's records
    # come in the order they were sent.
    last_offset: dict[int, int] = {}
    last_seq: dict[tuple[int, bytes | None], int] = {}
    for g in got:
        assert g.offset > last_offset.get(g.partition, -1)
        last_offset[g.partition] = g.offset
        seq = int(dict(g.headers)["seq"])
        key = (g.partition, g.key)
        assert seq > last_seq.get(key, -1), f"key {g.key!r} reordered in partition {g.partition}"
        last_seq[key] = seq


@pytest.mark.parametrize("client_name", list(CLIENTS))
def test_produce_consume_commit_restart(broker: BrokerProcess, client_name: str) -> None:
    client = CLIENTS[client_name](broker.bootstrap)
    topic = f"found-{client_name}"
    client.create_topic(topic, PARTITIONS)

    acked: list[Acked] = []
    for codec in CODECS:
        records = make_records(RECORDS_PER_CODEC, prefix=f"{codec}-")
        acked += client.produce(topic, records, compression=codec)
    assert len(acked) == RECORDS_PER_CODEC * len(CODECS)
    assert {a.partition for a in acked} == set(range(PARTITIONS))

    group = f"group-{client_name}"
    got = client.consume(topic, group, len(acked))
    assert len(got) == len(acked)
    check_exact(acked, got)

    ends: dict[int, int] = defaultdict(int)
    for a in acked:
        ends[a.partition] = max(ends[a.partition], a.offset + 1)
    assert client.committed(topic, group, PARTITIONS) == dict(ends)

    assert broker.stop() == 0
    broker.restart()

    again = client.consume(topic, f"{group}-after-restart", len(acked), commit=False)
    assert len(again) == len(acked)
    check_exact(acked, again)
    assert client.committed(topic, group, PARTITIONS) == dict(ends)


@pytest.mark.parametrize("client_name", list(CLIENTS))
def test_kill_9_while_producing_keeps_acknowledged(broker: BrokerProcess, client_name: str) -> None:
    client = CLIENTS[client_name](broker.bootstrap)
    topic = f"kill-{client_name}"
    client.create_topic(topic, PARTITIONS)
    records = make_records(200_000)
    stop = StopFlag()
    enough = threading.Event()
    count = [0]

    def on_ack(_: Acked) -> None:
        count[0] += 1
        if count[0] >= 3000:
            enough.set()

    result: list[list[Acked]] = []
    # After the kill the producer gives up on what it still holds once these run out (what
    # the test then waits for): they bound how long that takes, not what is checked. A
    # record that times out before the kill is unacknowledged, which the checks allow.
    extra = {
        "confluent": {"message.timeout.ms": 3000, "retries": 0},
        "kafka-python": {"retries": 0, "request_timeout_ms": 2000, "delivery_timeout_ms": 3000,
                         "max_block_ms": 3000},
        "aiokafka": {"request_timeout_ms": 2000},
    }[client_name]
    failures: list[BaseException] = []

    def run() -> None:
        try:
            result.append(client.produce(topic, records, extra=extra, stop=stop, on_ack=on_ack))
        except BaseException as exc:  # reported below with its traceback
            failures.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert enough.wait(120), "producer made no progress"
    broker.kill()
    time.sleep(0.2)
    stop.set()
    thread.join(90)
    assert not thread.is_alive()
    if failures:
        raise failures[0]
    acked = result[0]
    assert len(acked) >= 3000

    broker.restart()
    # Unacknowledged records may or may not be there; every acknowledged one must be.
    total = sum(end_offsets(broker.bootstrap, topic, PARTITIONS).values())
    assert total >= len(acked)
    got = client.consume(topic, f"verify-{client_name}", total, commit=False, timeout=90)
    assert len(got) == total
    check_exact(acked, got)
