"""Transactional producers and isolation-aware consumers over the three real Kafka clients.

The adapters give one synchronous shape to confluent-kafka, kafka-python and aiokafka so a
transaction test is written once and run against each:

    client = TXN_CLIENTS["aiokafka"](broker.bootstrap)
    producer = client.producer("txn-id", timeout_ms=10_000)
    producer.init(); producer.begin()
    producer.send("out", b"v", partition=0); producer.flush()
    producer.commit()
    client.read("out", 1, committed=True, expect=1)      # read_committed, from the beginning

Errors are the client's own exceptions (confluent-kafka's ``KafkaException``, kafka-python's
``KafkaError`` subclasses, aiokafka's); ``client.is_fenced(exc)`` says whether one is that
client's "producer fenced" error. aiokafka runs on an event loop in a background thread owned
by the adapter, so its consumers keep heartbeating between calls. Nothing here fakes the
broker: every call goes over TCP to a real ``oncelog serve``.

Run as a script, this module is a producer that can be killed mid-transaction::

    python txn_clients.py hang CLIENT BOOTSTRAP TXN_ID TOPIC PARTITION COUNT TIMEOUT_MS

It begins a transaction, sends COUNT records to TOPIC/PARTITION, waits for their
acknowledgements, prints ``ACKED <offset> ...`` and then sleeps until killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
import time
import uuid
from collections.abc import Awaitable, Coroutine, Iterable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from clients import CLIENTS as PLAIN_CLIENTS

T = TypeVar("T")
TP = tuple[str, int]

# Short client-side timeouts: the broker is local, and a hang must fail a test quickly.
OP_TIMEOUT = 30.0


@dataclass(frozen=True)
class Rec:
    """One record as a consumer saw it, or as the broker acknowledged it."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


class TxnProducer(Protocol):
    def init(self) -> None: ...
    def begin(self) -> None: ...
    def send(self, topic: str, value: bytes, *, partition: int, key: bytes | None = None) -> None:
        ...
    def flush(self, timeout: float = OP_TIMEOUT) -> list[Rec]:
        """Wait for every send since the last flush; their acks, or the first error raised."""
        ...
    def send_offsets(self, offsets: Mapping[TP, int], consumer: GroupConsumer) -> None: ...
    def commit(self) -> None: ...
    def abort(self) -> None: ...
    def close(self) -> None: ...


class GroupConsumer(Protocol):
    group: str

    def poll(self, max_records: int, timeout: float) -> list[Rec]: ...
    def rewind_to_committed(self) -> None: ...
    def close(self) -> None: ...


class TxnClient(Protocol):
    name: str
    bootstrap: str

    def create_topic(self, topic: str, partitions: int) -> None: ...
    def producer(self, transactional_id: str, *, timeout_ms: int = 10_000) -> TxnProducer: ...
    def plain_send(self, topic: str, partition: int, values: Sequence[bytes]) -> list[Rec]: ...
    def read(
        self, topic: str, partitions: int, *, committed: bool, expect: int | None = None,
        timeout: float = 20.0, settle: float = 0.7,
    ) -> list[Rec]:
        """Read every partition from the beginning with the given isolation level.

        Polls until ``expect`` records arrived (or ``timeout``), then ``settle`` seconds more
        so that anything beyond what was expected shows up too.
        """
        ...
    def latest_offsets(self, topic: str, partitions: int, *, committed: bool) -> dict[int, int]:
        """ListOffsets "latest" per partition: the LSO under read_committed, else the HW."""
        ...
    def group_consumer(
        self, topic: str, group: str, *, assign: int | None = None
    ) -> GroupConsumer:
        """A read_committed consumer of ``group``: subscribed to ``topic``, or, with
        ``assign=N``, assigned its N partitions from the group's committed offsets (a
        standalone consumer that commits to the group without being a member of it)."""
        ...
    def committed(self, group: str, topic: str, partitions: int) -> dict[int, int | None]: ...
    def is_fenced(self, exc: BaseException) -> bool: ...
    def is_old_epoch(self, exc: BaseException) -> bool:
        """The client's error for a produce the partition refused as from an older epoch."""
        ...
    def close(self) -> None: ...


