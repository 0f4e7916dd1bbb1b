"""Issue 16: a compacted topic written transactionally with aborts, compacted by a real
``oncelog serve``'s log cleaner, then read from the beginning read_committed (confluent-kafka,
and the Java client): the latest committed value of every key and no aborted value; the
same after the broker is killed (``kill -9``, through a crash point of oncelog.faults) in the
middle of swapping cleaned segments in, and restarted.

The cleaner is waited for by polling its checkpoint file (``cleaner-offset.checkpoint`` in
the partition directory, written once a pass is swapped in) with a deadline.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pytest
from java_txn import line_with, need_reference, run_txn_client

from oncelog.harness.broker import REPO_ROOT, BrokerProcess
from tests.support.names import unique_topic

pytestmark = pytest.mark.integration

KEYS = 8
ROUNDS = 24
TOPIC_CONFIGS = {
    "cleanup.policy": "compact",
    "segment.bytes": "2048",
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": "100",
}
BROKER_CONFIGS = {
    "log.cleaner.backoff.ms": 100,
    "log.flush.interval.ms": 100,  # rolled segments are flushed (and so cleanable) soon
}


def create_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config=TOPIC_CONFIGS)])[topic].result(30)


def write_transactions(bootstrap: str, topic: str) -> tuple[dict[str, str], set[str], int]:
    """ROUNDS transactions over KEYS keys, every third aborted, each key rewritten several
    times; then plain filler records so that every transaction lies in rolled segments.
    Returns the latest committed value per key, every aborted value, and the end offset of
    the transactional part."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": str(uuid.uuid4()),
                         "linger.ms": 0})
    producer.init_transactions(30)
    latest: dict[str, str] = {}
    aborted: set[str] = set()
    for r in range(ROUNDS):
        producer.begin_transaction()
        written = {}
        for j in range(3):
            key = f"k{(r * 3 + j) % KEYS}"
            value = f"round{r}-{j}-" + "x" * 40
            producer.produce(topic, key=key, value=value)
            written[key] = value
        producer.flush(30)
        if r % 3 == 2:
            producer.abort_transaction(30)
            aborted.update(written.values())
        else:
            producer.commit_transaction(30)
            latest.update(written)
    end = _end_offset(bootstrap, topic)
    plain = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    for i in range(40):  # past segment.bytes: the transactions end up in rolled segments
        plain.produce(topic, key=f"filler{i % 4}", value="f" * 60)
        plain.flush(30)
    return latest, aborted, end


def _end_offset(bootstrap: str, topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "probe"})
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)[1])
    finally:
        consumer.close()


def read_all(bootstrap: str, topic: str) -> list[tuple[str, str | None]]:
    """Every record from the beginning, read_committed, in order."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": str(uuid.uuid4()),
        "isolation.level": "read_committed", "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    })
    end = int(consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)[1])
    consumer.assign([TopicPartition(topic, 0, 0)])
    out: list[tuple[str, str | None]] = []
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                key, value = msg.key(), msg.value()
                assert key is not None
                out.append((key.decode(), None if value is None else value.decode()))
            position = consumer.position([TopicPartition(topic, 0)])[0].offset
            if position >= end:
                return out
        raise AssertionError(f"read only up to {position} of {end}")
    finally:
        consumer.close()


def checkpoint(data_dir: Path, topic: str) -> int:
    try:
        return int((data_dir / f"{topic}-0" / "cleaner-offset.checkpoint").read_text())
    except (FileNotFoundError, ValueError):
        return -1


def wait_cleaned(broker: BrokerProcess, topic: str, end: int, timeout: float = 30) -> None:
    """Until a pass has covered every offset below ``end`` (or the broker died)."""
    deadline = time.monotonic() + timeout
    while checkpoint(broker.data_dir, topic) < end:
        if not broker.is_running:
            return
        assert time.monotonic() < deadline, broker.log_tail(40)
        time.sleep(0.05)  # polling interval of a deadline wait, not a synchronisation


def check_view(records: list[tuple[str, str | None]], latest: dict[str, str],
               aborted: set[str]) -> None:
    view: dict[str, str | None] = {}
    for key, value in records:
        assert value not in aborted, (key, value)
        view[key] = value
    assert {k: v for k, v in view.items() if k.startswith("k")} == latest


def test_compacted_transactional_topic_reads_latest_committed(broker_factory) -> None:  # type: ignore[no-untyped-def]
    broker = broker_factory(configs=BROKER_CONFIGS)
    topic = unique_topic("compacted")
    create_topic(broker.bootstrap, topic)
    latest, aborted, end = write_transactions(broker.bootstrap, topic)
    wait_cleaned(broker, topic, end)
    records = read_all(broker.bootstrap, topic)
    check_view(records, latest, aborted)
    transactional = [r for r in records if r[0].startswith("k")]
    assert len(transactional) == len(latest) < ROUNDS * 3  # compacted: one value per key
    assert "cleaned [" in broker.log_text()
    # The Java client (kafka-clients 4.4) reads the compacted log too: gaps, emptied
    # batches, markers with a delete horizon.
    need_reference()
    lines = run_txn_client("consume", broker.bootstrap,
                           {"topics": [topic], "isolation": "read_committed"})
    values = [v for _t, _p, _o, v in line_with(lines, "records")["records"]]
    assert not set(values) & aborted
    assert {v for v in values if v.startswith("round")} == set(latest.values())


@pytest.mark.parametrize("point", ["cleaner.swap.log", "cleaner.swap.rename"])
def test_kill_during_a_clean_loses_nothing(broker_factory, point: str) -> None:  # type: ignore[no-untyped-def]
    """Written with the cleaner off; restarted with it on and a crash point in its swap;
    restarted again: the swap is finished or undone, the view is the same, and the cleaner
    carries on."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    broker = broker_factory(configs={**BROKER_CONFIGS, "log.cleaner.enable": False}, env=env)
    topic = unique_topic("compacted")
    create_topic(broker.bootstrap, topic)
    latest, aborted, end = write_transactions(broker.bootstrap, topic)
    before = read_all(broker.bootstrap, topic)
    check_view(before, latest, aborted)
    broker.stop()
    broker.configs["log.cleaner.enable"] = True
    assert broker.env is not None
    broker.env["ONCELOG_CRASH_AT"] = point
    broker.start()
    deadline = time.monotonic() + 30
    while broker.is_running:
        assert time.monotonic() < deadline, "the crash point was never reached"
        time.sleep(0.05)  # polling interval of a deadline wait
    assert f"crash point {point} reached" in broker.log_text(since_start=True)
    partition_dir = broker.data_dir / f"{topic}-0"
    assert list(partition_dir.glob("*.swap"))
    broker.env.pop("ONCELOG_CRASH_AT")
    broker.start()
    assert not list(partition_dir.glob("*.swap*")) and not list(partition_dir.glob("*.cleaned"))
    check_view(read_all(broker.bootstrap, topic), latest, aborted)
    wait_cleaned(broker, topic, end)  # and the cleaner carries on after the restart
    after = read_all(broker.bootstrap, topic)
    check_view(after, latest, aborted)
    assert len(after) < len(before)
