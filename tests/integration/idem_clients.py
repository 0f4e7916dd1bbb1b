"""Idempotent producers over the three real Kafka clients, a direct log reader and the
exactly-once checks shared by the idempotence integration tests.

    records = make_records(3000, topics=[topic], partitions=4)
    with ProducerRun("aiokafka", proxy.bootstrap, records) as run:
        run.wait_acked(1000)              # the producer keeps going in its own thread
        ...                               # faults: drop responses, cut connections, kill -9
        outcome = run.join(90)            # every acknowledgement and every error
    log = read_log(broker.bootstrap, [topic], 4)   # straight from the broker, not the proxy
    assert not check_exactly_once(records, outcome, log).problems()

Each record carries its global send index and its per-key sequence number (in the value
and in headers) and is sent to an explicit topic and partition, so a read of the log can say
exactly what is missing, duplicated or out of order. ``read_log`` fetches with raw Fetch
requests on the broker's own port (the broker advertises the proxy, so a normal consumer
would go through it) and decodes the batches itself, keeping each record's producer id,
epoch and sequence. ``broker_starts`` reads what each start of the broker logged about
producer state (snapshots loaded, log tail replayed, duplicates answered). Nothing here
fakes the broker: every call goes over TCP to a real ``oncelog serve``.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode
from rawkafka import RawConnection

from oncelog.client import Admin, TopicPartition
from oncelog.protocol import versions
from oncelog.protocol.build import make, request_module
from oncelog.records.codec import iter_records

TP = tuple[str, int]

# Generous: a client must retry through a broker restart, never give up on a record.
DELIVERY_TIMEOUT_MS = 120_000
# Short reconnect backoffs, so a client notices the broker is back within a second.
RECONNECT_BACKOFF_MAX_MS = 500
# Small batches: many Produce requests (so many chances for faults), and no request larger
# than about PARTITIONS * BATCH_BYTES, so a proxy cutting connections every few tens of KiB
# still lets every request through on some connection.
BATCH_BYTES = 4096


@dataclass(frozen=True)
class OutRecord:
    """One record to send: ``index`` is the global send order, ``key_seq`` the per-key one."""

    index: int
    topic: str
    partition: int
    key: bytes
    key_seq: int
    value: bytes

    @property
    def tp(self) -> TP:
        return (self.topic, self.partition)

    @property
    def headers(self) -> list[tuple[str, str | bytes | None]]:
        return [("i", str(self.index).encode()), ("kseq", str(self.key_seq).encode())]


def make_records(
    n: int, *, topics: Sequence[str], partitions: int, keys: int = 32, value_size: int = 100
) -> list[OutRecord]:
    """``n`` keyed records; key ``k`` always goes to the same topic and partition:
    ``topics[k % len(topics)]``, partition ``k // len(topics) % partitions``."""
    key_seqs: dict[int, int] = defaultdict(int)
    out = []
    for i in range(n):
        k = (i * 7) % keys
        seq = key_seqs[k]
        key_seqs[k] += 1
        head = f"{i:07d}|{seq:06d}|".encode()
        out.append(
            OutRecord(i, topics[k % len(topics)], k // len(topics) % partitions,
                      f"key-{k:03d}".encode(), seq,
                      head + b"x" * max(0, value_size - len(head)))
        )
    return out


def parse_value(value: bytes | None) -> tuple[int, int]:
    """(index, key_seq) from a value written by ``make_records``."""
    assert value is not None, "a record without a value"
    index, key_seq, _ = value.split(b"|", 2)
    return int(index), int(key_seq)


@dataclass(frozen=True)
class Outcome:
    """What a producer run ended with."""

    acked: Mapping[int, tuple[str, int, int]]
    """Send index -> (topic, partition, offset) from the client's acknowledgement."""
    errors: Sequence[str]
    """Every delivery error and client-level (fatal) error, as text."""
    sent: int
    elapsed: float


