"""Crash points for fault tests.

Setting ``ONCELOG_CRASH_AT=point[,point...]`` in a broker's environment makes it SIGKILL
itself the first time it passes one of those points, exactly as ``kill -9`` would, so that
tests can stop it at a precise step of a protocol (after a transaction-log record, between
two markers, ...). Unset, each point costs one set lookup.

Points: ``txn.logged.<State>`` after a transaction-log record of that state is appended
(e.g. ``txn.logged.Ongoing``, ``txn.logged.PrepareCommit``; in cluster mode that is before
the in-sync replicas have the record); ``txn.prepared.before_markers`` once EndTxn's
PrepareCommit/PrepareAbort is acknowledged by the in-sync replicas and applied, before any
marker is sent (only on the EndTxn path, not when a coordinator resumes the markers of a
transaction it loaded); ``markers.after_first`` after
the first of several markers of one transaction is appended; ``cleaner.prepared`` once a
log cleaner pass has staged its cleaned segments, ``cleaner.swap.<step>`` just before each
step of swapping them in (``range``, ``sidecars``, ``log``, ``delete``, ``rename``).

Two more hooks make failures that are hard to cause from outside:
``ONCELOG_FAIL_API=key[,key...]`` makes the handler of those API keys raise RuntimeError
(the server must still answer), and ``ONCELOG_IO_ERROR_AT=op:topic-partition[,...]`` makes
that partition's log operation (``append``, ``read``, ``flush``, ...) raise OSError(EIO), as
a failing disk would. ``ONCELOG_METADATA_DELAY_MS=N`` makes the broker apply each watched
metadata change N ms late, as a lagging watch would (other brokers act on a leadership
before this one knows it has it). ``ONCELOG_PAUSE_AT=point[,...]`` makes the broker stop
itself with SIGSTOP the first time it passes the point, as ``kill -STOP`` from outside would
at that exact step (``broker.registered``: right after its registration is written).
"""

from __future__ import annotations

import errno
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


PAUSE_POINTS = set(p for p in os.environ.get("ONCELOG_PAUSE_AT", "").split(",") if p)


def pause_point(name: str) -> None:
    """SIGSTOP this process the first time it reaches ``name`` (if asked to)."""
    if name in PAUSE_POINTS:
        PAUSE_POINTS.discard(name)
        log.critical("pause point %s reached: stopping this process (SIGSTOP)", name)
        for handler in logging.getLogger().handlers:
            handler.flush()
        os.kill(os.getpid(), signal.SIGSTOP)


FAIL_APIS = frozenset(int(k) for k in os.environ.get("ONCELOG_FAIL_API", "").split(",") if k)
METADATA_DELAY_MS = int(os.environ.get("ONCELOG_METADATA_DELAY_MS", "0") or 0)
IO_ERRORS = frozenset(p for p in os.environ.get("ONCELOG_IO_ERROR_AT", "").split(",") if p)


def handler_fault(api_key: int) -> None:
    if FAIL_APIS and api_key in FAIL_APIS:
        raise RuntimeError(f"injected handler failure for API {api_key} (ONCELOG_FAIL_API)")


def io_fault(operation: str, partition: str) -> None:
    if IO_ERRORS and f"{operation}:{partition}" in IO_ERRORS:
        raise OSError(errno.EIO, f"injected I/O error ({operation}, ONCELOG_IO_ERROR_AT)")