def poll_until(
    consumer: GroupConsumer, count: int, timeout: float = 30.0, most: int = 1000
) -> list[Rec]:
    """Poll until ``count`` records arrived (or ``timeout``), at most ``most`` per poll."""
    got: list[Rec] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        got += consumer.poll(most, 0.2)
    return got


def processed_offsets(records: Iterable[Rec]) -> dict[TP, int]:
    """The offsets to commit after processing ``records``: one past the last, per partition."""
    out: dict[TP, int] = {}
    for r in records:
        out[(r.topic, r.partition)] = max(out.get((r.topic, r.partition), 0), r.offset + 1)
    return out


def transform(producer: TxnProducer, dst: str, records: Iterable[Rec]) -> list[Rec]:
    """Send ``out:<value>`` for each input record to the same partition of ``dst``; acks."""
    for r in records:
        assert r.value is not None
        producer.send(dst, b"out:" + r.value, partition=r.partition)
    return producer.flush()


def _read_loop(
    poll: Any, expect: int | None, timeout: float, settle: float
) -> list[Rec]:
    got: list[Rec] = []
    deadline = time.monotonic() + timeout
    while expect is not None and len(got) < expect and time.monotonic() < deadline:
        got += poll(0.2)
    settle_until = time.monotonic() + settle
    while time.monotonic() < settle_until:
        got += poll(0.1)
    return got


