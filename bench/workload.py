"""One benchmark phase in its own process: ``python -m bench.workload '<json job>'``.

The job is ``{"phase": "produce"|"consume", "bootstrap", "topic", "records",
"record_size", "config": {...}, "txn_records": int|null, "timeout": seconds}`` (or a phase of
bench/txn_workload.py: "txn-rate", "ctp"); the result is
one JSON line on stdout. Produce time runs from the first ``produce()`` to the return of the
final ``flush()``. Consume time runs from the moment the group assigns the partitions (the
end of the group join) to the last record; the join itself (``subscribe()`` to assignment)
is reported apart.
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer

from bench import txn_workload


def produce(job: dict[str, Any]) -> dict[str, Any]:
    errors: list[str] = []

    def on_error(err: Any, _msg: Any = None) -> None:
        if err is not None:
            errors.append(str(err))

    config = {
        "bootstrap.servers": job["bootstrap"],
        **job["config"],
        "on_delivery": on_error,
        "error_cb": lambda err: errors.append(f"client: {err}") if err.fatal() else None,
    }
    txn_records = job.get("txn_records")
    txn_interval = job.get("txn_interval_ms")
    if txn_records or txn_interval:
        config["transactional.id"] = f"bench-{uuid.uuid4().hex[:12]}"
    producer = Producer(config)
    topic, count = job["topic"], job["records"]
    value = os.urandom(job["record_size"])
    send, poll = producer.produce, producer.poll
    transactional = bool(txn_records or txn_interval)
    commits = 0
    if transactional:
        producer.init_transactions(30)
    start = time.perf_counter()
    next_commit = start + (txn_interval or 0) / 1000
    if transactional:
        producer.begin_transaction()
    for i in range(count):
        while True:
            try:
                send(topic, value)
                break
            except BufferError:
                poll(0.005)
        due = (txn_records and (i + 1) % txn_records == 0) or (
            txn_interval and i & 0xFF == 0 and time.perf_counter() >= next_commit
        )
        if due:
            producer.commit_transaction(60)
            commits += 1
            next_commit = time.perf_counter() + (txn_interval or 0) / 1000
            if i + 1 < count:
                producer.begin_transaction()
        elif i & 0x3FF == 0:
            poll(0)
    if transactional and (txn_interval or count % (txn_records or 1)):
        producer.commit_transaction(60)
        commits += 1
    left = producer.flush(job["timeout"])
    seconds = time.perf_counter() - start
    if left:
        errors.append(f"{left} records still unacknowledged after {job['timeout']}s")
    return {
        "records": count,
        "bytes": count * len(value),
        "seconds": seconds,
        "commits": commits,
        "errors": len(errors),
        "first_errors": errors[:5],
    }


def consume(job: dict[str, Any]) -> dict[str, Any]:
    config = {
        "bootstrap.servers": job["bootstrap"],
        "group.id": f"bench-{uuid.uuid4().hex[:12]}",
        **job["config"],
    }
    consumer = Consumer(config)
    count = job["records"]
    received = 0
    payload = 0
    errors: list[str] = []
    subscribed = time.perf_counter()
    deadline = subscribed + job["timeout"]
    assigned: float | None = None
    last = subscribed

    def on_assign(_consumer: Any, partitions: list[Any]) -> None:
        nonlocal assigned
        if partitions and assigned is None:
            assigned = time.perf_counter()

    consumer.subscribe([job["topic"]], on_assign=on_assign)
    try:
        while received < count and time.perf_counter() < deadline:
            batch = consumer.consume(10000, 0.5)
            if not batch:
                continue
            for message in batch:
                err = message.error()
                if err is not None:
                    errors.append(str(err))
                    continue
                received += 1
                payload += len(message.value() or b"")
            last = time.perf_counter()
    finally:
        consumer.close()
    if received < count:
        errors.append(f"read {received} of {count} records within {job['timeout']}s")
    return {
        "records": received,
        "bytes": payload,
        "seconds": last - assigned if assigned is not None else 0.0,
        "join_seconds": (assigned - subscribed) if assigned is not None else None,
        "errors": len(errors),
        "first_errors": errors[:5],
    }


def main(argv: list[str]) -> int:
    job = json.loads(argv[1])
    try:
        phases = {"produce": produce, "consume": consume, "txn-rate": txn_workload.txn_rate,
                  "ctp": txn_workload.ctp}
        result = phases[job["phase"]](job)
    except KafkaException as exc:
        result = {"records": 0, "bytes": 0, "seconds": 0.0, "errors": 1,
                  "first_errors": [str(exc)]}
    print(json.dumps(result), flush=True)
    return 0 if result["errors"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
