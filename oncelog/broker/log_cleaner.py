"""The broker's log cleaner: one background task that compacts every partition whose
``cleanup.policy`` includes compact (Kafka's LogCleaner and LogCleanerManager, in the small).

Each tick (``log.cleaner.backoff.ms``) walks the partitions; for each compacted one it decides
the cleanable range on the loop (``cleaner_run.plan_clean``), runs the slow part in one worker
thread (``prepare_clean``: ``log.cleaner.threads`` is bounded to one on a 2-core machine) and
swaps the result in back on the loop (``swap_cleaned``). Passes never overlap.

What it records per partition, for metrics and ``oncelog topics describe``: the dirty ratio
last computed, the time and result of the last pass, and whether a pass is running or the
last one failed (``CleanerStatus``). A failed pass is logged and retried on the next tick;
the staging files it wrote are removed.

A pass and the operations that close or move a partition's log (topic deletion, a move to
another log directory) exclude each other as Kafka's abortAndPauseCleaning makes them: the
registry calls ``abort_and_wait`` first; the worker stops at its next batch, removes what it
staged and the operation goes on. Retention waits for a running pass (``cleaning``). The
worker reads only through its plan's own duplicated fds, so even a log closed under it never
makes it read another file.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, replace

from oncelog.broker.partition import Partition
from oncelog.broker.partitions import PartitionRegistry
from oncelog.clock import Clock
from oncelog.config import BrokerConfig
from oncelog.faults import crash_point
from oncelog.storage.cleaner import map_capacity
from oncelog.storage.cleaner_run import (
    CleanAborted,
    CleanPlan,
    CleanResult,
    discard_prepared,
    find_cleanable,
    plan_clean,
    prepare_clean,
    swap_cleaned,
)

__all__ = ["CleanerStatus", "LogCleaner"]

log = logging.getLogger(__name__)

_ABORT_WAIT_S = 30.0


def _crash_step(name: str) -> None:
    """The swap's steps as crash points: ``cleaner.swap.range`` ... ``cleaner.swap.rename``
    (oncelog.faults; the kill -9 tests of compaction)."""
    crash_point(f"cleaner.{name}")


@dataclass(frozen=True, slots=True)
class CleanerStatus:
    """One compacted partition as the cleaner last saw it. ``state`` is ``idle``,
    ``cleaning`` or ``failed`` (the last pass raised; retried next tick)."""

    dirty_ratio: float
    last_clean_ms: int = -1  # -1: never cleaned since the broker started
    state: str = "idle"
    last_result: CleanResult | None = None


class LogCleaner:
    """Owns the cleaner's state; ``tick`` is the background task's body."""

    def __init__(self, partitions: PartitionRegistry, config: BrokerConfig, clock: Clock) -> None:
        self.partitions = partitions
        self.clock = clock
        self.capacity = map_capacity(int(config["log.cleaner.dedupe.buffer.size"]))
        self.cleaning = False  # a pass is running (retention waits)
        self._status: dict[tuple[str, int], CleanerStatus] = {}
        self._running: tuple[Partition, CleanPlan] | None = None

    def status(self, topic: str, index: int) -> CleanerStatus | None:
        """The partition's cleaner status; None when it is not compacted (or not seen yet)."""
        return self._status.get((topic, index))

    def abort_and_wait(self, partition: Partition) -> None:
        """Stop a pass over ``partition`` before its log is closed, moved or deleted: the
        worker stops at its next batch; this waits for it (briefly, on the loop, as Kafka's
        abortAndPauseCleaning blocks its caller)."""
        running = self._running
        if running is None or running[0] is not partition:
            return
        plan = running[1]
        plan.abort.set()
        if not plan.done.wait(_ABORT_WAIT_S):
            log.error("%s: the cleaner did not stop within %.0f s", partition.name,
                      _ABORT_WAIT_S)

    async def tick(self) -> None:
        """One pass over every compacted partition that needs one."""
        seen: set[tuple[str, int]] = set()
        for partition in self.partitions.partitions():
            key = (partition.topic, partition.index)
            if partition.offline is not None:
                continue
            now = self.clock.now_ms()
            found = find_cleanable(partition.raw_log, now_ms=now)
            if found is None:
                continue
            seen.add(key)
            status = replace(self._status.get(key) or CleanerStatus(0.0),
                             dirty_ratio=found.dirty_ratio)
            self._status[key] = status
            plan = plan_clean(partition.raw_log, now_ms=now, map_capacity=self.capacity,
                              found=found)
            if plan is None:
                continue
            self._status[key] = replace(status, state="cleaning")
            self._status[key] = await self._run(partition, plan, self._status[key])
        for key in list(self._status):
            if key not in seen and self.partitions.find(*key) is None:
                del self._status[key]

    async def _run(self, partition: Partition, plan: CleanPlan,
                   status: CleanerStatus) -> CleanerStatus:
        self.cleaning = True
        self._running = (partition, plan)
        try:
            prepared = await asyncio.to_thread(prepare_clean, plan)
        except CleanAborted:
            log.info("%s: cleaning aborted (the log is being closed, moved or deleted)",
                     partition.name)
            return replace(status, state="idle")
        except Exception:
            log.exception("%s: cleaning failed; retried on the next tick", partition.name)
            return replace(status, state="failed")
        finally:
            self._running = None
            self.cleaning = False
        if partition.offline is not None or partition.raw_log.log is not plan.log \
                or self.partitions.find(partition.topic, partition.index) is not partition:
            discard_prepared(prepared)
            return replace(status, state="idle")
        crash_point("cleaner.prepared")
        try:
            result = swap_cleaned(prepared, step=_crash_step)
        except Exception:
            log.exception("%s: swapping the cleaned segments in failed", partition.name)
            return replace(status, state="failed")
        if result is None:
            return replace(status, state="idle")
        now = self.clock.now_ms()
        after = find_cleanable(partition.raw_log, now_ms=now)
        return CleanerStatus(after.dirty_ratio if after is not None else 0.0, now, "idle",
                             result)