# ---------------------------------------------------------------------------------------
# confluent-kafka (librdkafka)
def _confluent_call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Call a confluent-kafka producer method; its errors always come out as KafkaException.

    confluent-kafka 2.16 raises a fatal error found while serving callbacks (e.g. "fenced"
    during ``flush``) as a bare ``KafkaError`` object, which is not an exception class, or, when
    a delivery callback runs while it is pending, as a ``SystemError`` caused by it. Both
    carry the client's error unchanged; this puts it in the client's documented exception.
    """
    from confluent_kafka import KafkaError, KafkaException

    try:
        return fn(*args, **kwargs)
    except KafkaException:
        raise
    except:  # a bare KafkaError does not derive from BaseException
        exc = sys.exc_info()[1]
        seen: object = exc
        while seen is not None:
            if isinstance(seen, KafkaError):
                raise KafkaException(seen) from None
            if isinstance(seen, KafkaException):
                raise seen from None
            seen = getattr(seen, "__cause__", None) or getattr(seen, "__context__", None)
        raise


class _ConfluentProducer:
    def __init__(self, bootstrap: str, transactional_id: str, timeout_ms: int) -> None:
        from confluent_kafka import Producer

        self._fatal: list[Any] = []
        self._acks: list[Rec] = []
        self._errors: list[Any] = []
        self._pending = 0
        self._p = Producer(
            {
                "bootstrap.servers": bootstrap,
                "transactional.id": transactional_id,
                "transaction.timeout.ms": timeout_ms,
                "linger.ms": 5,
                "error_cb": self._on_error,
            }
        )

    def _on_error(self, err: Any) -> None:
        if err.fatal():
            self._fatal.append(err)

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None:
            self._errors.append(err)
        else:
            self._acks.append(
                Rec(msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value())
            )

    def init(self) -> None:
        _confluent_call(self._p.init_transactions, OP_TIMEOUT)

    def begin(self) -> None:
        _confluent_call(self._p.begin_transaction)

    def send(self, topic: str, value: bytes, *, partition: int, key: bytes | None = None) -> None:
        _confluent_call(self._p.produce, topic, value=value, key=key, partition=partition,
                        on_delivery=self._on_delivery)
        _confluent_call(self._p.poll, 0)

    def flush(self, timeout: float = OP_TIMEOUT) -> list[Rec]:
        from confluent_kafka import KafkaException

        left = _confluent_call(self._p.flush, timeout)
        acks, errors = self._acks, self._errors
        self._acks, self._errors = [], []
        if self._fatal:
            raise KafkaException(self._fatal[0])
        if errors:
            raise KafkaException(errors[0])
        if left:
            raise TimeoutError(f"{left} records not delivered after {timeout}s")
        return acks

    def send_offsets(self, offsets: Mapping[TP, int], consumer: GroupConsumer) -> None:
        from confluent_kafka import TopicPartition

        assert isinstance(consumer, _ConfluentGroupConsumer)
        _confluent_call(
            self._p.send_offsets_to_transaction,
            [TopicPartition(t, p, o) for (t, p), o in offsets.items()],
            consumer.native.consumer_group_metadata(),
            OP_TIMEOUT,
        )

    def commit(self) -> None:
        _confluent_call(self._p.commit_transaction, OP_TIMEOUT)

    def abort(self) -> None:
        _confluent_call(self._p.abort_transaction, OP_TIMEOUT)

    def close(self) -> None:
        # A fenced producer raises its fatal error again here; closing it is not under test.
        with contextlib.suppress(BaseException):
            _confluent_call(self._p.purge)
            _confluent_call(self._p.flush, 0)


class _ConfluentGroupConsumer:
    def __init__(self, bootstrap: str, topic: str, group: str, assign: int | None) -> None:
        from confluent_kafka import OFFSET_STORED, Consumer, TopicPartition

        self.group = group
        self.native = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "fetch.wait.max.ms": 100,
                "session.timeout.ms": 10_000,
            }
        )
        if assign is None:
            self.native.subscribe([topic])
        else:
            self.native.assign([TopicPartition(topic, p, OFFSET_STORED) for p in range(assign)])

    def poll(self, max_records: int, timeout: float) -> list[Rec]:
        out = []
        for m in self.native.consume(max_records, timeout):
            if m.error() is None:
                out.append(Rec(m.topic() or "", m.partition() or 0, m.offset() or 0,
                               m.key(), m.value()))
        return out

    def rewind_to_committed(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        for tp in self.native.committed(self.native.assignment(), OP_TIMEOUT):
            offset = tp.offset if tp.offset >= 0 else OFFSET_BEGINNING
            self.native.seek(TopicPartition(tp.topic, tp.partition, offset))

    def close(self) -> None:
        self.native.close()


class ConfluentTxnClient:
    name = "confluent"

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap

    def create_topic(self, topic: str, partitions: int) -> None:
        PLAIN_CLIENTS["confluent"](self.bootstrap).create_topic(topic, partitions)

    def producer(self, transactional_id: str, *, timeout_ms: int = 10_000) -> TxnProducer:
        return _ConfluentProducer(self.bootstrap, transactional_id, timeout_ms)

    def plain_send(self, topic: str, partition: int, values: Sequence[bytes]) -> list[Rec]:
        from confluent_kafka import Producer

        acks: list[Rec] = []
        errors: list[Any] = []

        def on_delivery(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(err)
            else:
                acks.append(Rec(msg.topic(), msg.partition(), msg.offset(), msg.key(),
                                msg.value()))

        p = Producer({"bootstrap.servers": self.bootstrap, "acks": "all", "linger.ms": 1})
        for value in values:
            p.produce(topic, value=value, partition=partition, on_delivery=on_delivery)
        assert p.flush(OP_TIMEOUT) == 0 and not errors, errors
        return sorted(acks, key=lambda r: r.offset)

    def read(
        self, topic: str, partitions: int, *, committed: bool, expect: int | None = None,
        timeout: float = 20.0, settle: float = 0.7,
    ) -> list[Rec]:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": f"reader-{uuid.uuid4().hex[:8]}",
                "isolation.level": "read_committed" if committed else "read_uncommitted",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 100,
            }
        )
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])

        def poll(timeout: float) -> list[Rec]:
            return [Rec(m.topic() or "", m.partition() or 0, m.offset() or 0,
                        m.key(), m.value())
                    for m in consumer.consume(1000, timeout) if m.error() is None]

        try:
            return _read_loop(poll, expect, timeout, settle)
        finally:
            consumer.close()

    def latest_offsets(self, topic: str, partitions: int, *, committed: bool) -> dict[int, int]:
        from confluent_kafka import IsolationLevel, TopicPartition
        from confluent_kafka.admin import AdminClient, OffsetSpec

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        level = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
        futures = admin.list_offsets(
            {TopicPartition(topic, p): OffsetSpec.latest() for p in range(partitions)},
            isolation_level=level, request_timeout=OP_TIMEOUT,
        )
        return {tp.partition: fut.result().offset for tp, fut in futures.items()}

    def group_consumer(
        self, topic: str, group: str, *, assign: int | None = None
    ) -> GroupConsumer:
        return _ConfluentGroupConsumer(self.bootstrap, topic, group, assign)

    def committed(self, group: str, topic: str, partitions: int) -> dict[int, int | None]:
        from confluent_kafka import Consumer, TopicPartition

        # read_uncommitted: no require_stable, so pending transactional offsets do not block.
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": group,
                             "isolation.level": "read_uncommitted"})
        try:
            tps = consumer.committed([TopicPartition(topic, p) for p in range(partitions)],
                                     OP_TIMEOUT)
            return {tp.partition: tp.offset if tp.offset >= 0 else None for tp in tps}
        finally:
            consumer.close()

    def is_fenced(self, exc: BaseException) -> bool:
        from confluent_kafka import KafkaError, KafkaException

        if not isinstance(exc, KafkaException) or not exc.args:
            return False
        err = exc.args[0]
        return isinstance(err, KafkaError) and err.code() in (
            KafkaError._FENCED, KafkaError.PRODUCER_FENCED
        )

    def is_old_epoch(self, exc: BaseException) -> bool:
        from confluent_kafka import KafkaError, KafkaException

        return (isinstance(exc, KafkaException) and bool(exc.args)
                and isinstance(exc.args[0], KafkaError)
                and exc.args[0].code() == KafkaError.INVALID_PRODUCER_EPOCH)

    def close(self) -> None:
        pass


# ---------------------------------------------------------------------------------------
# kafka-python
class _KafkaPythonProducer:
    def __init__(self, bootstrap: str, transactional_id: str, timeout_ms: int) -> None:
        from kafka import KafkaProducer

        self._p = KafkaProducer(
            bootstrap_servers=bootstrap,
            transactional_id=transactional_id,
            transaction_timeout_ms=timeout_ms,
            linger_ms=5,
            acks="all",
        )
        self._futures: list[Any] = []

    def init(self) -> None:
        self._p.init_transactions()

    def begin(self) -> None:
        self._call(self._p.begin_transaction)

    def send(self, topic: str, value: bytes, *, partition: int, key: bytes | None = None) -> None:
        self._futures.append(
            self._call(self._p.send, topic, value=value, key=key, partition=partition))

    def flush(self, timeout: float = OP_TIMEOUT) -> list[Rec]:
        futures, self._futures = self._futures, []
        self._p.flush(timeout=timeout)
        acks = []
        for fut in futures:
            meta = fut.get(timeout=timeout)
            acks.append(Rec(meta.topic, meta.partition, meta.offset, None, None))
        return acks

    def send_offsets(self, offsets: Mapping[TP, int], consumer: GroupConsumer) -> None:
        from kafka import OffsetAndMetadata, TopicPartition

        assert isinstance(consumer, _KafkaPythonGroupConsumer)
        self._p.send_offsets_to_transaction(
            {TopicPartition(t, p): OffsetAndMetadata(o, "", -1) for (t, p), o in offsets.items()},
            consumer.native.group_metadata(),
        )

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Call the producer, raising kafka-python's own fatal error when it is in one.

        kafka-python answers a call made in a fatal state with a generic ``KafkaError("...
        in an error state" / "Cannot perform send because ...")``; the error itself (e.g.
        ``ProducerFencedError``) is its transaction manager's ``last_error``.
        """
        from kafka.errors import KafkaError

        tm = self._p._transaction_manager
        try:
            return fn(*args, **kwargs)
        except KafkaError as exc:
            if type(exc) is KafkaError and tm.has_fatal_error() and tm.last_error is not None:
                raise tm.last_error from exc
            raise

    def _end(self, fn: Any) -> None:
        # While it bumps the epoch after a refused produce, kafka-python cannot start an
        # abort yet ("invalid transition"), so wait for the bump to finish first.
        tm = self._p._transaction_manager
        deadline = time.monotonic() + OP_TIMEOUT
        while tm.is_bumping_epoch() and time.monotonic() < deadline:
            time.sleep(0.05)
        self._call(fn)

    def commit(self) -> None:
        self._end(self._p.commit_transaction)

    def abort(self) -> None:
        self._end(self._p.abort_transaction)

    def close(self) -> None:
        self._p.close(timeout=2)


