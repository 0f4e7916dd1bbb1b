"""The per-request floor: broker CPU for the cheapest request a client makes, one at a time.

A small transaction of confluent-kafka is three requests (AddPartitionsToTxn, Produce,
EndTxn, each waiting for the previous answer), so a broker's CPU per transaction cannot go
below three times what it spends receiving, dispatching and answering one request, whatever
the request does. This measures that floor for each broker of a run: one TCP connection
sends ``requests`` Metadata v12 requests that name no topic (the answer lists the brokers
and the cluster id only), each after the previous answer arrived, as a client's request
path does; broker CPU (user and system apart) from /proc over those requests.

    .venv/bin/python bench/run.py --brokers oncelog,tansu,kafka --scenarios none \
        --request-floor 20000
"""

from __future__ import annotations

import io
import time
from pathlib import Path
from typing import Any

from kio.schema.metadata.v12.request import MetadataRequest
from kio.serial import entity_writer

from bench import brokers
from bench.proc_cpu import cpu_times
from oncelog.harness.rawkafka import RawConnection

METADATA = 3
VERSION = 12
WARM_UP = 2_000


def _summed(running: brokers.Running) -> tuple[float, float]:
    """(user, system) CPU seconds so far, summed over the broker processes."""
    user = system = 0.0
    for server in running.servers:
        times = cpu_times(server.pid)
        if times is None:
            raise RuntimeError(f"{running.name}: no CPU times for pid {server.pid}")
        user, system = user + times.user, system + times.system
    return user, system


def measure(running: brokers.Running, requests: int) -> dict[str, Any]:
    """``requests`` empty Metadata requests one after the other on one connection: broker
    CPU µs per request (total, user, system) and requests per second."""
    out = io.BytesIO()
    entity_writer(MetadataRequest)(out, MetadataRequest(
        topics=(), allow_auto_topic_creation=False, include_topic_authorized_operations=False,
    ))
    body = out.getvalue()
    conn = RawConnection(running.bootstrap, timeout=30.0)
    try:
        def one() -> None:
            conn.send_frame(conn.header(METADATA, VERSION, flexible=True, client_id="floor")
                            + body)
            if conn.recv_frame() is None:
                raise RuntimeError(f"{running.name} closed the connection")

        for _ in range(WARM_UP):
            one()
        before, started = _summed(running), time.perf_counter()
        for _ in range(requests):
            one()
        after, elapsed = _summed(running), time.perf_counter() - started
    finally:
        conn.close()
    user = (after[0] - before[0]) * 1e6 / requests
    system = (after[1] - before[1]) * 1e6 / requests
    return {"requests": requests, "cpu_us": user + system, "user_us": user,
            "system_us": system, "per_s": requests / elapsed}


def run(names: list[str], requests: int, out_dir: Path) -> dict[str, dict[str, Any]]:
    """The floor of each broker, each started fresh and stopped after."""
    found: dict[str, dict[str, Any]] = {}
    for name in names:
        running = brokers.start(name, out_dir, "request-floor", profile=False)
        try:
            found[name] = measure(running, requests)
        except Exception as exc:  # reported, the run goes on
            found[name] = {"error": str(exc).splitlines()[0] if str(exc) else repr(exc)}
        finally:
            brokers.stop(running)
    return found


def table(found: dict[str, dict[str, Any]]) -> str:
    rows = ["| broker | requests | broker CPU µs/request | user | system | requests/s | "
            "3 requests (one small transaction's floor), ms |",
            "|---|---:|---:|---:|---:|---:|---:|"]
    for name, res in found.items():
        label = brokers.LABELS.get(name, name)
        if "error" in res:
            rows.append(f"| {label} | failed: {res['error']} | | | | | |")
            continue
        rows.append(f"| {label} | {res['requests']:,} | {res['cpu_us']:.0f} "
                    f"| {res['user_us']:.0f} | {res['system_us']:.0f} | {res['per_s']:,.0f} "
                    f"| {3 * res['cpu_us'] / 1000:.2f} |")
    return "\n".join(rows)
