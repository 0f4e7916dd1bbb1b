"""Thin adapters over the three real Kafka clients, so one test runs against each.

Each adapter produces keyed records with headers and returns the broker's acknowledgements,
and consumes through a consumer group. Nothing here fakes the broker: every call goes over
TCP to a real ``oncelog serve`` process.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import cast

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


@dataclass(frozen=True)
class Sent:
    key: bytes
    value: bytes
    headers: tuple[tuple[str, bytes], ...]


@dataclass(frozen=True)
class Acked:
    sent: Sent
    partition: int
    offset: int


@dataclass(frozen=True)
class Got:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]


@dataclass
class StopFlag:
    event: threading.Event = field(default_factory=threading.Event)

    def set(self) -> None:
        self.event.set()

    def is_set(self) -> bool:
        return self.event.is_set()


def make_records(n: int, prefix: str = "") -> list[Sent]:
    run = uuid.uuid4().hex[:6]
    return [
        Sent(
            key=f"{prefix}key-{i % 97}".encode(),
            value=f"{prefix}{run}-value-{i:08d}".encode() * 2,
            headers=(("seq", str(i).encode()), ("run", run.encode())),
        )
        for i in range(n)
    ]


def _norm_headers(
    headers: Iterable[tuple[str, bytes | None]] | None,
) -> tuple[tuple[str, bytes], ...]:
    return tuple((k, v if v is not None else b"") for k, v in (headers or ()))


# ---------------------------------------------------------------------------------------
class ConfluentClient:
    name = "confluent"

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap

    def create_topic(
        self, topic: str, partitions: int, configs: dict[str, str] | None = None
    ) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        futures = admin.create_topics([NewTopic(topic, partitions, 1, config=configs or {})])
        futures[topic].result(30)

    def produce(
        self,
        topic: str,
        records: list[Sent],
        *,
        compression: str = "none",
        extra: Mapping[str, object] | None = None,
        stop: StopFlag | None = None,
        on_ack: Callable[[Acked], None] | None = None,
    ) -> list[Acked]:
        from confluent_kafka import Producer

        conf: dict[str, object] = {
            "bootstrap.servers": self.bootstrap,
            "acks": "all",
            "compression.type": compression,
            "linger.ms": 5,
            "enable.idempotence": False,
        }
        conf.update(extra or {})
        producer = Producer(conf)
        acked: list[Acked] = []
        errors: list[str] = []

        def report(sent: Sent) -> Callable[[object, object], None]:
            def cb(err: object, msg: object) -> None:
                if err is not None:
                    errors.append(str(err))
                    return
                ack = Acked(sent, msg.partition(), msg.offset())  # type: ignore[attr-defined]
                acked.append(ack)
                if on_ack:
                    on_ack(ack)

            return cb

        for sent in records:
            if stop and stop.is_set():
                break
            while True:
                try:
                    producer.produce(
                        topic,
                        key=sent.key,
                        value=sent.value,
                        headers=list(sent.headers),
                        on_delivery=report(sent),
                    )
                    break
                except BufferError:
                    producer.poll(0.05)
            producer.poll(0)
        producer.flush(60 if stop is None else 15)
        if stop is None:
            assert not errors, errors[:5]
            assert len(acked) == len(records)
        return acked

    def consume(
        self,
        topic: str,
        group: str,
        expected: int,
        *,
        timeout: float = 120.0,
        commit: bool = True,
    ) -> list[Got]:
        from confluent_kafka import Consumer

        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        consumer.subscribe([topic])
        got: list[Got] = []
        deadline = time.monotonic() + timeout
        try:
            while len(got) < expected and time.monotonic() < deadline:
                for msg in consumer.consume(1000, 0.5):
                    if msg.error():
                        continue
                    partition, offset = msg.partition(), msg.offset()
                    assert partition is not None and offset is not None
                    # A consumed message's headers are a list of (str, bytes) pairs; the
                    # stub's type also covers the dict a producer may be given.
                    headers = cast("list[tuple[str, bytes | None]] | None", msg.headers())
                    got.append(
                        Got(
                            partition,
                            offset,
                            msg.key(),
                            msg.value(),
                            _norm_headers(headers),
                        )
                    )
            if commit and got:
                consumer.commit(asynchronous=False)
        finally:
            consumer.close()
        return got

    def committed(self, topic: str, group: str, partitions: int) -> dict[int, int]:
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": group})
        try:
            tps = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], 30)
            return {tp.partition: tp.offset for tp in tps}
        finally:
            consumer.close()


# ---------------------------------------------------------------------------------------
class KafkaPythonClient:
    name = "kafka-python"

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap

    def create_topic(
        self, topic: str, partitions: int, configs: dict[str, str] | None = None
    ) -> None:
        from kafka.admin import KafkaAdminClient, NewTopic

        admin = KafkaAdminClient(bootstrap_servers=self.bootstrap)
        try:
            admin.create_topics([NewTopic(topic, partitions, 1, topic_configs=configs or {})])
        finally:
            admin.close()

    def produce(
        self,
        topic: str,
        records: list[Sent],
        *,
        compression: str = "none",
        extra: Mapping[str, object] | None = None,
        stop: StopFlag | None = None,
        on_ack: Callable[[Acked], None] | None = None,
    ) -> list[Acked]:
        from kafka import KafkaProducer

        conf: dict[str, object] = {
            "bootstrap_servers": self.bootstrap,
            "acks": "all",
            "compression_type": None if compression == "none" else compression,
            "linger_ms": 5,
            "enable_idempotence": False,
        }
        conf.update(extra or {})
        producer = KafkaProducer(**conf)
        acked: list[Acked] = []
        futures = []
        try:
            for sent in records:
                if stop and stop.is_set():
                    break
                fut = producer.send(
                    topic, key=sent.key, value=sent.value, headers=list(sent.headers)
                )
                if on_ack is not None:

                    def cb(meta: object, sent: Sent = sent) -> None:
                        on_ack(Acked(sent, meta.partition, meta.offset))  # type: ignore[attr-defined]

                    fut.add_callback(cb)
                futures.append((sent, fut))
            producer.flush(timeout=60 if stop is None else 15)
        except Exception:
            if stop is None:
                raise
        finally:
            try:
                producer.close(timeout=5)
            except Exception:
                if stop is None:
                    raise
                # close() raises when its flush times out (the broker was killed) and then
                # leaves the sender thread running, which would append the batches it still
                # holds once the broker is back. Stop it for good.
                producer._sender.force_close()
                producer._sender.join(10)
        for sent, fut in futures:
            if fut.succeeded():
                meta = fut.value
                acked.append(Acked(sent, meta.partition, meta.offset))
            elif stop is None:
                raise AssertionError(f"send failed: {fut.exception}")
        return acked

    def consume(
        self,
        topic: str,
        group: str,
        expected: int,
        *,
        timeout: float = 120.0,
        commit: bool = True,
    ) -> list[Got]:
        from kafka import KafkaConsumer

        consumer = KafkaConsumer(
            bootstrap_servers=self.bootstrap,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        consumer.subscribe([topic])
        got: list[Got] = []
        deadline = time.monotonic() + timeout
        try:
            while len(got) < expected and time.monotonic() < deadline:
                batch = consumer.poll(timeout_ms=500, max_records=5000)
                for tp, msgs in batch.items():
                    for m in msgs:
                        got.append(
                            Got(tp.partition, m.offset, m.key, m.value, _norm_headers(m.headers))
                        )
            if commit and got:
                consumer.commit()
        finally:
            consumer.close()
        return got

    def committed(self, topic: str, group: str, partitions: int) -> dict[int, int]:
        from kafka import KafkaConsumer, TopicPartition

        consumer = KafkaConsumer(
            bootstrap_servers=self.bootstrap, group_id=group, enable_auto_commit=False
        )
        try:
            out = {}
            for p in range(partitions):
                value = consumer.committed(TopicPartition(topic, p))
                out[p] = -1 if value is None else value
            return out
        finally:
            consumer.close()


# ---------------------------------------------------------------------------------------
class AioKafkaClient:
    name = "aiokafka"

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap

    def create_topic(
        self, topic: str, partitions: int, configs: dict[str, str] | None = None
    ) -> None:
        from aiokafka.admin import AIOKafkaAdminClient, NewTopic

        async def run() -> None:
            admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap)
            await admin.start()
            try:
                await admin.create_topics(
                    [NewTopic(topic, partitions, 1, topic_configs=configs or {})]
                )
            finally:
                await admin.close()

        asyncio.run(run())

    def produce(
        self,
        topic: str,
        records: list[Sent],
        *,
        compression: str = "none",
        extra: Mapping[str, object] | None = None,
        stop: StopFlag | None = None,
        on_ack: Callable[[Acked], None] | None = None,
    ) -> list[Acked]:
        from aiokafka import AIOKafkaProducer

        async def run() -> list[Acked]:
            conf: dict[str, object] = {
                "bootstrap_servers": self.bootstrap,
                "acks": "all",
                "compression_type": None if compression == "none" else compression,
                "linger_ms": 5,
                "enable_idempotence": False,
            }
            conf.update(extra or {})
            producer = AIOKafkaProducer(**conf)
            await producer.start()
            acked: list[Acked] = []
            pending = []
            try:
                for sent in records:
                    if stop and stop.is_set():
                        break
                    try:
                        fut = await producer.send(
                            topic, key=sent.key, value=sent.value, headers=list(sent.headers)
                        )
                    except Exception:
                        if stop is None:
                            raise
                        break  # the broker was killed under us: keep what was acknowledged
                    pending.append((sent, fut))
                    if on_ack is not None:

                        def cb(f: asyncio.Future[object], sent: Sent = sent) -> None:
                            if not f.cancelled() and f.exception() is None:
                                meta = f.result()
                                on_ack(Acked(sent, meta.partition, meta.offset))  # type: ignore[attr-defined]

                        fut.add_done_callback(cb)
                try:
                    async with asyncio.timeout(60 if stop is None else 15):
                        await producer.flush()
                except Exception:
                    if stop is None:
                        raise
            finally:
                try:
                    async with asyncio.timeout(10):
                        await producer.stop()
                except Exception:
                    if stop is None:
                        raise
            for sent, fut in pending:
                if fut.done() and not fut.cancelled() and fut.exception() is None:
                    meta = fut.result()
                    acked.append(Acked(sent, meta.partition, meta.offset))
                elif stop is None:
                    raise AssertionError(f"send failed: {fut}")
            return acked

        return asyncio.run(run())

    def consume(
        self,
        topic: str,
        group: str,
        expected: int,
        *,
        timeout: float = 120.0,
        commit: bool = True,
    ) -> list[Got]:
        from aiokafka import AIOKafkaConsumer

        async def run() -> list[Got]:
            consumer = AIOKafkaConsumer(
                topic,
                bootstrap_servers=self.bootstrap,
                group_id=group,
                auto_offset_reset="earliest",
                enable_auto_commit=False,
            )
            await consumer.start()
            got: list[Got] = []
            deadline = time.monotonic() + timeout
            try:
                while len(got) < expected and time.monotonic() < deadline:
                    batch = await consumer.getmany(timeout_ms=500, max_records=5000)
                    for tp, msgs in batch.items():
                        for m in msgs:
                            got.append(
                                Got(
                                    tp.partition, m.offset, m.key, m.value, _norm_headers(m.headers)
                                )
                            )
                if commit and got:
                    await consumer.commit()
            finally:
                await consumer.stop()
            return got

        return asyncio.run(run())

    def committed(self, topic: str, group: str, partitions: int) -> dict[int, int]:
        from aiokafka import AIOKafkaConsumer, TopicPartition

        async def run() -> dict[int, int]:
            consumer = AIOKafkaConsumer(
                bootstrap_servers=self.bootstrap, group_id=group, enable_auto_commit=False
            )
            await consumer.start()
            try:
                out = {}
                for p in range(partitions):
                    value = await consumer.committed(TopicPartition(topic, p))
                    out[p] = -1 if value is None else value
                return out
            finally:
                await consumer.stop()

        return asyncio.run(run())


CLIENTS = {c.name: c for c in (ConfluentClient, KafkaPythonClient, AioKafkaClient)}


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    """High watermarks, read with librdkafka (only to verify, never as the client under test)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks"})
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
            for p in range(partitions)
        }
    finally:
        consumer.close()