class _KafkaPythonGroupConsumer:
    def __init__(self, bootstrap: str, topic: str, group: str, assign: int | None) -> None:
        from kafka import KafkaConsumer, TopicPartition

        self.group = group
        self.native = KafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=group,
            isolation_level="read_committed",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=100,
        )
        if assign is None:
            self.native.subscribe([topic])
        else:
            self.native.assign([TopicPartition(topic, p) for p in range(assign)])
            self.rewind_to_committed()

    def poll(self, max_records: int, timeout: float) -> list[Rec]:
        batch = self.native.poll(timeout_ms=int(timeout * 1000), max_records=max_records)
        return [Rec(tp.topic, tp.partition, m.offset, m.key, m.value)
                for tp, msgs in batch.items() for m in msgs]

    def rewind_to_committed(self) -> None:
        for tp in self.native.assignment():
            offset = self.native.committed(tp)
            if offset is None:
                self.native.seek_to_beginning(tp)
            else:
                self.native.seek(tp, offset)

    def close(self) -> None:
        self.native.close(autocommit=False)


class KafkaPythonTxnClient:
    name = "kafka-python"

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap

    def create_topic(self, topic: str, partitions: int) -> None:
        PLAIN_CLIENTS["kafka-python"](self.bootstrap).create_topic(topic, partitions)

    def producer(self, transactional_id: str, *, timeout_ms: int = 10_000) -> TxnProducer:
        return _KafkaPythonProducer(self.bootstrap, transactional_id, timeout_ms)

    def plain_send(self, topic: str, partition: int, values: Sequence[bytes]) -> list[Rec]:
        from kafka import KafkaProducer

        p = KafkaProducer(bootstrap_servers=self.bootstrap, acks="all", linger_ms=1,
                          enable_idempotence=False)
        try:
            futures = [(v, p.send(topic, value=v, partition=partition)) for v in values]
            p.flush(timeout=OP_TIMEOUT)
            acks = []
            for v, fut in futures:
                meta = fut.get(timeout=OP_TIMEOUT)
                acks.append(Rec(topic, meta.partition, meta.offset, None, v))
        finally:
            p.close(timeout=2)
        return sorted(acks, key=lambda r: r.offset)

    def _consumer(self, committed: bool, group: str | None = None) -> Any:
        from kafka import KafkaConsumer

        return KafkaConsumer(
            bootstrap_servers=self.bootstrap,
            group_id=group,
            isolation_level="read_committed" if committed else "read_uncommitted",
            enable_auto_commit=False,
            fetch_max_wait_ms=100,
        )

    def read(
        self, topic: str, partitions: int, *, committed: bool, expect: int | None = None,
        timeout: float = 20.0, settle: float = 0.7,
    ) -> list[Rec]:
        from kafka import TopicPartition

        consumer = self._consumer(committed)
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)

        def poll(timeout: float) -> list[Rec]:
            batch = consumer.poll(timeout_ms=int(timeout * 1000), max_records=1000)
            return [Rec(tp.topic, tp.partition, m.offset, m.key, m.value)
                    for tp, msgs in batch.items() for m in msgs]

        try:
            return _read_loop(poll, expect, timeout, settle)
        finally:
            consumer.close(autocommit=False)

    def latest_offsets(self, topic: str, partitions: int, *, committed: bool) -> dict[int, int]:
        from kafka import TopicPartition

        consumer = self._consumer(committed)
        try:
            ends = consumer.end_offsets([TopicPartition(topic, p) for p in range(partitions)])
            return {tp.partition: offset for tp, offset in ends.items()}
        finally:
            consumer.close(autocommit=False)

    def group_consumer(
        self, topic: str, group: str, *, assign: int | None = None
    ) -> GroupConsumer:
        return _KafkaPythonGroupConsumer(self.bootstrap, topic, group, assign)

    def committed(self, group: str, topic: str, partitions: int) -> dict[int, int | None]:
        from kafka import TopicPartition

        # read_uncommitted: no require_stable, so pending transactional offsets do not block.
        consumer = self._consumer(False, group)
        try:
            return {p: consumer.committed(TopicPartition(topic, p)) for p in range(partitions)}
        finally:
            consumer.close(autocommit=False)

    def is_fenced(self, exc: BaseException) -> bool:
        from kafka.errors import ProducerFencedError

        return isinstance(exc, ProducerFencedError)

    def is_old_epoch(self, exc: BaseException) -> bool:
        from kafka.errors import InvalidProducerEpochError

        return isinstance(exc, InvalidProducerEpochError)

    def close(self) -> None:
        pass


