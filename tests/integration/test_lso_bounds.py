"""The LSO a reader is told against a real ``oncelog serve``: never below the log start
(retention removed the start of an open transaction), and ListOffsets by timestamp under
read_committed never answers an offset at or above it (Kafka answers -1)."""

from __future__ import annotations

import datetime
import json
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v11.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.list_offsets.v5.request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from kio.static.primitive import i8, i32, i32Timedelta, i64
from rawkafka import request_once

pytestmark = pytest.mark.integration

READ_UNCOMMITTED = 0
READ_COMMITTED = 1
LATEST = -1
EARLIEST = -2


def create_topic(bootstrap: str, name: str, config: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 1, 1, config=config)])[name].result(10)


def list_offset(bootstrap: str, topic: str, timestamp: int, isolation: int) -> tuple[Any, ...]:
    resp = request_once(
        bootstrap,
        ListOffsetsRequest(
            replica_id=i32(-1),  # type: ignore[arg-type]
            isolation_level=i8(isolation),
            topics=(
                ListOffsetsTopic(
                    name=topic,  # type: ignore[arg-type]
                    partitions=(
                        ListOffsetsPartition(partition_index=i32(0), timestamp=i64(timestamp)),
                    ),
                ),
            ),
        ),
    )
    part = resp.topics[0].partitions[0]
    return part.error_code, int(part.offset)


def fetch_committed(bootstrap: str, topic: str, offset: int) -> Any:
    resp = request_once(
        bootstrap,
        FetchRequest(
            max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=0)),
            min_bytes=i32(0),
            isolation_level=i8(READ_COMMITTED),
            forgotten_topics_data=(),
            rack_id="",
            topics=(
                FetchTopic(
                    topic=topic,  # type: ignore[arg-type]
                    partitions=(
                        FetchPartition(
                            partition=i32(0),
                            fetch_offset=i64(offset),
                            partition_max_bytes=i32(1 << 20),
                        ),
                    ),
                ),
            ),
        ),
    )
    return resp.responses[0].partitions[0]


def wait_for(what: str, check: Any, seconds: float = 30.0) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)  # polling a condition, not synchronising on time
    raise AssertionError(f"timed out waiting for {what}")


def open_transaction(bootstrap: str, topic: str, timestamp: int | None = None) -> Producer:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"lso-{uuid.uuid4().hex[:8]}"}
    )
    producer.init_transactions(10)
    producer.begin_transaction()
    if timestamp is None:
        producer.produce(topic, b"in-txn")
    else:
        producer.produce(topic, b"in-txn", timestamp=timestamp)
    assert producer.flush(10) == 0
    return producer


def test_lso_is_not_below_log_start_after_retention(broker_factory: Any) -> None:
    broker = broker_factory(configs={"log.retention.check.interval.ms": 100})
    bootstrap = broker.bootstrap
    topic = f"lso-retention-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, {"segment.bytes": "1024", "retention.bytes": "2048"})
    txn = open_transaction(bootstrap, topic)  # offset 0, left open
    plain = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(40):
        plain.produce(topic, b"plain-%03d" % i + b"x" * 100)
        plain.flush(10)  # one batch each, so segments roll
    log_start = wait_for(
        "retention to delete the transaction's first segment",
        lambda: (lambda e: e[1] if e[0] == ErrorCode.none and e[1] > 0 else 0)(
            list_offset(bootstrap, topic, EARLIEST, READ_COMMITTED)
        ),
    )
    error, latest = list_offset(bootstrap, topic, LATEST, READ_COMMITTED)
    assert error == ErrorCode.none
    assert latest >= log_start
    part = fetch_committed(bootstrap, topic, latest)
    assert part.error_code == ErrorCode.none
    assert part.last_stable_offset >= part.log_start_offset >= log_start

    stats: list[dict[str, Any]] = []

    def on_stats(text: str) -> None:
        part = json.loads(text).get("topics", {}).get(topic, {}).get("partitions", {}).get("0")
        if part is not None:
            stats.append(part)

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "auto.offset.reset": "latest",
            "enable.auto.commit": False,
            "statistics.interval.ms": 100,
            "stats_cb": on_stats,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0)])

        def fetching() -> dict[str, Any] | None:
            consumer.poll(0.1)
            # Positioned at the LSO the broker reported in the same fetch (retention may
            # still be moving the log start, and the LSO with it, while this runs).
            active = [
                p
                for p in stats
                if p["fetch_state"] == "active" and p["ls_offset"] >= 0
                and p["next_offset"] == p["ls_offset"]
            ]
            return active[-1] if active else None

        # librdkafka reset to the LSO, which is the log start, and fetches from there
        # (below the log start it got OFFSET_OUT_OF_RANGE and reset again, forever).
        part_stats = wait_for("the consumer to fetch at the LSO", fetching)
        assert part_stats["ls_offset"] >= latest >= log_start
        txn.commit_transaction(10)
        received: list[bytes] = []

        def got_all() -> bool:
            msg = consumer.poll(0.2)
            if msg is not None:
                assert msg.error() is None, msg.error()
                value = msg.value()
                assert value is not None
                received.append(value)
            return len(received) >= 3

        wait_for("records from the log start after the commit", got_all)
        assert all(v.startswith(b"plain-") for v in received)
    finally:
        consumer.close()


def test_offsets_by_timestamp_under_read_committed_stop_at_the_lso(broker: Any) -> None:
    bootstrap = broker.bootstrap
    topic = f"lso-ts-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, {})
    t0 = int(time.time() * 1000) - 60_000
    plain = Producer({"bootstrap.servers": bootstrap})
    plain.produce(topic, b"before", timestamp=t0)  # offset 0
    assert plain.flush(10) == 0
    txn = open_transaction(bootstrap, topic, timestamp=t0 + 10)  # offset 1, open
    assert list_offset(bootstrap, topic, t0 + 5, READ_UNCOMMITTED) == (ErrorCode.none, 1)
    assert list_offset(bootstrap, topic, t0 + 5, READ_COMMITTED) == (ErrorCode.none, -1)
    assert list_offset(bootstrap, topic, t0, READ_COMMITTED) == (ErrorCode.none, 0)
    txn.commit_transaction(10)
    assert list_offset(bootstrap, topic, t0 + 5, READ_COMMITTED) == (ErrorCode.none, 1)
