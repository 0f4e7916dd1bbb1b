"""The transactional phases of bench/workload.py, each run in a worker process.

- ``txn-rate``: small transactions one after the other (begin, sends, commit), timed per
  transaction from begin to the commit's return. ``partitions`` (a list) runs one producer
  per partition, each in its own thread with its own transactional id; the threads start
  together once every producer is initialised, and their results merge into one
  (bench/txn_stats.py). ``client`` is ``confluent-kafka`` or ``oncelog``; with ``two_phase``
  (oncelog.client) each transaction ends with KIP-939's ``prepare_transaction`` and
  ``complete_transaction`` instead of ``commit_transaction``.
- ``ctp``: consume-transform-produce: a read_committed confluent-kafka consumer in a fresh
  group reads ``records`` input records; a transactional producer writes one derived record
  per input record (the value reversed, same partition) to ``output_topic``, and every
  ``commit_every`` records sends the consumer's positions with send_offsets_to_transaction
  and commits. Timed from the partition assignment to the last commit's return.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from bench.txn_stats import Result, merge_txn_rates, percentile, txn_rate_result

TIMEOUT_S = 30.0


def _confluent_producer(job: dict[str, Any], errors: list[str]) -> Any:
    from confluent_kafka import Producer

    return Producer({
        "bootstrap.servers": job["bootstrap"],
        **job["config"],
        "transactional.id": f"bench-{uuid.uuid4().hex[:12]}",
        "error_cb": lambda err: errors.append(f"client: {err}") if err.fatal() else None,
    })


def _timed_txns(
    job: dict[str, Any], ready: threading.Barrier, begin: Callable[[], Any],
    send: Callable[[bytes], Any], end: Callable[[], Any],
) -> Result:
    """``job["txns"]`` transactions of ``begin``, ``job["records"]`` sends and ``end``, once
    every producer of the process is ``ready``; each timed from begin to end's return."""
    value, per_txn = os.urandom(job["record_size"]), job["records"]
    latencies: list[float] = []
    ready.wait()
    started_at, start = time.time(), time.perf_counter()
    for _ in range(job["txns"]):
        began = time.perf_counter()
        begin()
        for _ in range(per_txn):
            send(value)
        end()
        latencies.append((time.perf_counter() - began) * 1000)
    seconds = time.perf_counter() - start
    return {"txns": job["txns"], "records_per_txn": per_txn, "record_size": len(value),
            "started_at": started_at, "seconds": seconds, "latencies_ms": latencies}


def _txn_rate_confluent(
    job: dict[str, Any], partition: int | None, ready: threading.Barrier
) -> Result:
    errors: list[str] = []
    producer = _confluent_producer(job, errors)
    producer.init_transactions(TIMEOUT_S)
    extra = {} if partition is None else {"partition": partition}
    topic = job["topic"]
    timed = _timed_txns(job, ready, producer.begin_transaction,
                        lambda value: producer.produce(topic, value, **extra),
                        lambda: producer.commit_transaction(TIMEOUT_S))
    return txn_rate_result(**timed, errors=errors)


def _txn_rate_oncelog(
    job: dict[str, Any], partition: int | None, ready: threading.Barrier
) -> Result:
    from oncelog.client import Producer

    producer = Producer({"bootstrap.servers": job["bootstrap"], **job["config"],
                         "transactional.id": f"bench-{uuid.uuid4().hex[:12]}"})
    prepares: list[float] = []

    def prepare_and_complete() -> None:
        began = time.perf_counter()
        state = producer.prepare_transaction(TIMEOUT_S)
        prepares.append((time.perf_counter() - began) * 1000)
        producer.complete_transaction(state, TIMEOUT_S)

    two_phase = bool(job.get("two_phase"))
    topic = job["topic"]
    try:
        producer.init_transactions(timeout=TIMEOUT_S)
        timed = _timed_txns(
            job, ready, producer.begin_transaction,
            lambda value: producer.send(topic, value, partition=partition),
            prepare_and_complete if two_phase
            else lambda: producer.commit_transaction(TIMEOUT_S))
    finally:
        producer.close(TIMEOUT_S)
    extra: dict[str, Any] = {"prepare_ms": prepares} if two_phase else {}
    return txn_rate_result(**timed, errors=[], **extra)


