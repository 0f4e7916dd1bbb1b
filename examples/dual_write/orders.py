"""Orders in a SQL database and order events on a topic, written together (KIP-939 dual write).

    python examples/dual_write/orders.py --bootstrap localhost:9092 --db orders.db --orders 100

Each unit of work places ``--per-unit`` orders: rows in the ``orders`` table and one JSON
event per order on ``--topic`` (key = order id), through ``oncelog.client.dualwrite``. The
next order id comes from the database, so a rerun continues where the database says the
last run stopped; with the recovery in ``DualWriter`` that means every order ends up exactly
once in the table and exactly once in the topic's committed records, however often the
process is killed.

``--check`` compares the table with the committed events and exits 1 unless they agree.

Crash drill: ``DUALWRITE_CRASH_AT=<step>[:<unit>]`` kills this process with SIGKILL at
``step`` (after_prepare, before_db_commit, after_db_commit, after_log_commit) of the
``unit``-th unit of this run (default 1). Then run the command again.

``--dsn postgresql://...`` writes to PostgreSQL instead of sqlite (needs psycopg).
Output lines (for people and tests): ``recovered action=... stored=... ongoing=...``,
``unit orders A..B``, ``done orders=N placed_now=M``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sqlite3
import sys
from collections.abc import Callable
from typing import Any

from oncelog.client import Admin, Consumer, TopicPartition
from oncelog.client.dualwrite import STEPS, DualWriter, DualWriteUnit
from oncelog.client.errors import TopicAlreadyExistsError

CRASH_ENV = "DUALWRITE_CRASH_AT"


def crash_hook(spec: str | None) -> tuple[Callable[[str], None], Callable[[], None]]:
    """``(on_step, next_unit)`` that SIGKILL this process at the configured step."""
    unit = 0
    if not spec:
        return (lambda step: None), (lambda: None)
    step, _, at = spec.partition(":")
    if step not in STEPS:
        raise SystemExit(f"{CRASH_ENV}: unknown step {step!r}; one of {', '.join(STEPS)}")
    target = int(at or "1")

    def on_step(reached: str) -> None:
        if reached == step and unit == target:
            print(f"crashing at {step} of unit {unit}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)

    def next_unit() -> None:
        nonlocal unit
        unit += 1

    return on_step, next_unit


def connector(args: argparse.Namespace) -> Callable[[], Any]:
    if args.dsn:
        import psycopg

        return lambda: psycopg.connect(args.dsn)
    return lambda: sqlite3.connect(args.db, timeout=30)


def ensure_topic(bootstrap: str, topic: str, partitions: int) -> None:
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        try:
            admin.create_topic(topic, partitions)
        except TopicAlreadyExistsError:
            pass


def ensure_schema(connect: Callable[[], Any]) -> None:
    conn = connect()
    try:
        cursor = conn.cursor()
        cursor.execute(
            "CREATE TABLE IF NOT EXISTS orders ("
            " order_id BIGINT NOT NULL PRIMARY KEY,"
            " customer VARCHAR(64) NOT NULL,"
            " amount_cents BIGINT NOT NULL)"
        )
        conn.commit()
    finally:
        conn.close()


def placed_so_far(connect: Callable[[], Any]) -> int:
    conn = connect()
    try:
        cursor = conn.cursor()
        cursor.execute("SELECT COALESCE(MAX(order_id), 0) FROM orders")
        return int(cursor.fetchone()[0])
    finally:
        conn.close()


def check(args: argparse.Namespace, connect: Callable[[], Any]) -> int:
    """Compare the table with the topic's committed events; 0 when they agree exactly."""
    conn = connect()
    try:
        cursor = conn.cursor()
        cursor.execute("SELECT order_id FROM orders ORDER BY order_id")
        rows = [int(r[0]) for r in cursor.fetchall()]
    finally:
        conn.close()
    events: list[int] = []
    config = {"bootstrap.servers": args.bootstrap, "isolation.level": "read_committed"}
    with Consumer(config) as consumer:
        partitions = [TopicPartition(args.topic, p) for p in range(args.partitions)]
        consumer.assign(partitions)
        consumer.seek_to_beginning(partitions)
        ends = consumer.end_offsets(partitions)  # the LSO under read_committed
        while any(consumer.position(tp) < end for tp, end in ends.items()):
            events.extend(json.loads(m.value or b"")["order_id"] for m in consumer.poll(1.0))
    agree = sorted(events) == rows and len(set(events)) == len(events)
    print(f"{'agree' if agree else 'DISAGREE'} rows={len(rows)} events={len(events)}", flush=True)
    return 0 if agree else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", default="localhost:9092")
    parser.add_argument("--db", default="orders.db", help="sqlite file (default orders.db)")
    parser.add_argument("--dsn", default=None, help="PostgreSQL DSN instead of --db")
    parser.add_argument("--topic", default="order-events")
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--orders", type=int, default=100, help="total orders wanted")
    parser.add_argument("--per-unit", type=int, default=10)
    parser.add_argument("--transactional-id", default="orders-writer")
    parser.add_argument("--check", action="store_true", help="only compare table and topic")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")

    on_step, next_unit = crash_hook(os.environ.get(CRASH_ENV))
    connect = connector(args)
    ensure_topic(args.bootstrap, args.topic, args.partitions)
    ensure_schema(connect)
    if args.check:
        return check(args, connect)

    writer = DualWriter(
        {"bootstrap.servers": args.bootstrap, "client.id": "dual-write-orders"},
        connect,
        args.transactional_id,
        on_step=on_step,
    )
    recovery = writer.recover()
    print(
        f"recovered action={recovery.action} stored={str(recovery.stored) or '-'} "
        f"ongoing={recovery.ongoing or '-'}",
        flush=True,
    )
    placed = 0
    try:
        while placed_so_far(connect) < args.orders:
            next_unit()

            def place(unit: DualWriteUnit) -> tuple[int, int]:
                unit.execute("SELECT COALESCE(MAX(order_id), 0) FROM orders")
                first = int(unit.cursor.fetchone()[0]) + 1
                last = min(first + args.per_unit - 1, args.orders)
                for order_id in range(first, last + 1):
                    customer = f"customer-{order_id % 7}"
                    amount = 100 * order_id + 99
                    unit.execute(
                        "INSERT INTO orders (order_id, customer, amount_cents) VALUES ({}, {}, {})",
                        (order_id, customer, amount),
                    )
                    event = {"order_id": order_id, "customer": customer, "amount_cents": amount}
                    unit.send(args.topic, json.dumps(event).encode(), key=str(order_id).encode())
                return first, last

            first, last = writer.run(place)
            placed += last - first + 1
            print(f"unit orders {first}..{last}", flush=True)
    finally:
        writer.close()
    print(f"done orders={args.orders} placed_now={placed}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
