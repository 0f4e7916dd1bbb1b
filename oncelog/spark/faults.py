"""Crash and failure points of the Spark connector, for fault tests.

``ONCELOG_SPARK_CRASH_AT=point[@batch][,...]`` makes every process of the Spark driver's
session die by SIGKILL the first time the connector passes that point (of that micro-batch,
if given). In local mode the driver's Python process, its JVM, the executors and their
Python workers are one session (PySpark's worker daemon has its own process group, but not
its own session), so this is what ``kill -9`` of the driver does; a test starts the driver
in a session of its own (``start_new_session=True``) so that only the driver goes.

``ONCELOG_SPARK_FAIL_AT=point[@batch][:partition][,...]`` instead raises
``InjectedFailure`` in the task, on its first attempt only: Spark retries the task (with
``local[N,maxFailures]``), and the retry passes.

Points: ``task.write`` (a task has sent its first records, before prepare),
``task.prepared`` (a task prepared its transaction, before returning its commit message),
``commit.start`` (the driver's commit, before completing anything), ``commit.after_first``
(after completing the first transaction of several), ``commit.done`` (every transaction
completed, before Spark writes its commit log). Unset, each point costs a dict lookup.
``ONCELOG_SPARK_CRASH_LOG=path`` gets a line naming each crash point that fired.

``ONCELOG_SPARK_HOLD_AT=point[@batch][:partition][,...]`` with ``ONCELOG_SPARK_HOLD_DIR=dir``
instead stops the process at a crash point until the test says go: it creates
``dir/held-<point>-<batch>`` and waits (at most ``HOLD_MAX_S``) for
``dir/release-<point>-<batch>``. A cluster test uses it to kill a broker at a known step
of the protocol (e.g. every task prepared, the driver not yet completing anything).
"""

from __future__ import annotations

import logging
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

__all__ = [
    "HOLD_MAX_S",
    "InjectedFailure",
    "crash_point",
    "fail_point",
    "hold_point",
    "parse_points",
]

HOLD_MAX_S = 600.0


class InjectedFailure(RuntimeError):
    """Raised by a failure point."""


@dataclass(frozen=True)
class Point:
    name: str
    batch: int | None = None
    partition: int | None = None

    def matches(self, name: str, batch: int | None, partition: int | None) -> bool:
        return (
            self.name == name
            and (self.batch is None or self.batch == batch)
            and (self.partition is None or self.partition == partition)
        )


def parse_points(text: str) -> tuple[Point, ...]:
    points: list[Point] = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        head, _, part = item.partition(":")
        name, _, batch = head.partition("@")
        points.append(Point(name, int(batch) if batch else None, int(part) if part else None))
    return tuple(points)


def _points(variable: str) -> tuple[Point, ...]:
    return parse_points(os.environ.get(variable, ""))


def crash_point(name: str, batch: int | None = None, partition: int | None = None) -> None:
    hold_point(name, batch, partition)
    if any(p.matches(name, batch, partition) for p in _points("ONCELOG_SPARK_CRASH_AT")):
        log.critical(
            "crash point %s (batch %s, partition %s): killing the driver's process group (SIGKILL)",
            name,
            batch,
            partition,
        )
        for handler in logging.getLogger().handlers:
            handler.flush()
        # A Spark Python worker's stderr is a pipe that its JVM copies out, and the JVM dies
        # too: name the point in ONCELOG_SPARK_CRASH_LOG, if given, for the test to read.
        line = f"crash point {name} batch {batch} partition {partition} pid {os.getpid()}\n"
        os.write(2, line.encode())
        record = os.environ.get("ONCELOG_SPARK_CRASH_LOG")
        if record:
            with open(record, "a", encoding="utf-8") as file:
                file.write(line)
        kill_session()


def hold_point(name: str, batch: int | None, partition: int | None) -> None:
    """Wait at this point for the test's release file (see the module's docstring)."""
    folder = os.environ.get("ONCELOG_SPARK_HOLD_DIR")
    if not folder or not any(
        p.matches(name, batch, partition) for p in _points("ONCELOG_SPARK_HOLD_AT")
    ):
        return
    held = Path(folder) / f"held-{name}-{batch}"
    release = Path(folder) / f"release-{name}-{batch}"
    log.warning(
        "hold point %s (batch %s, partition %s): waiting for %s", name, batch, partition, release
    )
    held.touch()
    deadline = time.monotonic() + HOLD_MAX_S
    while not release.exists():
        if time.monotonic() > deadline:
            log.error(
                "hold point %s (batch %s): no release within %.0f s, going on",
                name,
                batch,
                HOLD_MAX_S,
            )
            return
        time.sleep(0.05)  # polling for the test's file: the wait is for an outside event
    log.warning("hold point %s (batch %s, partition %s): released", name, batch, partition)


def kill_session() -> None:
    """SIGKILL every process of this process's session, this one last (Linux /proc)."""
    session = os.getsid(0)
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            if os.getsid(int(entry)) == session:
                os.kill(int(entry), signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            continue
    os.kill(me, signal.SIGKILL)


def fail_point(name: str, batch: int | None, partition: int | None, attempt: int) -> None:
    if attempt == 0 and any(
        p.matches(name, batch, partition) for p in _points("ONCELOG_SPARK_FAIL_AT")
    ):
        log.warning(
            "failure point %s (batch %s, partition %s): failing this task attempt",
            name,
            batch,
            partition,
        )
        raise InjectedFailure(f"injected failure at {name} (batch {batch}, partition {partition})")
