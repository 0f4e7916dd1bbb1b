"""The ``engine`` fixtures: scenario tests of the partition engine run once per engine
(file and memory), as Tansu runs its transaction tests per storage engine."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from oncelog.clock import FakeClock
from oncelog.config import LogConfig
from oncelog.storage.engines import open_engine
from oncelog.storage.unified_log import UnifiedLog

EngineFactory = Callable[..., UnifiedLog]
"""``make_engine(clock=None, name="p-0", *, auto_high_watermark=True, **log_config)``: a new
engine of the test's kind."""

ENGINES = ["file:", "memory:"]


@pytest.fixture(params=ENGINES, ids=lambda url: url.rstrip(":"))
def engine_url(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make_engine(engine_url: str, tmp_path: Path) -> EngineFactory:
    def make(
        clock: FakeClock | None = None,
        name: str = "p-0",
        *,
        auto_high_watermark: bool = True,
        **config: Any,
    ) -> UnifiedLog:
        return open_engine(
            engine_url, tmp_path / name, LogConfig(**config), clock or FakeClock(),
            auto_high_watermark=auto_high_watermark,
        )

    return make


@pytest.fixture
def engine(make_engine: EngineFactory) -> UnifiedLog:
    return make_engine()
