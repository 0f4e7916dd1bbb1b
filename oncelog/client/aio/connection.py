"""One TCP connection to one broker: framing, correlation ids, pipelining, versions.

Requests are written as they come (several may be in flight; Kafka answers them in order
on a connection) and a reader task matches each response frame to its request by
correlation id. The first exchange is ApiVersions; afterwards ``version(api_key)`` is the
highest version both this client and the broker support. A request that gets no answer
within ``request.timeout.ms`` closes the connection (as the Java client does), failing every
request in flight on it with a retriable error.

With SASL credentials (oncelog.client.sasl) the connection authenticates right after
ApiVersions, and when the broker gave the session a lifetime (KIP-368) it re-authenticates
before the next request sent after 85% of it has passed (the Java client picks 85-95%).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import ssl
import struct
import time
from typing import Any

from oncelog.client.errors import (
    BrokerConnectionError,
    KafkaTimeoutError,
    UnsupportedVersionError,
    error_for,
)
from oncelog.client.sasl import SaslCredentials, authenticate
from oncelog.client.wire import (
    CLIENT_VERSIONS,
    TRANSACTION_VERSION_FEATURE,
    TRANSACTIONS_V1_MAX,
    decode_response,
    encode_request,
    negotiate,
    request,
    response_correlation_id,
)
from oncelog.errors import ErrorCode
from oncelog.protocol import versions as api

logger = logging.getLogger(__name__)

__all__ = ["BrokerConnection"]

_SIZE = struct.Struct(">i")
_MAX_FRAME = 256 * 1024 * 1024
SOFTWARE_NAME = "oncelog-python"
SOFTWARE_VERSION = "0.1.0"


class BrokerConnection:
    def __init__(
        self,
        host: str,
        port: int,
        *,
        node_id: int = -1,
        client_id: str | None = "oncelog",
        request_timeout_ms: int = 30000,
        connect_timeout_ms: int = 10000,
        tls: ssl.SSLContext | None = None,
        sasl: SaslCredentials | None = None,
    ) -> None:
        self.host = host
        self.tls = tls  # SSL / SASL_SSL: the TLS context (None: plaintext)
        self.port = port
        self.node_id = node_id
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.sasl = sasl
        self._reauthenticate_at: float | None = None  # monotonic seconds
        self._auth_lock = asyncio.Lock()  # requests wait while re-authenticating
        self.connect_timeout_ms = connect_timeout_ms
        self.broker_versions: dict[int, tuple[int, int]] = {}
        # The broker's finalized ``transaction.version`` (ApiVersions v3+; 0 when absent).
        self.transaction_version = 0
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._read_task: asyncio.Task[None] | None = None
        self._pending: dict[int, tuple[int, int, asyncio.Future[Any]]] = {}
        self._correlation = itertools.count(1)
        self._closed = False
        self._close_reason: str = ""
        self._closing: asyncio.Task[None] | None = None  # a close begun by a timeout

    def __repr__(self) -> str:
        return f"<BrokerConnection node={self.node_id} {self.host}:{self.port}>"

    @property
    def connected(self) -> bool:
        return self._writer is not None and not self._closed

    # ---------------------------------------------------------------- lifecycle

    async def connect(self) -> None:
        try:
            async with asyncio.timeout(self.connect_timeout_ms / 1000):
                self._reader, self._writer = await asyncio.open_connection(
                    self.host, self.port, ssl=self.tls,
                    server_hostname=self.host if self.tls is not None else None,
                )
        except ssl.SSLCertVerificationError as exc:
            self._closed = True
            raise BrokerConnectionError(
                f"TLS with {self.host}:{self.port} failed: {exc.verify_message or exc}"
            ) from None
        except (OSError, TimeoutError) as exc:
            self._closed = True
            raise BrokerConnectionError(
                f"cannot connect to {self.host}:{self.port}: {exc or type(exc).__name__}"
            ) from None
        self._read_task = asyncio.get_running_loop().create_task(
            self._read_loop(), name=f"oncelog-conn-{self.host}:{self.port}"
        )
        await self._negotiate()
        if self.sasl is not None:
            await self._authenticate()
        logger.debug("connected to node %s at %s:%s", self.node_id, self.host, self.port)

    async def _negotiate(self) -> None:
        version = CLIENT_VERSIONS[api.API_VERSIONS][1]
        for _ in range(2):
            body = request(
                api.API_VERSIONS,
                version,
                client_software_name=SOFTWARE_NAME,
                client_software_version=SOFTWARE_VERSION,
            )
            try:
                response = await self.send(body)
            except BrokerConnectionError:
                raise
            if response.error_code == ErrorCode.unsupported_version:
                offered = {
                    int(k.api_key): (int(k.min_version), int(k.max_version))
                    for k in response.api_keys
                }
                chosen = negotiate(api.API_VERSIONS, offered.get(api.API_VERSIONS, (0, 0)))
                if chosen is None or chosen == version:
                    break
                version = chosen
                continue
            if response.error_code != ErrorCode.none:
                raise error_for(response.error_code, "ApiVersions")
            self.broker_versions = {
                int(k.api_key): (int(k.min_version), int(k.max_version)) for k in response.api_keys
            }
            self.transaction_version = max(
                (int(f.max_version_level) for f in getattr(response, "finalized_features", ())
                 if f.name == TRANSACTION_VERSION_FEATURE),
                default=0,
            )
            return
        await self.close("ApiVersions negotiation failed")
        raise UnsupportedVersionError(f"{self.host}:{self.port} refused every ApiVersions version")

    async def _authenticate(self) -> None:
        assert self.sasl is not None
        version = self.version(api.SASL_AUTHENTICATE)
        try:
            lifetime_ms = await authenticate(functools.partial(self.send, sasl_step=True),
                                             self.sasl, version)
        except Exception:
            await self.close("SASL authentication failed")
            raise
        self._reauthenticate_at = (time.monotonic() + 0.85 * lifetime_ms / 1000
                                   if lifetime_ms > 0 else None)
        logger.debug("authenticated to %s:%s as %s (%s), session lifetime %d ms", self.host,
                     self.port, self.sasl.username, self.sasl.mechanism, lifetime_ms)

    async def close(self, reason: str = "closed") -> None:
        if self._closed and self._writer is None:
            return
        self._closed = True
        self._close_reason = reason
        self._fail_pending(BrokerConnectionError(f"connection to {self.host}:{self.port} {reason}"))
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
        task, self._read_task = self._read_task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task

    def _fail_pending(self, exc: Exception) -> None:
        pending, self._pending = self._pending, {}
        for _, _, future in pending.values():
            if not future.done():
                future.set_exception(exc)
                future.exception()  # the waiter may have been cancelled; no "never retrieved"

    # ---------------------------------------------------------------- requests

    @property
    def transactions_v2(self) -> bool:
        """The broker finalized transactions v2 (KIP-890 part 2): Produce v12 adds partitions
        to the transaction and EndTxn v5 bumps the epoch of every transaction."""
        return self.transaction_version >= 2

    def version(self, api_key: int) -> int:
        """The version to use for ``api_key``; UnsupportedVersionError if none fits. Produce
        and EndTxn stay below their transactions v2 versions unless the broker finalized it."""
        chosen = negotiate(api_key, self.broker_versions.get(api_key))
        if chosen is None:
            raise UnsupportedVersionError(
                f"broker {self.host}:{self.port} serves api {api_key} in versions "
                f"{self.broker_versions.get(api_key)}, client needs {CLIENT_VERSIONS.get(api_key)}"
            )
        if not self.transactions_v2 and api_key in TRANSACTIONS_V1_MAX:
            chosen = min(chosen, TRANSACTIONS_V1_MAX[api_key])
        return chosen

    def supports(self, api_key: int) -> bool:
        return negotiate(api_key, self.broker_versions.get(api_key)) is not None

    async def send(
        self, body: Any, *, expect_response: bool = True, timeout_ms: int | None = None,
        sasl_step: bool = False,
    ) -> Any:
        """Send one request entity; return the decoded response (None without one)."""
        if self._closed or self._writer is None:
            raise BrokerConnectionError(f"connection to {self.host}:{self.port} is closed")
        if not sasl_step and (self._reauthenticate_at is not None or self._auth_lock.locked()):
            async with self._auth_lock:
                due = self._reauthenticate_at
                if due is not None and time.monotonic() >= due and not self._closed:
                    self._reauthenticate_at = None
                    await self._authenticate()
        correlation_id, frame, future = self._framed(body, expect_response)
        try:
            self._writer.write(frame)
            await self._writer.drain()
        except (OSError, RuntimeError) as exc:
            await self.close(f"write failed: {exc}")
            raise BrokerConnectionError(f"write to {self.host}:{self.port} failed: {exc}") from None
        if future is None:
            return None
        timeout = (timeout_ms if timeout_ms is not None else self.request_timeout_ms) / 1000
        try:
            async with asyncio.timeout(timeout):
                return await asyncio.shield(future)
        except TimeoutError:
            self._pending.pop(correlation_id, None)
            await self.close("timed out")
            raise self._no_response(int(body.__api_key__), timeout) from None

    def send_nowait(self, body: Any) -> asyncio.Future[Any] | None:
        """Write a request that expects a response at once, without a task: the future of
        its decoded response, failed with ``KafkaTimeoutError`` after ``request.timeout.ms``
        (the connection then closes, as with ``send``). None when the request cannot be
        written now (closed, or due to re-authenticate first): then ``send`` it."""
        if self._closed or self._writer is None or self._auth_lock.locked():
            return None
        due = self._reauthenticate_at
        if due is not None and time.monotonic() >= due:
            return None
        correlation_id, frame, future = self._framed(body, expect_response=True)
        assert future is not None
        try:
            self._writer.write(frame)
        except (OSError, RuntimeError):
            del self._pending[correlation_id]
            return None
        timer = asyncio.get_running_loop().call_later(
            self.request_timeout_ms / 1000, self._timed_out, correlation_id, int(body.__api_key__)
        )
        future.add_done_callback(lambda _: timer.cancel())
        return future

    def _framed(
        self, body: Any, expect_response: bool
    ) -> tuple[int, bytes, asyncio.Future[Any] | None]:
        """The request's correlation id and frame, and the future its response settles
        (registered as pending; None without a response)."""
        correlation_id = next(self._correlation)
        frame = encode_request(correlation_id, self.client_id, body)
        future: asyncio.Future[Any] | None = None
        if expect_response:
            future = asyncio.get_running_loop().create_future()
            self._pending[correlation_id] = (int(body.__api_key__), int(body.__version__), future)
        return correlation_id, frame, future

    def _timed_out(self, correlation_id: int, api_key: int) -> None:
        entry = self._pending.pop(correlation_id, None)
        if entry is None or entry[2].done():
            return
        entry[2].set_exception(self._no_response(api_key, self.request_timeout_ms / 1000))
        self._closing = asyncio.get_running_loop().create_task(self.close("timed out"))

    def _no_response(self, api_key: int, timeout_s: float) -> KafkaTimeoutError:
        return KafkaTimeoutError(
            f"no response to api {api_key} from {self.host}:{self.port} within {timeout_s:.1f}s"
        )

    async def _read_loop(self) -> None:
        assert self._reader is not None
        reason = "closed by broker"
        try:
            while True:
                prefix = await self._reader.readexactly(4)
                (size,) = _SIZE.unpack(prefix)
                if size < 4 or size > _MAX_FRAME:
                    reason = f"bad frame size {size}"
                    break
                frame = await self._reader.readexactly(size)
                correlation_id = response_correlation_id(frame)
                entry = self._pending.pop(correlation_id, None)
                if entry is None:
                    logger.warning(
                        "%r: response to unknown correlation id %d", self, correlation_id
                    )
                    continue
                api_key, version, future = entry
                try:
                    body = _decode(api_key, version, frame)
                except Exception as exc:  # kio raises various errors on bad bytes
                    reason = f"undecodable response to api {api_key} v{version}: {exc!r}"
                    if not future.done():
                        future.set_exception(BrokerConnectionError(reason))
                    break
                if not future.done():
                    future.set_result(body)
        except (asyncio.IncompleteReadError, OSError) as exc:
            reason = f"connection lost: {exc or type(exc).__name__}"
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug: fail the requests rather than die unretrieved
            logger.exception("%r: reading responses failed", self)
            reason = f"reading responses failed: {type(exc).__name__}: {exc}"
        self._closed = True
        self._close_reason = reason
        self._fail_pending(BrokerConnectionError(f"{self.host}:{self.port}: {reason}"))
        if self._writer is not None:
            self._writer.close()


def _decode(api_key: int, version: int, frame: bytes) -> Any:
    try:
        return decode_response(api_key, version, frame)
    except Exception:
        if api_key != api.API_VERSIONS or version == 0:
            raise
        # A broker that does not know our ApiVersions version answers with v0.
        return decode_response(api_key, 0, frame)