class ProducerRun:
    """One client's idempotent producer sending ``records`` in a background thread.

    It sends in chunks of ``chunk`` records with ``pause`` seconds between them (so a test
    can inject faults mid-stream; ``hold()`` stops it sending at the next chunk boundary,
    still serving the client's callbacks, until ``release()``), then flushes until
    everything is acknowledged or failed or ``DELIVERY_TIMEOUT_MS`` passed. ``acked()``
    and ``wait_acked()`` follow its progress.
    """

    def __init__(
        self,
        client: str,
        bootstrap: str,
        records: Sequence[OutRecord],
        *,
        chunk: int = 50,
        pause: float = 0.02,
    ) -> None:
        if client not in _RUNNERS:
            raise ValueError(f"unknown client {client!r}; one of {sorted(_RUNNERS)}")
        self.client = client
        self.bootstrap = bootstrap
        self.records = list(records)
        self.chunk = chunk
        self.pause = pause
        self._lock = threading.Lock()
        self._acked: dict[int, tuple[str, int, int]] = {}
        self._errors: list[str] = []
        self._sent = 0
        self._thread: threading.Thread | None = None
        self._started = 0.0
        self._elapsed = 0.0
        self._stop = threading.Event()
        self._held = threading.Event()

    # -- called by the client loops (any thread) -----------------------------------------
    def on_ack(self, index: int, topic: str, partition: int, offset: int) -> None:
        with self._lock:
            if index in self._acked:
                self._errors.append(f"record {index} acknowledged twice")
            self._acked[index] = (topic, partition, offset)

    def on_error(self, what: str) -> None:
        with self._lock:
            self._errors.append(what)

    def on_sent(self) -> None:
        with self._lock:
            self._sent += 1

    def pause_after(self, position: int) -> float:
        """Seconds to wait after sending the record at ``position`` (0 between chunks)."""
        return self.pause if (position + 1) % self.chunk == 0 else 0.0

    def holding(self) -> bool:
        """True while the test holds the sending (the runner then only serves callbacks)."""
        return self._held.is_set() and not self._stop.is_set()

    def stopping(self) -> bool:
        return self._stop.is_set()

    def flush_deadline(self) -> float:
        return time.monotonic() + DELIVERY_TIMEOUT_MS / 1000 + 10

    # -- called by the test ----------------------------------------------------------------
    def start(self) -> ProducerRun:
        self._started = time.monotonic()
        self._thread = threading.Thread(
            target=self._run, name=f"idem-producer-{self.client}", daemon=True
        )
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            _RUNNERS[self.client](self)
        except BaseException as exc:  # reported by join()
            self.on_error(f"producer thread crashed: {type(exc).__name__}: {exc}")
        finally:
            self._elapsed = time.monotonic() - self._started

    def acked(self) -> int:
        with self._lock:
            return len(self._acked)

    def acked_by_partition(self) -> dict[TP, int]:
        """How many records each partition has acknowledged so far."""
        with self._lock:
            acked = list(self._acked.values())
        out: dict[TP, int] = defaultdict(int)
        for topic, partition, _ in acked:
            out[(topic, partition)] += 1
        return dict(out)

    def sent(self) -> int:
        with self._lock:
            return self._sent

    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def wait_acked(self, count: int, timeout: float = 60.0) -> None:
        """Block until ``count`` records are acknowledged; AssertionError after ``timeout``
        or if the producer ended first."""
        deadline = time.monotonic() + timeout
        while self.acked() < count:
            if not self.running():
                raise AssertionError(
                    f"{self.client} producer ended with {self.acked()} acks (<{count}): "
                    f"{self._errors[:5]}"
                )
            if time.monotonic() >= deadline:
                raise AssertionError(
                    f"{self.client}: only {self.acked()} of {count} records acknowledged "
                    f"after {timeout:.0f}s; errors {self._errors[:5]}"
                )
            time.sleep(0.005)

    def hold(self) -> None:
        """Stop sending at the next chunk boundary (the test's own steps, however slow the
        machine, then cannot let the producer run out of records)."""
        self._held.set()

    def release(self) -> None:
        self._held.clear()

    def stop(self) -> None:
        """Give up: stop sending and waiting (a failed test must not leave it retrying)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)

    def __enter__(self) -> ProducerRun:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def join(self, timeout: float) -> Outcome:
        assert self._thread is not None, "start() first"
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise AssertionError(
                f"{self.client} producer still running after {timeout:.0f}s "
                f"({self.acked()} of {len(self.records)} acknowledged)"
            )
        with self._lock:
            return Outcome(dict(self._acked), list(self._errors), self._sent, self._elapsed)


# ---------------------------------------------------------------------------------------
# confluent-kafka (librdkafka)
def _run_confluent(run: ProducerRun) -> None:
    from confluent_kafka import KafkaError, Producer

    def on_error(err: KafkaError) -> None:
        # Transport errors are expected (the proxy cuts connections); fatal ones are not.
        if err.fatal():
            run.on_error(f"fatal: {err}")

    producer = Producer(
        {
            "bootstrap.servers": run.bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "batch.size": BATCH_BYTES,
            "message.timeout.ms": DELIVERY_TIMEOUT_MS,
            "reconnect.backoff.ms": 50,
            "reconnect.backoff.max.ms": RECONNECT_BACKOFF_MAX_MS,
            "retry.backoff.ms": 50,
            "error_cb": on_error,
        }
    )

    def report(index: int) -> Callable[[Any, Any], None]:
        def on_delivery(err: Any, msg: Any) -> None:
            if err is not None:
                run.on_error(f"record {index}: {err}")
            else:
                run.on_ack(index, msg.topic(), msg.partition(), msg.offset())

        return on_delivery

    for position, rec in enumerate(run.records):
        if run.stopping():
            break
        while True:
            try:
                producer.produce(
                    rec.topic, key=rec.key, value=rec.value, partition=rec.partition,
                    headers=rec.headers, on_delivery=report(rec.index),
                )
                break
            except BufferError:
                producer.poll(0.05)
        run.on_sent()
        producer.poll(0)
        if pause := run.pause_after(position):
            time.sleep(pause)
            while run.holding():
                producer.poll(0.05)
    deadline = run.flush_deadline()
    while len(producer) > 0 and time.monotonic() < deadline and not run.stopping():
        producer.flush(1.0)
    if len(producer) > 0:
        run.on_error(f"{len(producer)} records still queued after the delivery timeout")


# ---------------------------------------------------------------------------------------
# kafka-python
def _run_kafka_python(run: ProducerRun) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=run.bootstrap,
        enable_idempotence=True,
        acks="all",
        linger_ms=5,
        batch_size=BATCH_BYTES,
        delivery_timeout_ms=DELIVERY_TIMEOUT_MS,
        request_timeout_ms=30_000,
        retry_backoff_ms=50,
        reconnect_backoff_ms=50,
        reconnect_backoff_max_ms=RECONNECT_BACKOFF_MAX_MS,
        max_block_ms=DELIVERY_TIMEOUT_MS,
    )
    from kafka.errors import KafkaTimeoutError

    futures = []
    try:
        for position, rec in enumerate(run.records):
            if run.stopping():
                break
            future = producer.send(
                rec.topic, key=rec.key, value=rec.value, partition=rec.partition,
                headers=rec.headers,
            )

            def ok(meta: Any, index: int = rec.index) -> None:
                run.on_ack(index, meta.topic, meta.partition, meta.offset)

            def failed(exc: BaseException, index: int = rec.index) -> None:
                run.on_error(f"record {index}: {type(exc).__name__}: {exc}")

            future.add_callback(ok)
            future.add_errback(failed)
            futures.append(future)
            run.on_sent()
            if pause := run.pause_after(position):
                time.sleep(pause)
                while run.holding():
                    time.sleep(0.05)
        deadline = run.flush_deadline()
        while time.monotonic() < deadline and not run.stopping():
            try:
                producer.flush(timeout=1.0)
                break
            except KafkaTimeoutError:
                continue
        if not all(f.is_done for f in futures):
            run.on_error(f"{sum(not f.is_done for f in futures)} records never completed")
    finally:
        producer.close(timeout=1 if run.stopping() else 10)


# ---------------------------------------------------------------------------------------
# aiokafka
def _run_aiokafka(run: ProducerRun) -> None:
    from aiokafka import AIOKafkaProducer

    async def main() -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=run.bootstrap,
            enable_idempotence=True,
            acks="all",
            linger_ms=5,
            max_batch_size=BATCH_BYTES,
            request_timeout_ms=30_000,
            retry_backoff_ms=50,
        )
        await producer.start()
        futures: list[asyncio.Future[Any]] = []
        try:
            for position, rec in enumerate(run.records):
                if run.stopping():
                    break
                future = await producer.send(
                    rec.topic, key=rec.key, value=rec.value, partition=rec.partition,
                    headers=rec.headers,
                )

                def done(f: asyncio.Future[Any], index: int = rec.index) -> None:
                    if f.cancelled():
                        run.on_error(f"record {index}: cancelled")
                    elif (exc := f.exception()) is not None:
                        run.on_error(f"record {index}: {type(exc).__name__}: {exc}")
                    else:
                        meta = f.result()
                        run.on_ack(index, meta.topic, meta.partition, meta.offset)

                future.add_done_callback(done)
                futures.append(future)
                run.on_sent()
                if pause := run.pause_after(position):
                    await asyncio.sleep(pause)
                    while run.holding():
                        await asyncio.sleep(0.05)
            deadline = run.flush_deadline()
            pending = set(futures)
            while pending and time.monotonic() < deadline and not run.stopping():
                _, pending = await asyncio.wait(pending, timeout=1.0)
            await asyncio.sleep(0)  # let the done callbacks run
            if pending:
                run.on_error(f"{len(pending)} records never completed")
        finally:
            async with asyncio.timeout(1 if run.stopping() else 10):
                await producer.stop()

    asyncio.run(main())


_RUNNERS: dict[str, Callable[[ProducerRun], None]] = {
    "confluent": _run_confluent,
    "kafka-python": _run_kafka_python,
    "aiokafka": _run_aiokafka,
}
CLIENT_NAMES = tuple(_RUNNERS)


# ---------------------------------------------------------------------------------------
# Reading the log straight from the broker
@dataclass(frozen=True)
class LogRecord:
    """One record as stored, with the batch fields idempotence is about."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    producer_id: int
    producer_epoch: int
    sequence: int  # base sequence + offset delta; -1 without a producer id
    batch_offset: int  # the base offset of the batch holding it


