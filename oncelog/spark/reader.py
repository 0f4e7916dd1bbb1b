"""The source: a streaming reader (micro-batches bounded by the LSO) and a batch reader.

The driver plans: it discovers partitions (``subscribe`` / ``subscribePattern`` /
``assign``), asks the broker for each partition's earliest offset and its end (the LSO under
read_committed, the high watermark otherwise), applies read limits, and hands Spark one
``OffsetRange`` per partition and micro-batch. The executors read: ``read_range`` seeks to
the range's start and polls until the consumer's position reaches its end. The range counts
offsets, not records: under read_committed the consumer skips aborted transactions and
control records, and its position still advances past them, so a range may yield fewer rows
than its size (or none).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from typing import Any

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from oncelog.client import Admin, Consumer, TopicPartition
from oncelog.client.types import Message
from oncelog.spark import offsets as off
from oncelog.spark.offsets import OffsetRange, Offsets, TopicPartitionKey
from oncelog.spark.options import EARLIEST, LATEST, SourceOptions
from oncelog.spark.schema import ArrowColumns

log = logging.getLogger(__name__)

__all__ = ["OncelogBatchReader", "OncelogStreamReader", "RangePartition", "read_range"]

ROWS_PER_ARROW_BATCH = 8192
# How long an executor waits for offsets that the driver saw below the end: Spark's Kafka
# source calls this kafkaConsumer.pollTimeoutMs and waits 2 minutes.
DEFAULT_POLL_TIMEOUT_MS = 120_000


class DataLossError(RuntimeError):
    """Offsets the query was to read are gone and ``failOnDataLoss`` is true."""


class RangePartition(InputPartition):
    """A Spark input partition: one offset range."""

    def __init__(self, value: OffsetRange) -> None:
        super().__init__(value)
        self.range = value


def _consumer_config(options: SourceOptions) -> dict[str, Any]:
    config: dict[str, Any] = dict(options.kafka)
    config.update({"enable.auto.commit": False, "auto.offset.reset": "earliest"})
    return config


def read_range(
    options: SourceOptions, rng: OffsetRange, *, poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS
) -> Iterator[Any]:
    """Arrow record batches of the records in ``rng`` (run on an executor)."""
    if rng.size <= 0:
        return
    columns = ArrowColumns(options.include_headers)
    tp = TopicPartition(rng.topic, rng.partition)
    consumer = Consumer(_consumer_config(options))
    try:
        consumer.assign([tp])
        start = rng.start
        earliest = consumer.beginning_offsets([tp]).get(tp, 0)
        if earliest > start:
            loss = off.DataLoss(rng.topic, rng.partition, start, earliest)
            if options.fail_on_data_loss:
                raise DataLossError(f"{loss}; set failOnDataLoss=false to skip them")
            log.warning("data loss, skipping: %s", loss)
            start = earliest
        if start >= rng.end:
            return
        consumer.seek(tp, start)
        pending: list[Message] = []
        position = start
        deadline = time.monotonic() + poll_timeout_ms / 1000
        while position < rng.end:
            got = consumer.poll(1.0)
            for message in got:
                if message.offset >= rng.end:
                    position = rng.end
                    break
                pending.append(message)
            else:
                position = max(position, consumer.position(tp))
            if got:
                deadline = time.monotonic() + poll_timeout_ms / 1000
            elif time.monotonic() > deadline:
                problem = (
                    f"{tp}: offsets {position}..{rng.end - 1} were below the end when the batch "
                    f"was planned but could not be read in {poll_timeout_ms} ms"
                )
                if options.fail_on_data_loss:
                    raise DataLossError(problem)
                log.warning("data loss, skipping: %s", problem)
                break
            while len(pending) >= ROWS_PER_ARROW_BATCH:
                yield columns.batch(pending[:ROWS_PER_ARROW_BATCH])
                del pending[:ROWS_PER_ARROW_BATCH]
        if pending:
            yield columns.batch(pending)
    finally:
        consumer.close()


class _Planner:
    """The driver's view of the broker: partitions and their offsets. Not picklable state:
    clients are opened on first use and dropped when pickled."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._admin: Admin | None = None
        self._consumer: Consumer | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options, "_admin": None, "_consumer": None}

    def _clients(self) -> tuple[Admin, Consumer]:
        if self._admin is None:
            self._admin = Admin(dict(self.options.kafka))
        if self._consumer is None:
            self._consumer = Consumer(_consumer_config(self.options))
        return self._admin, self._consumer

    def partitions(self) -> list[TopicPartitionKey]:
        if self.options.assign:
            return list(self.options.assign)
        admin, _ = self._clients()
        topics = admin.list_topics()
        return sorted(
            (topic, p)
            for topic, count in topics.items()
            if self.options.matches(topic)
            for p in range(count)
        )

    def earliest(self, partitions: list[TopicPartitionKey]) -> Offsets:
        if not partitions:
            return {}
        _, consumer = self._clients()
        got = consumer.beginning_offsets([TopicPartition(*tp) for tp in partitions])
        return {(tp.topic, tp.partition): offset for tp, offset in got.items()}

    def latest(self, partitions: list[TopicPartitionKey]) -> Offsets:
        """The end of each partition: the LSO under read_committed."""
        if not partitions:
            return {}
        _, consumer = self._clients()
        got = consumer.end_offsets([TopicPartition(*tp) for tp in partitions])
        return {(tp.topic, tp.partition): offset for tp, offset in got.items()}

    def close(self) -> None:
        for client in (self._consumer, self._admin):
            if client is not None:
                try:
                    client.close()
                except Exception:  # closing is best effort
                    log.exception("closing a client")
        self._admin = self._consumer = None


class OncelogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of offset ranges, each ending at most at the partitions' LSO."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.planner = _Planner(options)
        self._available_now: Offsets | None = None
        self._last_trigger = time.monotonic()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["planner"] = _Planner(self.options)
        return state

    # ------------------------------------------------------------------ planning (driver)

    def initialOffset(self) -> dict[str, Any]:
        partitions = self.planner.partitions()
        earliest = self.planner.earliest(partitions)
        latest = self.planner.latest(partitions)
        start = off.resolve(self.options.starting, partitions, earliest, latest, default=LATEST)
        log.info("initial offsets %s", start)
        return off.to_json(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        if self.options.min_offsets_per_trigger is not None:
            return ReadMinRows(self.options.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        partitions = self.planner.partitions()
        self._available_now = self.planner.latest(partitions)
        log.info("Trigger.AvailableNow: reading up to %s", self._available_now)

    def _current(self, start: Offsets) -> tuple[Offsets, Offsets]:
        """The start widened by partitions new since (from their earliest offset; Spark's
        Kafka source does the same), and the latest offsets of all."""
        partitions = self.planner.partitions()
        if self._available_now is not None:
            partitions = [tp for tp in partitions if tp in self._available_now]
        new = [tp for tp in partitions if tp not in start]
        widened = dict(start)
        widened.update(self.planner.earliest(new))
        gone = [tp for tp in start if tp not in set(partitions)]
        if gone and self._available_now is None:
            losses = off.data_loss({tp: start[tp] for tp in gone}, {})
            self._data_loss(losses)
        for tp in gone:
            widened.pop(tp, None)
        latest = self.planner.latest(partitions)
        if self._available_now is not None:
            latest = {tp: min(o, self._available_now[tp]) for tp, o in latest.items()}
        shrunk = [tp for tp in latest if latest[tp] < widened[tp]]
        if shrunk:
            earliest = self.planner.earliest(shrunk)
            self._data_loss(
                [off.DataLoss(tp[0], tp[1], widened[tp], earliest.get(tp)) for tp in shrunk]
            )
            for tp in shrunk:  # the partition was recreated: start again from its beginning
                widened[tp] = min(latest[tp], earliest.get(tp, 0))
        return widened, latest

    def _data_loss(self, losses: list[off.DataLoss]) -> None:
        if not losses:
            return
        text = "; ".join(str(loss) for loss in losses)
        if self.options.fail_on_data_loss:
            raise DataLossError(f"{text}; set failOnDataLoss=false to go on without them")
        log.warning("data loss, going on: %s", text)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin, latest = self._current(off.from_json(start))
        end = self.end_for(begin, latest, limit)
        if end != begin:
            self._last_trigger = time.monotonic()
        return off.to_json(end)

    def end_for(self, begin: Offsets, latest: Offsets, limit: ReadLimit) -> Offsets:
        """The micro-batch's end offsets for ``limit`` (see getDefaultReadLimit)."""
        waiting = off.available(begin, latest)
        minimum = self.options.min_offsets_per_trigger
        if isinstance(limit, ReadMinRows):
            minimum = limit.min_rows
        elif isinstance(limit, ReadAllAvailable):
            minimum = None
        if self._available_now is not None:
            minimum = None  # waiting for more would never end the run
        if minimum is not None and waiting < minimum:
            waited_ms = (time.monotonic() - self._last_trigger) * 1000
            if waited_ms < self.options.max_trigger_delay_ms:
                return dict(begin)
        if isinstance(limit, ReadMaxRows) and waiting > limit.max_rows:
            return off.rate_limit(begin, latest, limit.max_rows)
        return dict(latest)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        partitions = self.planner.partitions()
        return off.to_json(self.planner.latest(partitions)) if partitions else None

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        begin, until = off.from_json(start), off.from_json(end)
        new = [tp for tp in until if tp not in begin]
        if new:
            begin.update(self.planner.earliest(new))
        ranges = off.plan_ranges(begin, until, self.options.min_partitions)
        return [RangePartition(r) for r in ranges]

    # ------------------------------------------------------------------ reading (executors)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, RangePartition)
        return read_range(self.options, partition.range)

    def commit(self, end: dict[str, Any]) -> None:
        log.debug("source committed up to %s", end)

    def stop(self) -> None:
        self.planner.close()


class OncelogBatchReader(DataSourceReader):
    """``spark.read``: from ``startingOffsets`` (earliest) to ``endingOffsets`` (latest, the
    LSO under read_committed), resolved when the query is planned."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def plan(self) -> list[OffsetRange]:
        planner = _Planner(self.options)
        try:
            partitions = planner.partitions()
            earliest = planner.earliest(partitions)
            latest = planner.latest(partitions)
        finally:
            planner.close()
        start = off.resolve(self.options.starting, partitions, earliest, latest, default=EARLIEST)
        end = off.resolve(self.options.ending, partitions, earliest, latest, default=LATEST)
        self._check(start, end, earliest, latest)
        return off.plan_ranges(start, end, self.options.min_partitions)

    def _check(self, start: Offsets, end: Offsets, earliest: Offsets, latest: Offsets) -> None:
        for tp in sorted(start):
            if start[tp] > end[tp]:
                raise ValueError(
                    f"{tp[0]}-{tp[1]}: startingOffsets {start[tp]} is after endingOffsets {end[tp]}"
                )
            if end[tp] > latest[tp]:
                raise ValueError(
                    f"{tp[0]}-{tp[1]}: endingOffsets {end[tp]} is past the end {latest[tp]}"
                )

    def partitions(self) -> list[InputPartition]:
        return [RangePartition(r) for r in self.plan()]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, RangePartition)
        return read_range(self.options, partition.range)


def offsets_of(data: Mapping[str, Any]) -> Offsets:
    """Spark's JSON offsets as {(topic, partition): offset} (for tools and tests)."""
    return off.from_json(data)
