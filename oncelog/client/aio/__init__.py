"""The asyncio core of oncelog.client: ``AIOProducer``, ``AIOConsumer``, ``AIOAdmin``.

Use these directly from asyncio code (every method is a coroutine except the trivial
accessors); the synchronous classes in ``oncelog.client`` run them on a loop thread.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from oncelog.client.aio.admin import AIOAdmin
    from oncelog.client.aio.consumer import AIOConsumer
    from oncelog.client.aio.producer import AIOProducer

__all__ = ["AIOAdmin", "AIOConsumer", "AIOProducer"]

# Imported on first use (PEP 562): the broker's connections to its peers use
# ``oncelog.client.aio.connection`` without the producer, consumer and admin cores.
_HOMES = {"AIOAdmin": "admin", "AIOConsumer": "consumer", "AIOProducer": "producer"}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