FETCH_VERSION = 11  # the last version that names topics (not topic ids)


def read_log(
    bootstrap: str, topics: Sequence[str], partitions: int, *, timeout: float = 30.0
) -> dict[TP, list[LogRecord]]:
    """Every record of every partition up to its high watermark (read_uncommitted), read
    with raw Fetch requests on ``bootstrap`` (the broker's own port)."""
    conn = RawConnection(bootstrap, timeout=timeout)
    try:
        return {
            (t, p): read_partition(conn, t, p, timeout=timeout)
            for t in topics for p in range(partitions)
        }
    finally:
        conn.close()


def read_partition(
    conn: RawConnection, topic: str, partition: int, start: int = 0, *, timeout: float = 30.0
) -> list[LogRecord]:
    """The records of one partition from ``start`` to its high watermark."""
    mod = request_module(versions.FETCH, FETCH_VERSION)
    out: list[LogRecord] = []
    position, high_watermark = start, None
    deadline = time.monotonic() + timeout
    while high_watermark is None or position < high_watermark:
        assert time.monotonic() < deadline, f"{topic}-{partition}: read stuck at {position}"
        request = make(
            mod.FetchRequest, replica_id=-1, max_wait=0, min_bytes=0,
            max_bytes=8 << 20, isolation_level=0, session_id=0, session_epoch=-1,
            topics=(make(mod.FetchTopic, topic=topic, partitions=(
                make(mod.FetchPartition, partition=partition, current_leader_epoch=-1,
                     fetch_offset=position, log_start_offset=-1,
                     partition_max_bytes=4 << 20),
            )),),
            forgotten_topics_data=(), rack_id="",
        )
        data = conn.request(request).responses[0].partitions[0]
        assert data.error_code == ErrorCode.none, f"{topic}-{partition}: {data.error_code!r}"
        high_watermark = int(data.high_watermark)
        for header, records in iter_records(bytes(data.records or b"")):
            for r in records:
                if r.offset < position:
                    continue
                sequence = (
                    header.base_sequence + (r.offset - header.base_offset)
                    if header.producer_id >= 0 else -1
                )
                out.append(LogRecord(
                    topic, partition, r.offset, r.key, r.value, tuple(r.headers),
                    header.producer_id, header.producer_epoch, sequence, header.base_offset,
                ))
            position = max(position, header.next_offset)
    return out


