"""Crash points for fault tests.

Setting ``ONCELOG_CRASH_AT=point[,point...]`` in a broker's environment makes it SIGKILL
itself the first time it passes one of those points, exactly as ``kill -9`` would, so that
tests can stop it at a precise step of a protocol (after a transaction-log record, between
two markers, ...). Unset, each point costs one set lookup.

Points: ``txn.logged.<State>`` after a transaction-log record of that state is appended
(e.g. ``txn.logged.Ongoing``, ``txn.logged.PrepareCommit``); ``markers.after_first`` after
the first of several markers of one transaction is appended.
"""

from __future__ import annotations

import logging
import os
import signal

log = logging.getLogger(__name__)

CRASH_POINTS = frozenset(p for p in os.environ.get("ONCELOG_CRASH_AT", "").split(",") if p)


def crash_point(name: str) -> None:
    if name in CRASH_POINTS:
        log.critical("crash point %s reached: killing this process (SIGKILL)", name)
        for handler in logging.getLogger().handlers:
            handler.flush()
        os.kill(os.getpid(), signal.SIGKILL)
