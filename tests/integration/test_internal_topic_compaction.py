"""Issue 16: the internal topics stop growing. ``__transaction_state`` and
``__consumer_offsets`` are compacted by default; with small internal segment sizes a real
``oncelog serve`` under consume-transform-produce load (oncelog.client, a few transactional
ids each committing output and its group's offsets with ``send_offsets_to_transaction``)
keeps both bounded by the live ids and groups, not by the number of commits; a restart loads
the same transaction states and committed offsets; and the tombstones of an expired
transactional id and of a deleted group are removed once ``delete.retention.ms`` has passed.

The commit count is a few thousand, not tens of thousands: the Python client and broker do
a few hundred transactional commits a second on the CI machine, and the bound asserted is
independent of the count (it is a few segments), so more commits would only make the test
slower. The cleaner is waited for by polling the partition files with a deadline. Load
times are logged by the broker (``loaded __transaction_state in N ms``), not asserted.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from oncelog.client import (
    Admin,
    Consumer,
    NewTopic,
    OffsetAndMetadata,
    Producer,
    TopicPartition,
)
from oncelog.harness.broker import BrokerProcess
from oncelog.records.codec import decode_batch
from tests.support.names import unique_name, unique_topic

pytestmark = pytest.mark.integration

SEGMENT_BYTES = 8192
BROKER_CONFIGS = {
    "transaction.state.log.segment.bytes": SEGMENT_BYTES,
    "offsets.topic.segment.bytes": SEGMENT_BYTES,
    "transaction.state.log.num.partitions": 1,
    "offsets.topic.num.partitions": 1,
    "log.cleaner.backoff.ms": 100,
    "log.cleaner.delete.retention.ms": 500,
}
IDS = 4
INTERNAL = ("__transaction_state", "__consumer_offsets")
COMMITS = 3000


def segment_files(data_dir: Path, topic: str) -> list[bytes]:
    """The contents of the partition's segments, oldest first, as one listing saw them
    (listed again when a pass swapped files in between the listing and the read)."""
    while True:
        try:
            return [p.read_bytes() for p in sorted((data_dir / f"{topic}-0").glob("*.log"))]
        except FileNotFoundError:
            continue


def partition_keys(data_dir: Path, topic: str) -> list[bytes]:
    """The keys of every record in the partition's segments (control records included)."""
    keys: list[bytes] = []
    for data in segment_files(data_dir, topic):
        pos = 0
        while pos + 12 <= len(data):
            size = 12 + int.from_bytes(data[pos + 8:pos + 12], "big")
            if pos + size > len(data):
                break  # a batch being written
            _header, records = decode_batch(data, pos)
            keys.extend(r.key for r in records if r.key is not None)
            pos += size
    return keys