def end_offsets(bootstrap: str, tps: Iterable[TP]) -> dict[TP, int]:
    """Each partition's high watermark, by a raw ListOffsets (latest) on ``bootstrap``."""
    mod = request_module(versions.LIST_OFFSETS, 2)
    by_topic: dict[str, list[int]] = defaultdict(list)
    for topic, p in tps:
        by_topic[topic].append(p)
    request = make(
        mod.ListOffsetsRequest, replica_id=-1, isolation_level=0,
        topics=tuple(
            make(mod.ListOffsetsTopic, name=topic, partitions=tuple(
                make(mod.ListOffsetsPartition, partition_index=p, timestamp=-1) for p in parts
            ))
            for topic, parts in by_topic.items()
        ),
    )
    conn = RawConnection(bootstrap)
    try:
        response = conn.request(request)
    finally:
        conn.close()
    out = {}
    for topic_response in response.topics:
        for part in topic_response.partitions:
            assert part.error_code == ErrorCode.none, (topic_response.name, part)
            out[(str(topic_response.name), int(part.partition_index))] = int(part.offset)
    return out


@dataclass(frozen=True)
class ProducerView:
    """What DescribeProducers says about one producer on one partition."""

    producer_id: int
    producer_epoch: int
    last_sequence: int


def describe_producers(bootstrap: str, tps: Iterable[TP]) -> dict[TP, list[ProducerView]]:
    """DescribeProducers for each partition, with oncelog's own admin client."""
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        states = admin.describe_producers(TopicPartition(t, p) for t, p in tps)
    return {
        (tp.topic, tp.partition): [
            ProducerView(s.producer_id, s.producer_epoch, s.last_sequence) for s in producers
        ]
        for tp, producers in states.items()
    }


