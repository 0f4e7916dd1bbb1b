"""Test doubles for the transaction coordinator: an in-memory log, a recording marker writer,
and a fake timer so that sweeps and marker retries move only when the test moves time."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from oncelog.clock import FakeClock
from oncelog.config import BrokerConfig
from oncelog.coordinator.producer_ids import ProducerIdManager
from oncelog.coordinator.transaction import (
    InMemoryTxnLogStore,
    TopicPartition,
    TransactionCoordinator,
)
from oncelog.errors import ErrorCode

T = TypeVar("T")

TIMEOUT_MS = 60_000
TXN = "txn-a"
A0: TopicPartition = ("a", 0)
A1: TopicPartition = ("a", 1)
B0: TopicPartition = ("b", 0)


@dataclass(frozen=True)
class MarkerCall:
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool
    partitions: tuple[TopicPartition, ...]


@dataclass
class RecordingMarkerWriter:
    """Answers NONE unless ``plan[tp]`` has error codes left to answer first."""

    calls: list[MarkerCall] = field(default_factory=list)
    plan: dict[TopicPartition, list[ErrorCode]] = field(default_factory=dict)
    raise_times: int = 0
    # (partition, commit, producer id, epoch) of every marker that was written
    written: list[tuple[TopicPartition, bool, int, int]] = field(default_factory=list)

    async def write_markers(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        partitions: list[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        self.calls.append(
            MarkerCall(producer_id, producer_epoch, coordinator_epoch, commit, tuple(partitions))
        )
        await asyncio.sleep(0)
        if self.raise_times:
            self.raise_times -= 1
            raise OSError("disk on fire")
        out = {}
        for tp in partitions:
            queued = self.plan.get(tp)
            code = queued.pop(0) if queued else ErrorCode.none
            if code is ErrorCode.none:
                self.written.append((tp, commit, producer_id, producer_epoch))
            out[tp] = code
        return out


class FakeTimer:
    """``sleep`` waits until the test advances the FakeClock past its deadline."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.sleepers: list[tuple[int, asyncio.Future[None]]] = []

    async def sleep(self, seconds: float) -> None:
        deadline = self.clock.monotonic_ms() + max(1, math.ceil(seconds * 1000))
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.sleepers.append((deadline, fut))
        await fut

    def _wake(self) -> None:
        now = self.clock.monotonic_ms()
        keep = []
        for deadline, fut in self.sleepers:
            if fut.done():
                continue
            if deadline <= now:
                fut.set_result(None)
            else:
                keep.append((deadline, fut))
        self.sleepers = keep

    async def advance(self, ms: int) -> None:
        target = self.clock.monotonic_ms() + ms
        while True:
            await settle()
            due = [d for d, f in self.sleepers if not f.done() and d <= target]
            if not due:
                break
            step = min(due) - self.clock.monotonic_ms()
            if step > 0:
                self.clock.advance(step)
            self._wake()
        rest = target - self.clock.monotonic_ms()
        if rest > 0:
            self.clock.advance(rest)
        await settle()


async def settle() -> None:
    for _ in range(30):
        await asyncio.sleep(0)


@dataclass
class Env:
    clock: FakeClock
    store: InMemoryTxnLogStore
    markers: RecordingMarkerWriter
    timer: FakeTimer
    pid_path: Path
    config: BrokerConfig
    coord: TransactionCoordinator

    def restart(self) -> Env:
        """A new coordinator over the same log and producer id file (a broker restart)."""
        coord = TransactionCoordinator(
            self.config, self.store, ProducerIdManager(self.pid_path), self.markers,
            self.clock, sleep=self.timer.sleep, end_txn_wait_ms=20,
        )
        return Env(self.clock, self.store, self.markers, self.timer, self.pid_path,
                   self.config, coord)

    async def advance(self, ms: int) -> None:
        await self.timer.advance(ms)


def make_env(
    tmp_path: Path, config: Mapping[str, str] | None = None, *, load: bool = True
) -> Env:
    clock = FakeClock()
    broker_config = BrokerConfig({"transaction.state.log.num.partitions": "4", **(config or {})})
    store = InMemoryTxnLogStore(4)
    markers = RecordingMarkerWriter()
    timer = FakeTimer(clock)
    pid_path = tmp_path / "producer_ids"
    coord = TransactionCoordinator(
        broker_config, store, ProducerIdManager(pid_path), markers, clock,
        sleep=timer.sleep, end_txn_wait_ms=20,
    )
    if load:
        coord.load()
    return Env(clock, store, markers, timer, pid_path, broker_config, coord)


def run(env: Env, body: Callable[[], Awaitable[T]]) -> T:
    """Run ``body`` while the coordinator's ``run()`` is active, then stop it."""

    async def main() -> T:
        task = asyncio.create_task(env.coord.run())
        await env.coord.wait_running()
        try:
            return await body()
        finally:
            task.cancel()
            with suppress(asyncio.CancelledError):
                await task

    return asyncio.run(main())
