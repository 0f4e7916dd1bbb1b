"""Time as an injected dependency: the sans-IO core never reads the wall clock itself."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int:
        """Wall-clock milliseconds since the epoch (for timestamps)."""
        ...

    def monotonic_ms(self) -> int:
        """Monotonic milliseconds (for timeouts and intervals)."""
        ...


class SystemClock:
    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000


class FakeClock:
    """A clock for tests: time moves only when told to."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._now = start_ms
        self._mono = 0

    def now_ms(self) -> int:
        return self._now

    def monotonic_ms(self) -> int:
        return self._mono

    def advance(self, ms: int) -> None:
        self._now += ms
        self._mono += ms
