"""Which asyncio event loop ``oncelog serve`` runs on.

``auto`` (the default) takes uvloop when it is installed (a dependency of the package, so
it normally is) and the standard library's loop otherwise; ``uvloop`` insists on it (an
error when it is missing) and ``asyncio`` keeps the standard loop. The broker's code is the
same on both: uvloop implements the asyncio loop interface, at a lower cost per socket event
and per scheduled callback, which is most of a small request's overhead. The choice comes
from ``--event-loop`` or, when that is not given, the ``ONCELOG_EVENT_LOOP`` environment
variable (useful for test fixtures and benchmarks that start brokers indirectly).
"""

from __future__ import annotations

import asyncio
import importlib
import os
from collections.abc import Callable

EVENT_LOOPS = ("auto", "uvloop", "asyncio")
ENV_VARIABLE = "ONCELOG_EVENT_LOOP"

LoopFactory = Callable[[], asyncio.AbstractEventLoop]


class EventLoopUnavailable(Exception):
    """``uvloop`` was asked for and cannot be imported."""


def requested(cli_choice: str | None) -> str:
    """The choice in force: the command line's, else the environment's, else ``auto``."""
    choice = (cli_choice or os.environ.get(ENV_VARIABLE) or "auto").strip().lower()
    if choice not in EVENT_LOOPS:
        raise ValueError(f"unknown event loop {choice!r}; one of {', '.join(EVENT_LOOPS)}")
    return choice


def loop_factory(choice: str) -> tuple[str, LoopFactory | None]:
    """The loop's name and a factory for ``asyncio.Runner`` (None: the standard loop)."""
    if choice == "asyncio":
        return "asyncio", None
    try:
        uvloop = importlib.import_module("uvloop")
    except ImportError as exc:
        if choice == "uvloop":
            raise EventLoopUnavailable(f"uvloop is not installed: {exc}") from exc
        return "asyncio", None
    factory: LoopFactory = uvloop.new_event_loop
    return "uvloop", factory
