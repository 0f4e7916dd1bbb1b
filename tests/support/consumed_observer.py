"""The consumers' side of the cluster fault runs: a read_committed and a read_uncommitted
confluent-kafka consumer, each in its own thread for the whole run, reading every
partition of the run's topics from the leaders and feeding what they read to the "never
forget" rule (tests/support/never_forget.py).

Each consumer reads in passes: a new consumer assigned every partition from offset 0
(``auto.offset.reset=error``, so it never jumps over a log it cannot read), tailing the log
once it has reached the end of every partition. ``request_pass()`` (after each fault
heals) starts a new pass, from 0, once the current one has reached the end everywhere;
``reread()`` waits for a pass that started after it was called. A position lost under a
consumer (OFFSET_OUT_OF_RANGE, or librdkafka's log-truncation detection: records it read
are no longer in the leader's log) starts a new pass at once: whether what it had read is
still there, as it was, is the rule's to judge on that pass.

    observer = ConsumedObserver(cluster.bootstrap, {"orders": 3})
    ...faults...
    observer.reread()
    forgotten = observer.finish()    # the final high watermark of every partition checked
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import Counter

from confluent_kafka import Consumer, KafkaError, TopicPartition

from tests.support.never_forget import (
    READ_COMMITTED,
    READ_UNCOMMITTED,
    Forgotten,
    NeverForget,
    Record,
)

logger = logging.getLogger(__name__)

# The consumer lost its position: the log it was reading is shorter than what it read.
_POSITION_LOST = {KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET,
                  KafkaError._LOG_TRUNCATION}
BATCH = 500


class ConsumedObserver:
    """Two consumers (read_committed, read_uncommitted) over ``topics`` (name ->
    partitions) until ``finish()``; ``rule`` holds what they read and the anomalies."""

    def __init__(self, bootstrap: str, topics: dict[str, int],
                 conf: dict[str, str | int] | None = None) -> None:
        self.bootstrap = bootstrap
        self.partitions = [(t, p) for t, n in topics.items() for p in range(n)]
        self.conf = conf or {}
        self.rule = NeverForget()
        self.errors: Counter[str] = Counter()
        self.passes: Counter[str] = Counter()
        self.ends: dict[str, dict[tuple[str, int], int]] = {
            READ_COMMITTED: {}, READ_UNCOMMITTED: {}}
        self._lock = threading.Condition()
        self._requested = 0  # pass requests, numbered
        self._done: dict[str, int] = {READ_COMMITTED: 0, READ_UNCOMMITTED: 0}
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(i,), daemon=True,
                                          name=f"observer-{i}")
                         for i in (READ_COMMITTED, READ_UNCOMMITTED)]
        for thread in self._threads:
            thread.start()

    # -- a consumer's thread ------------------------------------------------------------------
    def _consumer(self, isolation: str) -> Consumer:
        consumer = Consumer({
            "socket.timeout.ms": 5000, **self.conf,
            "bootstrap.servers": self.bootstrap, "group.id": f"obs-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False, "enable.partition.eof": True,
            "auto.offset.reset": "error", "isolation.level": isolation,
        })
        consumer.assign([TopicPartition(t, p, 0) for t, p in self.partitions])
        return consumer

    def _run(self, isolation: str) -> None:
        while not self._stop.is_set():
            with self._lock:
                serving = self._requested  # the requests this pass answers
                for tp in self.partitions:
                    self.rule.begin_pass(isolation, tp, 0)
                self.passes[isolation] += 1
            consumer = self._consumer(isolation)
            try:
                self._pass(isolation, consumer, serving)
            finally:
                consumer.close()

    def _pass(self, isolation: str, consumer: Consumer, serving: int) -> None:
        """Read until the end of every partition, then tail until a new pass is asked
        for (or the position is lost)."""
        at_end: set[tuple[str, int]] = set()
        complete = False
        while not self._stop.is_set():
            for message in consumer.consume(BATCH, 0.2):
                topic, partition, offset = message.topic(), message.partition(), message.offset()
                assert topic is not None and partition is not None and offset is not None
                tp = (topic, partition)
                error = message.error()
                if error is None:
                    record = Record(message.key(), message.value(), message.timestamp()[1],
                                    message.leader_epoch())
                    with self._lock:
                        self._log(self.rule.observe(isolation, tp, offset, record))
                elif error.code() == KafkaError._PARTITION_EOF:
                    with self._lock:
                        self._log(self.rule.at_end(isolation, tp, offset))
                        self.ends[isolation][tp] = offset
                    at_end.add(tp)
                elif error.code() in _POSITION_LOST:
                    with self._lock:
                        self.errors[f"{isolation} {error.name()}"] += 1
                    logger.warning("observer %s lost its position on %s: %s", isolation,
                                   tp, error)
                    return  # a new pass, from 0
                else:
                    with self._lock:
                        self.errors[f"{isolation} {error.name()}"] += 1
            if not complete and len(at_end) == len(self.partitions):
                complete = True
                with self._lock:
                    self._done[isolation] = max(self._done[isolation], serving)
                    self._lock.notify_all()
            if complete:
                with self._lock:
                    if self._requested > serving:
                        return

    @staticmethod
    def _log(found: list[Forgotten]) -> None:
        for anomaly in found:
            logger.error("consumed then changed: %s", anomaly)

    # -- the run's side -----------------------------------------------------------------------
    def request_pass(self) -> int:
        """Ask both consumers for a new pass from 0 (started once the current one is
        complete); the request's number, for ``reread``."""
        with self._lock:
            self._requested += 1
            return self._requested

    def reread(self, timeout: float = 120) -> None:
        """A new pass of both consumers, complete (every partition read to its end)."""
        wanted = self.request_pass()
        deadline = time.monotonic() + timeout
        with self._lock:
            assert self._lock.wait_for(
                lambda: min(self._done.values()) >= wanted or self._stop.is_set(),
                max(0.0, deadline - time.monotonic())), (
                f"the observer's consumers did not read every partition to its end within "
                f"{timeout:.0f}s (errors {dict(self.errors)})")

    def finish(self, timeout: float = 120) -> list[Forgotten]:
        """A last complete pass, the final high watermarks checked (every fault healed and
        the writers stopped before), the consumers stopped; every anomaly of the run."""
        self.reread(timeout)
        self._stop.set()
        for thread in self._threads:
            thread.join(30)
        ends = self.ends[READ_UNCOMMITTED]
        with self._lock:
            for tp in self.partitions:
                self._log(self.rule.final(tp, ends[tp]))
            return list(self.rule.forgotten)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(30)

    def statistics(self) -> dict[str, object]:
        with self._lock:
            return {
                "records_remembered": self.rule.remembered(),
                "reads": self.rule.observations,
                "passes": dict(self.passes),
                "consumed_then_changed": self.rule.forgotten_offsets(),
                "consumer_errors": dict(self.errors),
            }