# ---------------------------------------------------------------------------------------
# aiokafka: every coroutine runs on one loop in a background thread owned by the adapter.
class _Loop:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="aiokafka-loop",
                                        daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = OP_TIMEOUT + 5) -> T:
        fut: Future[T] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return fut.result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)


class _AioProducer:
    def __init__(self, loop: _Loop, bootstrap: str, transactional_id: str, timeout_ms: int) -> None:
        self._loop = loop
        self._bootstrap = bootstrap
        self._txn_id = transactional_id
        self._timeout_ms = timeout_ms
        self._p: Any = None
        self._futures: list[asyncio.Future[Any]] = []

    def init(self) -> None:
        from aiokafka import AIOKafkaProducer

        async def start() -> Any:
            p = AIOKafkaProducer(
                bootstrap_servers=self._bootstrap,
                transactional_id=self._txn_id,
                transaction_timeout_ms=self._timeout_ms,
                linger_ms=5,
                acks="all",
            )
            await p.start()
            return p

        self._p = self._loop.run(start())

    def begin(self) -> None:
        self._loop.run(self._p.begin_transaction())

    def send(self, topic: str, value: bytes, *, partition: int, key: bytes | None = None) -> None:
        async def send() -> asyncio.Future[Any]:
            fut: asyncio.Future[Any] = await self._p.send(topic, value=value, key=key,
                                                          partition=partition)
            return fut

        self._futures.append(self._loop.run(send()))

    def flush(self, timeout: float = OP_TIMEOUT) -> list[Rec]:
        futures, self._futures = self._futures, []

        async def wait() -> list[Rec]:
            async with asyncio.timeout(timeout):
                acks = []
                for fut in futures:
                    meta = await fut
                    acks.append(Rec(meta.topic, meta.partition, meta.offset, None, None))
                return acks

        return self._loop.run(wait(), timeout + 5)

    def send_offsets(self, offsets: Mapping[TP, int], consumer: GroupConsumer) -> None:
        from aiokafka import TopicPartition

        self._loop.run(self._p.send_offsets_to_transaction(
            {TopicPartition(t, p): o for (t, p), o in offsets.items()}, consumer.group))

    def _bounded(self, aw: Awaitable[T]) -> Coroutine[Any, Any, T]:
        async def run() -> T:
            async with asyncio.timeout(OP_TIMEOUT):
                return await aw

        return run()

    def commit(self) -> None:
        self._loop.run(self._bounded(self._p.commit_transaction()))

    def abort(self) -> None:
        self._loop.run(self._bounded(self._p.abort_transaction()))

    def close(self) -> None:
        if self._p is None:
            return

        async def stop() -> None:
            try:
                async with asyncio.timeout(5):
                    await self._p.stop()
            except Exception:  # a fenced producer may fail to stop cleanly; not under test
                pass

        self._loop.run(stop())


