"""A transactional workload for the fault run (bench/cluster_faults.py --mode transactions)
and its checker.

``TransactionalWorkload``: a few confluent-kafka transactional producers (distinct
transactional ids), each in its own thread (``pause`` seconds between two transactions),
each transaction writing a few records to 2-3 partitions of one topic, with unique values
``b"<producer>:<seq>:<partition>:<index>"``, and committing most and aborting some (seeded).
Every transaction is recorded with its outcome: ``committed`` (commit_transaction returned),
``aborted`` (commit was never asked: whatever happened, the transaction must never become
visible) or ``unknown`` (commit_transaction raised, so the transaction may have committed or
not, but all or nothing).

``check_transactions`` compares the records with what read_committed and read_uncommitted
consumers see at the end.
"""

from __future__ import annotations

import logging
import random
import threading
from collections import Counter
from dataclasses import dataclass, field

from confluent_kafka import KafkaError, KafkaException, Producer

logger = logging.getLogger(__name__)

COMMITTED, ABORTED, UNKNOWN = "committed", "aborted", "unknown"
COMMIT_RATIO = 0.8
END_TIMEOUT = 60.0  # seconds for init/commit/abort calls, longer than a fault's stall
ATTEMPTS = 5  # retriable failures of one call before the producer is recreated


@dataclass
class Transaction:
    producer: int
    seq: int
    values: list[bytes] = field(default_factory=list)
    outcome: str = ""


class _Fatal(Exception):
    """The producer must be recreated (a fatal error, or too many retriable ones)."""


def _error(exc: BaseException) -> KafkaError | None:
    arg = exc.args[0] if exc.args else None
    return arg if isinstance(arg, KafkaError) else None


def _call(what: str, call: object, *args: object) -> None:
    """Call a transactional API, retrying retriable errors as confluent-kafka allows;
    KafkaException for an abortable error, _Fatal for a fatal one."""
    assert callable(call)
    for attempt in range(ATTEMPTS):
        try:
            call(*args)
            return
        except KafkaException as exc:
            error = _error(exc)
            if error is not None and error.retriable() and attempt + 1 < ATTEMPTS:
                logger.info("%s: retriable %s (attempt %d)", what, error, attempt + 1)
                continue
            if error is not None and error.txn_requires_abort():
                raise
            raise _Fatal(f"{what}: {error or exc}") from exc
    raise AssertionError("unreachable")