def _failure(exc: BaseException) -> Result:
    return {"records": 0, "bytes": 0, "seconds": 0.0, "producers": 1, "errors": 1,
            "first_errors": [f"{type(exc).__name__}: {exc}"]}


def txn_rate(job: dict[str, Any]) -> Result:
    """One producer per entry of ``partitions`` (default: one, on ``partition`` or the
    partitioner's choice), each in its own thread; their merged result."""
    partitions: list[int | None] = list(job.get("partitions") or [job.get("partition")])
    one = _txn_rate_oncelog if job.get("client") == "oncelog" else _txn_rate_confluent
    ready = threading.Barrier(len(partitions))
    results: list[Result] = [{} for _ in partitions]

    def run(index: int, partition: int | None) -> None:
        try:
            results[index] = one(job, partition, ready)
        except Exception as exc:  # reported in the result; the others must not wait for it
            ready.abort()
            results[index] = _failure(exc)

    threads = [threading.Thread(target=run, args=(i, p), name=f"producer-{p}")
               for i, p in enumerate(partitions)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results[0] if len(results) == 1 else merge_txn_rates(results)


def ctp(job: dict[str, Any]) -> Result:
    from confluent_kafka import Consumer

    errors: list[str] = []
    producer = _confluent_producer(job, errors)
    producer.init_transactions(TIMEOUT_S)
    consumer = Consumer({"bootstrap.servers": job["bootstrap"],
                         "group.id": f"bench-ctp-{uuid.uuid4().hex[:12]}", **job["consumer"]})
    count, every, output = job["records"], job["commit_every"], job["output_topic"]
    subscribed = time.perf_counter()
    deadline = subscribed + job["timeout"]
    assigned: float | None = None

    def on_assign(_consumer: Any, partitions: list[Any]) -> None:
        nonlocal assigned
        if partitions and assigned is None:
            assigned = time.perf_counter()

    consumer.subscribe([job["topic"]], on_assign=on_assign)
    done = in_txn = payload = 0
    latencies: list[float] = []
    last = subscribed
    try:
        producer.begin_transaction()
        while done < count and time.perf_counter() < deadline:
            for message in consumer.consume(min(every - in_txn, 1000), 0.5):
                if message.error() is not None:
                    errors.append(str(message.error()))
                    continue
                value = message.value() or b""
                producer.produce(output, value[::-1], key=message.key(),
                                 partition=message.partition())
                in_txn += 1
                done += 1
                payload += len(value)
            if in_txn and (in_txn >= every or done >= count):
                began = time.perf_counter()
                positions = [tp for tp in consumer.position(consumer.assignment())
                             if tp.offset >= 0]
                producer.send_offsets_to_transaction(
                    positions, consumer.consumer_group_metadata(), TIMEOUT_S)
                producer.commit_transaction(TIMEOUT_S)
                last = time.perf_counter()
                latencies.append((last - began) * 1000)
                in_txn = 0
                if done < count:
                    producer.begin_transaction()
    finally:
        consumer.close()
    if done < count:
        errors.append(f"transformed {done} of {count} records within {job['timeout']}s")
    seconds = last - assigned if assigned is not None else 0.0
    latencies.sort()
    return {
        "records": done,
        "bytes": payload,
        "seconds": seconds,
        "txns": len(latencies),
        "txn_per_s": len(latencies) / seconds if seconds else 0.0,
        "p50_ms": percentile(latencies, 0.50),
        "p99_ms": percentile(latencies, 0.99),
        "join_seconds": (assigned - subscribed) if assigned is not None else None,
        "errors": len(errors),
        "first_errors": errors[:5],
    }