class _AioGroupConsumer:
    def __init__(
        self, loop: _Loop, bootstrap: str, topic: str, group: str, assign: int | None
    ) -> None:
        from aiokafka import AIOKafkaConsumer, TopicPartition

        self.group = group
        self._loop = loop

        async def start() -> Any:
            c = AIOKafkaConsumer(
                *([topic] if assign is None else []),
                bootstrap_servers=bootstrap,
                group_id=group,
                isolation_level="read_committed",
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                fetch_max_wait_ms=100,
            )
            await c.start()
            return c

        self.native = loop.run(start())
        if assign is not None:
            async def assign_all() -> None:
                self.native.assign([TopicPartition(topic, p) for p in range(assign)])

            loop.run(assign_all())
            self.rewind_to_committed()

    def poll(self, max_records: int, timeout: float) -> list[Rec]:
        batch = self._loop.run(self.native.getmany(timeout_ms=int(timeout * 1000),
                                                   max_records=max_records))
        return [Rec(tp.topic, tp.partition, m.offset, m.key, m.value)
                for tp, msgs in batch.items() for m in msgs]

    def rewind_to_committed(self) -> None:
        async def rewind() -> None:
            for tp in self.native.assignment():
                offset = await self.native.committed(tp)
                if offset is None:
                    await self.native.seek_to_beginning(tp)
                else:
                    self.native.seek(tp, offset)

        self._loop.run(rewind())

    def close(self) -> None:
        self._loop.run(self.native.stop())