class Committers:
    """``IDS`` consume-transform-produce loops in threads: each commits one output record
    and its group's offset per transaction, until stopped."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.ids = [unique_name(f"ctp{i}") for i in range(IDS)]
        self.groups = [unique_name(f"ctpg{i}") for i in range(IDS)]
        self.commits = [0] * IDS
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(i,)) for i in range(IDS)]

    def _run(self, i: int) -> None:
        producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 0,
                             "transactional.id": self.ids[i]})
        try:
            producer.init_transactions()
            source = TopicPartition(f"source-{i}", 0)
            while not self._stop.is_set():
                n = self.commits[i]
                producer.begin_transaction()
                producer.send(self.topic, f"{i}-{n}".encode(), key=f"k{i}".encode())
                producer.send_offsets_to_transaction({source: OffsetAndMetadata(n + 1)},
                                                     self.groups[i])
                producer.commit_transaction()
                self.commits[i] = n + 1
        except BaseException as exc:  # surfaced by stop()
            self.errors.append(exc)
        finally:
            producer.close()

    @contextmanager
    def running(self) -> Iterator[Committers]:
        for thread in self._threads:
            thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            for thread in self._threads:
                thread.join(60)
        assert not self.errors, self.errors

    def total(self) -> int:
        return sum(self.commits)


def wait_for(condition: Callable[[], bool], broker: BrokerProcess, timeout: float,
             what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what}\n{broker.log_tail(30)}"
        time.sleep(0.1)  # polling interval of a deadline wait, not a synchronisation


def records_on_disk(broker: BrokerProcess) -> dict[str, int]:
    return {t: len(partition_keys(broker.data_dir, t)) for t in INTERNAL}


def bounded(broker: BrokerProcess, commits: int) -> bool:
    """Both internal topics hold far fewer records than the commits wrote to them (each
    commit writes several to each): what is left is one record per live key, the markers
    and producers' last batch headers within a pass or two (a marker goes one
    ``delete.retention.ms`` after the pass that removed its data, as in Kafka), the
    dirty segments not yet cleaned (at most a second of commits: rolled segments are
    flushed within a second, and only flushed ones are cleaned) and the active segment."""
    return all(n < commits // 4 for n in records_on_disk(broker).values())


def make_topic(bootstrap: str) -> str:
    topic = unique_topic("ctp-out")
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics([NewTopic(topic, 1, 1)])
    return topic


def state_of(bootstrap: str, committers: Committers) -> tuple[dict[str, tuple[str, int, int]],
                                                              dict[str, int]]:
    """Each id's (state, producer id, epoch) and each group's committed offset."""
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        described = admin.describe_transactions(committers.ids)
        txns = {t: (d.state, d.producer_id, d.producer_epoch) for t, d in described.items()}
        offsets = {}
        for i, group in enumerate(committers.groups):
            committed = admin.list_consumer_group_offsets(group)
            offsets[group] = committed[TopicPartition(f"source-{i}", 0)].offset
    return txns, offsets


def test_internal_topics_stay_bounded_and_reload_the_same_state(broker_factory) -> None:  # type: ignore[no-untyped-def]
    broker: BrokerProcess = broker_factory(configs=BROKER_CONFIGS)
    committers = Committers(broker.bootstrap, make_topic(broker.bootstrap))
    with committers.running():
        wait_for(lambda: committers.total() >= COMMITS, broker, 240, "too few commits")
        # Under load, passes keep both internal topics bounded by the live keys and the
        # last second or so of commits, not by the history.
        wait_for(lambda: bounded(broker, committers.total()), broker, 30,
                 f"the internal topics kept their history: {records_on_disk(broker)}")
    assert "cleaned [" in broker.log_text()
    before = state_of(broker.bootstrap, committers)
    assert before[1] == {g: committers.commits[i] for i, g in enumerate(committers.groups)}
    assert {state for state, _pid, _epoch in before[0].values()} == {"CompleteCommit"}
    broker.stop()
    broker.start()
    assert state_of(broker.bootstrap, committers) == before
    for topic in INTERNAL:
        assert f"loaded {topic} in " in broker.log_text(since_start=True)


def test_expired_id_and_deleted_group_leave_the_internal_topics(broker_factory) -> None:  # type: ignore[no-untyped-def]
    broker: BrokerProcess = broker_factory(configs={
        **BROKER_CONFIGS,
        "transactional.id.expiration.ms": 1000,
        "transaction.remove.expired.transaction.cleanup.interval.ms": 200,
    })
    topic = make_topic(broker.bootstrap)
    expiring, doomed = unique_name("expiring"), unique_name("doomed")
    with Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": expiring}) as p:
        p.init_transactions()
        p.begin_transaction()
        p.send(topic, b"once")
        p.commit_transaction()
    with Consumer({"bootstrap.servers": broker.bootstrap, "group.id": doomed,
                   "enable.auto.commit": False}) as consumer:
        consumer.commit({TopicPartition(topic, 0): OffsetAndMetadata(1)})
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        assert admin.delete_consumer_groups([doomed]) == {doomed: None}

    def gone(topic: str, name: str) -> bool:
        return not any(name.encode() in key for key in partition_keys(broker.data_dir, topic))

    assert not gone("__transaction_state", expiring) and not gone("__consumer_offsets", doomed)
    committers = Committers(broker.bootstrap, topic)
    with committers.running():  # live ids keep the partitions dirty, so passes go on
        wait_for(lambda: gone("__transaction_state", expiring)
                 and gone("__consumer_offsets", doomed), broker, 30,
                 "the tombstones were never removed")
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        assert doomed not in {g.group_id for g in admin.list_consumer_groups()}
        assert expiring not in {t.transactional_id for t in admin.list_transactions()}
