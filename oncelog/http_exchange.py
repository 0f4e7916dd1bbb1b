"""One HTTP/1.1 exchange per connection, for the broker's small HTTP endpoints (metrics,
the transactions console): read a request, write the answer, close; a slow, truncated or
oversized request, or a peer that goes away, is dropped with one debug line."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

log = logging.getLogger(__name__)


async def answer_once(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    respond: Callable[[asyncio.StreamReader], Awaitable[bytes]],
    *,
    what: str,
    timeout_s: float,
) -> None:
    """Write ``await respond(reader)`` (the whole response) and close the connection."""
    peer = writer.get_extra_info("peername")
    try:
        async with asyncio.timeout(timeout_s):
            writer.write(await respond(reader))
            await writer.drain()
    except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
            ConnectionError) as exc:
        log.debug("%s request from %s dropped: %r", what, peer, exc)
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