# ---------------------------------------------------------------------------------------
# The checks
@dataclass
class Report:
    """Problems found by ``check_exactly_once``, by kind (empty lists: none)."""

    duplicates: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    misordered: list[str] = field(default_factory=list)
    wrong_ack: list[str] = field(default_factory=list)
    sequences: list[str] = field(default_factory=list)

    def problems(self) -> dict[str, list[str]]:
        return {k: v for k, v in vars(self).items() if v}


def check_exactly_once(
    records: Sequence[OutRecord], outcome: Outcome, log: Mapping[TP, Sequence[LogRecord]]
) -> Report:
    """Compare what was sent and acknowledged with what the log holds.

    - every record appears exactly once, in the partition it was sent to (a record never
      acknowledged may be missing only if the producer reported an error for it);
    - per partition, offset order is send order (send index and per-key sequence grow);
    - each acknowledgement names the offset where the record is (a retried duplicate is
      answered with the original offset);
    - per producer id and epoch, the sequences in a partition run 0, 1, 2, ... without a
      repeat or a gap (invariant 2 as the log stores it).
    """
    report = Report()
    by_index = {r.index: r for r in records}
    where: dict[int, tuple[str, int, int]] = {}
    for (topic, p), entries in log.items():
        last_index = -1
        last_key_seq: dict[bytes, int] = {}
        seqs: dict[tuple[int, int], int] = {}
        for e in entries:
            at = f"{topic}-{p}@{e.offset}"
            index, key_seq = parse_value(e.value)
            rec = by_index.get(index)
            if rec is None or rec.key != e.key or rec.key_seq != key_seq:
                report.duplicates.append(f"{at}: a record that was never sent")
                continue
            if dict(e.headers).get("i") != str(index).encode():
                report.wrong_ack.append(f"{at}: header i={dict(e.headers)}")
            if index in where:
                t0, p0, o0 = where[index]
                report.duplicates.append(f"record {index} at {t0}-{p0}@{o0} and {at}")
                continue
            where[index] = (topic, p, e.offset)
            if rec.tp != (topic, p):
                report.misordered.append(f"record {index} in {at}, sent to {rec.tp}")
            if index < last_index:
                report.misordered.append(f"{at}: record {index} after {last_index}")
            last_index = max(last_index, index)
            if key_seq <= last_key_seq.get(rec.key, -1):
                report.misordered.append(
                    f"{at}: {rec.key!r} seq {key_seq} after {last_key_seq[rec.key]}"
                )
            last_key_seq[rec.key] = key_seq
            producer = (e.producer_id, e.producer_epoch)
            expected_seq = seqs.get(producer, 0)
            if e.producer_id < 0:
                report.sequences.append(f"{at}: written without a producer id")
            elif e.sequence != expected_seq:
                report.sequences.append(
                    f"{at}: producer {producer} sequence {e.sequence}, expected {expected_seq}"
                )
            seqs[producer] = e.sequence + 1
    failed = {int(s.split()[1].rstrip(":")) for s in outcome.errors if s.startswith("record ")}
    for rec in records:
        if rec.index not in where and (rec.index in outcome.acked or rec.index not in failed):
            state = "acknowledged" if rec.index in outcome.acked else "not failed"
            report.missing.append(f"record {rec.index} ({state}) not in {rec.tp}")
    for index, ack in outcome.acked.items():
        if index in where and where[index] != ack:
            report.wrong_ack.append(f"record {index} acked at {ack}, stored at {where[index]}")
    return report