class TransactionalWorkload:
    """``producers`` transactional producers writing to ``topic`` (``partitions``
    partitions) until ``stop()``; ``transactions`` are the finished ones."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, *, producers: int = 3,
                 seed: int = 1, configs: dict[str, str | int] | None = None,
                 pause: float = 0.0) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.configs = configs or {}
        self.transactional_ids = [f"faults-{seed}-{n}" for n in range(producers)]
        self.transactions: list[Transaction] = []
        self.errors: Counter[str] = Counter()
        self.recreated = 0
        self._seed = seed
        self._pause = pause  # seconds between a producer's transactions
        self._stop = threading.Event()
        self._progress = threading.Condition()
        self._threads = [threading.Thread(target=self._run, args=(n,), daemon=True)
                         for n in range(producers)]
        for thread in self._threads:
            thread.start()

    # -- a producer's thread ------------------------------------------------------------------
    def _new_producer(self, n: int, attempts: int | None = None) -> Producer:
        """A producer of transactional id ``n`` after init_transactions; retried until it
        succeeds (``attempts`` times at most, then AssertionError)."""
        attempt = 0
        while attempts is None or attempt < attempts:
            attempt += 1
            producer = Producer({
                "bootstrap.servers": self.bootstrap,
                "transactional.id": self.transactional_ids[n],
                "transaction.timeout.ms": 60000, "linger.ms": 2,
                **self.configs, "message.timeout.ms": 60000,
            })
            try:
                _call("init_transactions", producer.init_transactions, END_TIMEOUT)
                return producer
            except (KafkaException, _Fatal) as exc:
                self._count(exc)
                logger.warning("producer %d: init_transactions failed: %s", n, exc)
        raise AssertionError(f"{self.transactional_ids[n]}: init_transactions failed "
                             f"{attempts} times (a transaction never completes?)")

    def _count(self, exc: BaseException) -> None:
        error = _error(exc.__cause__ or exc) if isinstance(exc, _Fatal) else _error(exc)
        with self._progress:
            self.errors[error.name() if error is not None else type(exc).__name__] += 1

    def _run(self, n: int) -> None:
        rng = random.Random(self._seed * 1000 + n)
        producer = self._new_producer(n)
        seq = 0
        while not self._stop.is_set():
            txn = Transaction(n, seq)
            seq += 1
            commit = rng.random() < COMMIT_RATIO
            try:
                producer.begin_transaction()
                for partition in sorted(rng.sample(range(self.partitions),
                                                   rng.choice((2, 3)))):
                    for index in range(rng.randint(1, 3)):
                        value = f"{n}:{txn.seq}:{partition}:{index}".encode()
                        producer.produce(self.topic, value, partition=partition)
                        txn.values.append(value)
                if not commit:
                    txn.outcome = ABORTED
                    producer.flush(END_TIMEOUT)  # into the log first, else only purged
                    _call("abort_transaction", producer.abort_transaction, END_TIMEOUT)
                else:
                    txn.outcome = UNKNOWN  # from here on, until commit returns
                    _call("commit_transaction", producer.commit_transaction, END_TIMEOUT)
                    txn.outcome = COMMITTED
            except (KafkaException, BufferError, _Fatal) as exc:
                txn.outcome = txn.outcome or ABORTED  # failed before commit was asked
                self._count(exc)
                logger.warning("producer %d txn %d (%s): %s", n, txn.seq, txn.outcome, exc)
                producer = self._recover(n, producer, exc)
            with self._progress:
                self.transactions.append(txn)
                self._progress.notify_all()
            self._stop.wait(self._pause)  # pacing, not synchronisation
        producer.flush(10)

    def _recover(self, n: int, producer: Producer, exc: BaseException) -> Producer:
        """After an abortable error abort the transaction; after a fatal one (or a failed
        abort) start a new producer, whose init_transactions fences the old one."""
        if not isinstance(exc, _Fatal):
            error = _error(exc)
            if error is None or error.txn_requires_abort():
                try:
                    _call("abort_transaction", producer.abort_transaction, END_TIMEOUT)
                    return producer
                except (KafkaException, _Fatal) as abort_exc:
                    self._count(abort_exc)
        with self._progress:
            self.recreated += 1
        return self._new_producer(n)

    # -- observing ----------------------------------------------------------------------------
    def count(self, outcome: str) -> int:
        with self._progress:
            return sum(1 for t in self.transactions if t.outcome == outcome)

    def wait_committed(self, count: int, timeout: float = 120) -> None:
        with self._progress:
            assert self._progress.wait_for(
                lambda: sum(1 for t in self.transactions if t.outcome == COMMITTED) >= count,
                timeout), f"fewer than {count} committed; errors {dict(self.errors)}"

    def stop(self) -> None:
        """Finish every producer's transaction in flight, then complete whatever a
        coordinator still holds: a new producer per transactional id (InitProducerId waits
        for a pending commit or abort to finish)."""
        self._stop.set()
        for thread in self._threads:
            thread.join(300)
            assert not thread.is_alive(), "a producer did not finish its transaction"
        for n in range(len(self.transactional_ids)):
            self._new_producer(n, attempts=3).flush(10)


def check_transactions(transactions: list[Transaction], committed_read: list[bytes],
                       uncommitted_read: list[bytes]) -> dict[str, int]:
    """Counts of outcomes and anomalies. Anomalies: ``duplicates`` (a value read twice
    under read_committed), ``lost_writes`` (a committed transaction's value not visible),
    ``aborted_reads`` (an aborted transaction's value visible), ``torn_transactions`` (a
    transaction partly visible, whatever its outcome; an unknown one must be all or
    nothing), ``unexpected_values`` (a visible value no transaction wrote). Not anomalies:
``aborted_values_in_log`` (aborted values read_uncommitted sees: the aborts reached the
log), ``read_uncommitted_duplicates``."""
    seen = Counter(committed_read)
    written = {v for t in transactions for v in t.values}
    result: Counter[str] = Counter()
    for txn in transactions:
        result[txn.outcome] += 1
        visible = sum(1 for v in txn.values if v in seen)
        if 0 < visible < len(txn.values):
            result["torn_transactions"] += 1
        if txn.outcome == COMMITTED:
            result["lost_writes"] += len(txn.values) - visible
        elif txn.outcome == ABORTED:
            result["aborted_reads"] += visible
        elif txn.values:
            result["unknown_resolved_committed" if visible == len(txn.values)
                   else "unknown_resolved_aborted" if visible == 0
                   else "unknown_torn"] += 1
    result["duplicates"] = sum(c - 1 for c in seen.values() if c > 1)
    result["unexpected_values"] = sum(1 for v in seen if v not in written)
    uncommitted = Counter(uncommitted_read)
    result["read_committed_values"] = len(committed_read)
    result["read_uncommitted_values"] = len(uncommitted_read)
    result["read_uncommitted_duplicates"] = sum(c - 1 for c in uncommitted.values() if c > 1)
    result["committed_not_in_read_uncommitted"] = sum(1 for v in seen if v not in uncommitted)
    result["aborted_values_in_log"] = sum(
        1 for t in transactions if t.outcome == ABORTED for v in t.values if v in uncommitted)
    return {key: result[key] for key in (
        COMMITTED, ABORTED, UNKNOWN, "unknown_resolved_committed", "unknown_resolved_aborted",
        "unknown_torn", "duplicates", "lost_writes", "aborted_reads", "torn_transactions",
        "unexpected_values", "read_committed_values", "read_uncommitted_values",
        "read_uncommitted_duplicates", "committed_not_in_read_uncommitted",
        "aborted_values_in_log")}


ANOMALIES = ("duplicates", "lost_writes", "aborted_reads", "torn_transactions",
             "unexpected_values", "committed_not_in_read_uncommitted")
