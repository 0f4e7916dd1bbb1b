"""Per-test CPU accounting for the suite's own cost: with ``ONCELOG_TEST_CPU_LOG=FILE`` set,
each test appends one tab-separated line to FILE: node id, wall seconds, the pytest
process's CPU seconds, and its reaped children's CPU seconds (brokers, JVMs and tools the
test started and waited for; a module-scoped broker counts for its module's last test).
CPU seconds rank tests by what they cost a 2-core CI machine, which wall time on a shared
machine does not. Registered by tests/conftest.py; inert when the variable is unset."""

from __future__ import annotations

import os
import time
from collections.abc import Generator

import pytest

LOG_VARIABLE = "ONCELOG_TEST_CPU_LOG"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, None, None]:
    path = os.environ.get(LOG_VARIABLE)
    if not path:
        yield
        return
    before, wall = os.times(), time.monotonic()
    yield
    after = os.times()
    own = after.user + after.system - before.user - before.system
    children = (after.children_user + after.children_system
                - before.children_user - before.children_system)
    with open(path, "a", encoding="utf-8") as log:
        log.write(f"{item.nodeid}\t{time.monotonic() - wall:.2f}\t{own:.2f}\t{children:.2f}\n")