def last_records(log: Mapping[TP, Sequence[LogRecord]]) -> dict[TP, dict[int, LogRecord]]:
    """Per partition, per producer id: its last record in the log."""
    out: dict[TP, dict[int, LogRecord]] = {}
    for tp, entries in log.items():
        out[tp] = {}
        for e in entries:
            if e.producer_id >= 0:
                out[tp][e.producer_id] = e
    return out


def check_described(
    log: Mapping[TP, Sequence[LogRecord]], described: Mapping[TP, Sequence[ProducerView]]
) -> list[str]:
    """Problems with DescribeProducers: each partition must list every producer id found in
    its log, with the epoch and the sequence of its last record."""
    problems = []
    for tp, last in last_records(log).items():
        if not last:
            problems.append(f"{tp}: no idempotent records in the log")
        views = {v.producer_id: v for v in described.get(tp, ())}
        for producer_id, record in last.items():
            view = views.get(producer_id)
            if view is None:
                problems.append(f"{tp}: producer {producer_id} not described: {views}")
            elif (view.producer_epoch, view.last_sequence) != (
                record.producer_epoch, record.sequence
            ):
                problems.append(
                    f"{tp}: producer {producer_id} described as epoch {view.producer_epoch} "
                    f"last sequence {view.last_sequence}; its last record has epoch "
                    f"{record.producer_epoch} sequence {record.sequence}"
                )
    return problems


# ---------------------------------------------------------------------------------------
# The broker's log
@dataclass(frozen=True)
class Duplicate:
    """A ``duplicate batch`` line: the broker answered a retry with the original offsets."""

    partition: str  # "<topic>-<index>", the partition directory's name
    first_offset: int
    last_offset: int


_DUPLICATE = re.compile(
    r"duplicate batch partition=(?P<partition>\S+) "
    r".*original_offsets=(?P<first>\d+)\.\.(?P<last>\d+)"
)
_SNAPSHOT = re.compile(
    r"loaded producer snapshot partition=(?P<partition>\S+) offset=(?P<offset>\d+)"
)
_REBUILT = re.compile(
    r"/(?P<partition>[^/\s]+): producer state rebuilt from offset \d+ \((?P<n>\d+) batches\)"
)


@dataclass(frozen=True)
class StartLog:
    """What one broker start logged about producer state."""

    snapshots: Mapping[str, int]
    """Partition -> offset of the snapshot it loaded."""
    replayed: Mapping[str, int]
    """Partition -> batches replayed from the log tail after that snapshot."""
    duplicates: Sequence[Duplicate]


def broker_starts(text: str) -> list[StartLog]:
    """A ``BrokerProcess`` log split by start (index 0: the first start)."""
    out = []
    for part in text.split("===== start #")[1:]:
        out.append(StartLog(
            {m["partition"]: int(m["offset"]) for m in _SNAPSHOT.finditer(part)},
            {m["partition"]: int(m["n"]) for m in _REBUILT.finditer(part)},
            [Duplicate(m["partition"], int(m["first"]), int(m["last"]))
             for m in _DUPLICATE.finditer(part)],
        ))
    return out


def summary(items: Iterable[str], most: int = 8) -> str:
    items = list(items)
    more = f" ... and {len(items) - most} more" if len(items) > most else ""
    return "; ".join(items[:most]) + more