class AioKafkaTxnClient:
    name = "aiokafka"

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self._loop = _Loop()

    def create_topic(self, topic: str, partitions: int) -> None:
        PLAIN_CLIENTS["aiokafka"](self.bootstrap).create_topic(topic, partitions)

    def producer(self, transactional_id: str, *, timeout_ms: int = 10_000) -> TxnProducer:
        return _AioProducer(self._loop, self.bootstrap, transactional_id, timeout_ms)

    def plain_send(self, topic: str, partition: int, values: Sequence[bytes]) -> list[Rec]:
        from aiokafka import AIOKafkaProducer

        async def run() -> list[Rec]:
            p = AIOKafkaProducer(bootstrap_servers=self.bootstrap, acks="all", linger_ms=1)
            await p.start()
            try:
                futures = [(v, await p.send(topic, value=v, partition=partition))
                           for v in values]
                acks = []
                for v, fut in futures:
                    meta = await fut
                    acks.append(Rec(topic, meta.partition, meta.offset, None, v))
                return acks
            finally:
                await p.stop()

        return sorted(self._loop.run(run()), key=lambda r: r.offset)

    async def _consumer(self, committed: bool, group: str | None = None) -> Any:
        from aiokafka import AIOKafkaConsumer

        c = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            group_id=group,
            isolation_level="read_committed" if committed else "read_uncommitted",
            enable_auto_commit=False,
            fetch_max_wait_ms=100,
        )
        await c.start()
        return c

    def read(
        self, topic: str, partitions: int, *, committed: bool, expect: int | None = None,
        timeout: float = 20.0, settle: float = 0.7,
    ) -> list[Rec]:
        from aiokafka import TopicPartition

        async def open_consumer() -> Any:
            c = await self._consumer(committed)
            tps = [TopicPartition(topic, p) for p in range(partitions)]
            c.assign(tps)
            await c.seek_to_beginning(*tps)
            return c

        consumer = self._loop.run(open_consumer())

        def poll(timeout: float) -> list[Rec]:
            batch = self._loop.run(consumer.getmany(timeout_ms=int(timeout * 1000),
                                                    max_records=1000))
            return [Rec(tp.topic, tp.partition, m.offset, m.key, m.value)
                    for tp, msgs in batch.items() for m in msgs]

        try:
            return _read_loop(poll, expect, timeout, settle)
        finally:
            self._loop.run(consumer.stop())

    def latest_offsets(self, topic: str, partitions: int, *, committed: bool) -> dict[int, int]:
        from aiokafka import TopicPartition

        async def run() -> dict[int, int]:
            c = await self._consumer(committed)
            try:
                ends = await c.end_offsets([TopicPartition(topic, p) for p in range(partitions)])
                return {tp.partition: offset for tp, offset in ends.items()}
            finally:
                await c.stop()

        return self._loop.run(run())

    def group_consumer(
        self, topic: str, group: str, *, assign: int | None = None
    ) -> GroupConsumer:
        return _AioGroupConsumer(self._loop, self.bootstrap, topic, group, assign)

    def committed(self, group: str, topic: str, partitions: int) -> dict[int, int | None]:
        from aiokafka import TopicPartition

        async def run() -> dict[int, int | None]:
            c = await self._consumer(False, group)
            try:
                return {p: await c.committed(TopicPartition(topic, p)) for p in range(partitions)}
            finally:
                await c.stop()

        return self._loop.run(run())

    def is_fenced(self, exc: BaseException) -> bool:
        from aiokafka.errors import ProducerFenced

        return isinstance(exc, ProducerFenced)

    def is_old_epoch(self, exc: BaseException) -> bool:
        from aiokafka.errors import InvalidProducerEpoch

        return isinstance(exc, InvalidProducerEpoch)

    def close(self) -> None:
        self._loop.close()


