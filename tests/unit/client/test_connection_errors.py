"""BrokerConnection's reader task against a fake broker on loopback: a response it cannot
decode fails the waiting request at once instead of killing the task unretrieved (the
request then only ended with the request timeout)."""

from __future__ import annotations

import asyncio
import struct
import time

import pytest

from oncelog.client.aio.connection import BrokerConnection
from oncelog.client.errors import BrokerConnectionError


async def garbage_broker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answers the first request (ApiVersions) with its correlation id and junk."""
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    frame = await reader.readexactly(size)
    correlation_id = frame[4:8]
    body = correlation_id + b"\xff" * 3
    writer.write(struct.pack(">i", len(body)) + body)
    await writer.drain()
    await reader.read()  # until the client goes away
    writer.close()


def test_undecodable_response_fails_the_request_with_a_connection_error() -> None:
    async def scenario() -> float:
        server = await asyncio.start_server(garbage_broker, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        conn = BrokerConnection("127.0.0.1", port, request_timeout_ms=10_000)
        started = time.monotonic()
        try:
            with pytest.raises(BrokerConnectionError, match="undecodable response to api 18"):
                await conn.connect()
            assert not conn.connected
        finally:
            await conn.close()
            server.close()
            await server.wait_closed()
        return time.monotonic() - started

    assert asyncio.run(scenario()) < 5  # not the 10 s request timeout
