"""Crash and failure points of the Spark connector, for fault tests.

``ONCELOG_SPARK_CRASH_AT=point[@batch][,...]`` makes the process group of the Spark driver
die by SIGKILL the first time the connector passes that point (of that micro-batch, if
given). In local mode the driver JVM, its Python workers and the executors are one process
group, so this is what ``kill -9`` of the driver does; a test starts the driver in its own
session so that only the driver goes.

``ONCELOG_SPARK_FAIL_AT=point[@batch][:partition][,...]`` instead raises
``InjectedFailure`` in the task, on its first attempt only: Spark retries the task (with
``local[N,maxFailures]``), and the retry passes.

Points: ``task.write`` (a task has sent its first records, before prepare),
``task.prepared`` (a task prepared its transaction, before returning its commit message),
``commit.start`` (the driver's commit, before completing anything), ``commit.after_first``
(after completing the first transaction of several), ``commit.done`` (every transaction
completed, before Spark writes its commit log). Unset, each point costs a dict lookup.
"""

from __future__ import annotations

import logging
import os
import signal
from dataclasses import dataclass

log = logging.getLogger(__name__)

__all__ = ["InjectedFailure", "crash_point", "fail_point", "parse_points"]


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
    if any(p.matches(name, batch, partition) for p in _points("ONCELOG_SPARK_CRASH_AT")):
        log.critical(
            "crash point %s (batch %s, partition %s): killing the driver's process group (SIGKILL)",
            name,
            batch,
            partition,
        )
        for handler in logging.getLogger().handlers:
            handler.flush()
        os.killpg(os.getpgid(0), signal.SIGKILL)


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