TXN_CLIENTS: dict[str, type[ConfluentTxnClient | KafkaPythonTxnClient | AioKafkaTxnClient]] = {
    c.name: c for c in (ConfluentTxnClient, KafkaPythonTxnClient, AioKafkaTxnClient)
}


def hang_main(argv: Sequence[str]) -> int:
    """Begin a transaction, send COUNT records, report their offsets and sleep until killed."""
    name, bootstrap, txn_id, topic, partition, count, timeout_ms = argv
    client = TXN_CLIENTS[name](bootstrap)
    producer = client.producer(txn_id, timeout_ms=int(timeout_ms))
    producer.init()
    producer.begin()
    for i in range(int(count)):
        producer.send(topic, f"hung-{i}".encode(), partition=int(partition))
    acks = producer.flush()
    print("ACKED " + " ".join(str(a.offset) for a in acks), flush=True)
    while True:
        time.sleep(60)


def ctp_main(argv: Sequence[str]) -> int:
    """One consume-transform-produce transaction, reporting each step on stdout.

    Consumes COUNT records of SRC (all its PARTITIONS, assigned, from GROUP's committed
    offsets), sends ``out:<value>`` to DST, prints ``ACKED p:o ...``; with PAUSE=1 waits for
    a line on stdin; sends the offsets (``OFFSETS``) and commits (``COMMITTED``). On an error
    prints ``ERROR <exc>``, then aborts (``ABORTED`` or ``ABORT-FAILED <exc>``).
    """
    name, bootstrap, txn_id, group, src, partitions, dst, count, pause = argv

    def say(line: str) -> None:
        print(line, flush=True)

    client = TXN_CLIENTS[name](bootstrap)
    consumer = client.group_consumer(src, group, assign=int(partitions))
    producer = client.producer(txn_id, timeout_ms=60_000)
    producer.init()
    records = poll_until(consumer, int(count))
    say(f"CONSUMED {len(records)}")
    try:
        producer.begin()
        acks = transform(producer, dst, records)
        say("ACKED " + " ".join(f"{a.partition}:{a.offset}" for a in acks))
        if pause == "1":
            sys.stdin.readline()
        producer.send_offsets(processed_offsets(records), consumer)
        say("OFFSETS")
        producer.commit()
        say("COMMITTED")
    except Exception as exc:
        say(f"ERROR {exc!r}")
        try:
            producer.abort()
            say("ABORTED")
        except Exception as again:
            say(f"ABORT-FAILED {again!r}")
    producer.close()
    consumer.close()
    client.close()
    return 0


USAGE = f"""usage:
  {sys.argv[0]} hang CLIENT BOOTSTRAP TXN_ID TOPIC PARTITION COUNT TIMEOUT_MS
  {sys.argv[0]} ctp CLIENT BOOTSTRAP TXN_ID GROUP SRC PARTITIONS DST COUNT PAUSE"""

if __name__ == "__main__":
    commands = {"hang": hang_main, "ctp": ctp_main}
    if len(sys.argv) < 2 or sys.argv[1] not in commands:
        sys.exit(USAGE)
    sys.exit(commands[sys.argv[1]](sys.argv[2:]))
