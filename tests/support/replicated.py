"""Helpers for replication tests and the fault run (bench/cluster_faults.py): rf=3 topics
with min.insync.replicas=2, reading a partition to its end with confluent-kafka, a replica's
log batches from its files, and a numbered idempotent acks=all stream."""

from __future__ import annotations

import struct
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog.harness.cluster import ClusterProcess, MetadataView


def create_topic(cluster: ClusterProcess, partitions: int = 1,
                 assignment: list[list[int]] | None = None) -> str:
    name = f"repl-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    topic = (NewTopic(name, len(assignment), replica_assignment=assignment,
                      config={"min.insync.replicas": "2"}) if assignment
             else NewTopic(name, partitions, 3, config={"min.insync.replicas": "2"}))
    admin.create_topics([topic], operation_timeout=10)[name].result(timeout=30)
    cluster.wait_until(lambda m: in_sync(m, name, partitions, 3), f"{name} fully in sync")
    return name


def in_sync(m: MetadataView, topic: str, partitions: int, size: int) -> bool:
    parts = m.topics.get(topic, {})
    return len(parts) == partitions and all(
        p.leader > 0 and len(p.isr) == size for p in parts.values())


def leader_of(cluster: ClusterProcess, topic: str, index: int = 0) -> int:
    return cluster.metadata().topics[topic][index].leader


def log_batches(data_dir: Path, topic: str, index: int, below: int) -> list[bytes]:
    """The record batches of a replica's log files below offset ``below``, as bytes with
    the (replica-local) partition leader epoch field kept: replicas copy batches whole."""
    batches: list[bytes] = []
    for segment in sorted((data_dir / f"{topic}-{index}").glob("*.log")):
        buf = segment.read_bytes()
        pos = 0
        while pos + 12 <= len(buf):
            base, length = struct.unpack_from(">qi", buf, pos)
            if length <= 0 or pos + 12 + length > len(buf) or base >= below:
                break
            batches.append(buf[pos:pos + 12 + length])
            pos += 12 + length
    return batches


def log_end(data_dir: Path, topic: str, index: int) -> int:
    """The end offset of a replica's log as its files show it (a live broker's too: a
    batch still being written is not counted), 0 without a partition directory."""
    segments = sorted((data_dir / f"{topic}-{index}").glob("*.log"))
    if not segments:
        return 0
    end = int(segments[-1].stem)  # a segment is named after its base offset
    buf = segments[-1].read_bytes()
    pos = 0
    while pos + LAST_OFFSET_DELTA + 4 <= len(buf):
        base, length = struct.unpack_from(">qi", buf, pos)
        if length <= 0 or pos + 12 + length > len(buf):
            break
        (delta,) = struct.unpack_from(">i", buf, pos + LAST_OFFSET_DELTA)
        end = base + delta + 1
        pos += 12 + length
    return end


LAST_OFFSET_DELTA = 23  # in a v2 record batch's header


def read_all(bootstrap: str, topic: str, partitions: int, *,
             committed: bool = False, conf: dict[str, Any] | None = None) -> list[bytes]:
    """Every record value up to the end (the HW, or the LSO with ``committed``); ``conf``
    adds client settings (e.g. security.protocol and its credentials)."""
    consumer = Consumer({
        **(conf or {}),
        "bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
        "enable.auto.commit": False, "enable.partition.eof": True,
        "isolation.level": "read_committed" if committed else "read_uncommitted",
    })
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values: list[bytes] = []
    at_end: set[int] = set()
    try:
        while len(at_end) < partitions:
            message = consumer.poll(30)
            assert message is not None, "no answer from the consumer within 30 s"
            error = message.error()
            partition, value = message.partition(), message.value()
            assert partition is not None
            if error is not None and error.code() == KafkaError._PARTITION_EOF:
                at_end.add(partition)
                continue
            assert error is None and value is not None, error
            at_end.discard(partition)
            values.append(value)
    finally:
        consumer.close()
    return values


def fill(bootstrap: str, topic: str, records: int, size: int) -> list[bytes]:
    """``records`` values of ``size`` bytes (``b"fill-<n>-...."``) written to ``topic``
    with an idempotent acks=all producer; the values acknowledged, all of them."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "acks": "all", "linger.ms": 20, "message.timeout.ms": 60000})
    acked: list[bytes] = []

    def delivered(error: KafkaError | None, message: Any) -> None:
        if error is None:
            acked.append(message.value())

    for n in range(records):
        value = f"fill-{n}-".encode().ljust(size, b".")
        while True:
            try:
                producer.produce(topic, value, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    assert producer.flush(60) == 0
    assert len(acked) == records, f"{records - len(acked)} fill records not acknowledged"
    return acked


# Broker settings of replication tests and the fault run: a lagging follower leaves the
# ISR within seconds, a refused fetch is retried soon, few internal partitions.
REPLICATION_CONFIGS: dict[str, str | int] = {
    "replica.lag.time.max.ms": 2000,
    "replica.fetch.backoff.ms": 200,
    "offsets.topic.num.partitions": 2,
    "transaction.state.log.num.partitions": 2,
}

# Producer settings for faults that pause a broker (SIGSTOP): a paused broker holds its
# connections open without answering, and librdkafka gives up a request in flight to it
# only after socket.timeout.ms (60 s by default); request.timeout.ms (the acks wait asked
# of the broker) stays below it; messages are kept long enough for several faults.
PAUSE_TOLERANT_PRODUCER: dict[str, str | int] = {
    "socket.timeout.ms": 5000, "request.timeout.ms": 4000, "message.timeout.ms": 300000,
}


class NumberedStream:
    """An idempotent acks=all confluent-kafka producer writing b"0", b"1", ... from a
    thread; ``acked`` are the values acknowledged without error. ``configs`` adds to or
    overrides the producer's settings; ``rate`` (records per second) paces it, else it
    writes as fast as the producer takes them."""

    def __init__(self, bootstrap: str, topic: str,
                 configs: dict[str, str | int] | None = None, *,
                 rate: float | None = None) -> None:
        self.producer = Producer({
            "bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
            "linger.ms": 2, "message.timeout.ms": 60000, **(configs or {}),
        })
        self.topic = topic
        self.acked: list[bytes] = []
        self.failed: list[str] = []
        self.sent = 0
        self.rate = rate
        self._stop = threading.Event()
        self._progress = threading.Condition()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _delivered(self, error: KafkaError | None, message: Any) -> None:
        with self._progress:
            if error is None:
                self.acked.append(message.value())
            else:
                self.failed.append(str(error))
            self._progress.notify_all()

    def _run(self) -> None:
        started = time.monotonic()
        while not self._stop.is_set():
            try:
                self.producer.produce(self.topic, str(self.sent).encode(),
                                      on_delivery=self._delivered)
                self.sent += 1
            except BufferError:
                pass
            self.producer.poll(0.001)
            if self.rate is not None:  # pacing, not synchronisation
                self._stop.wait(started + self.sent / self.rate - time.monotonic())

    def wait_acked(self, count: int, timeout: float = 60) -> None:
        with self._progress:
            assert self._progress.wait_for(lambda: len(self.acked) >= count, timeout), (
                f"{len(self.acked)} acknowledged of {count}; failures {self.failed[:3]}")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        assert self.producer.flush(60) == 0
