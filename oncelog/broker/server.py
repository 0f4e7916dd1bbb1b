"""The asyncio TCP server: framing, per-connection ordering, dispatch.

Each connection reads one frame at a time and answers in order, as Kafka does (clients may
pipeline; responses keep request order). Errors are translated here, at one boundary:
an unknown API key or version, or a malformed request, is logged and the connection is
closed (Kafka does the same); an unsupported ApiVersions version is answered in v0 format
with UNSUPPORTED_VERSION so the client can fall back. A decoded request whose handler fails
is always answered (``oncelog.protocol.error_response``): UNKNOWN_SERVER_ERROR, or the code
of a KafkaError, in every entry, and the connection stays open.

Per request, the path is kept short (most of a small transaction's broker CPU is here): a
plain connection's ``connections.max.idle.ms`` is one lazy timer (``IdleWatch``) rather than
a timeout per read, and a response is handed to the transport without ``drain()`` unless the
kernel left some of it buffered (the socket is backed up).

The server knows the broker only through the services it is started with
(``BrokerContext``), which every request's ``RequestContext`` carries to its handler.

It serves every listener of the broker (oncelog.broker.listeners), one asyncio server each,
sharing the connection limit and the request slots. A connection's ``Session`` is made
once, when it is accepted (``connection_session``): the listener's name and security
protocol, and the principal — ``User:<subject DN>`` of a TLS client certificate, else
``User:ANONYMOUS``. A TLS handshake that fails (a plaintext client, an untrusted or missing
certificate) closes only that connection, with one log line.

On a SASL listener (SASL_PLAINTEXT, SASL_SSL) each connection passes through its
``SaslConnection`` gate first (oncelog.broker.sasl): until it is authenticated only the
SASL exchange is served, and its requests then run as the authenticated principal.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
from typing import Any

from oncelog.broker.api import HANDLERS, SUPPORTED, RequestContext
from oncelog.broker.api.api_versions import unsupported_version_response
from oncelog.broker.context import BrokerContext
from oncelog.broker.listeners import EndPoint, Listener
from oncelog.broker.sasl import SASL_PROTOCOLS, SaslConnection
from oncelog.config import BrokerConfig
from oncelog.errors import ErrorCode, KafkaError
from oncelog.faults import handler_fault
from oncelog.protocol import versions
from oncelog.protocol.codec import (
    FrameTooLarge,
    RequestHeader,
    decode_request,
    encode_response,
    frame_size,
    parse_request_header,
)
from oncelog.protocol.error_response import error_response
from oncelog.security.principal import ANONYMOUS, Session
from oncelog.security.tls import principal_from_certificate

log = logging.getLogger(__name__)

PRODUCE_API_KEY = 0


def connection_session(listener: EndPoint, writer: asyncio.StreamWriter, host: str) -> Session:
    """Who is on a newly accepted connection of ``listener`` (see the module docstring).
    SASL listeners start anonymous here and are authenticated by their SASL exchange."""
    certificate = None
    ssl_object = writer.get_extra_info("ssl_object")
    if ssl_object is not None:
        certificate = ssl_object.getpeercert()
    return Session(principal_from_certificate(certificate), host, listener.name,
                   listener.protocol)


class IdleWatch:
    """Closes a connection that has been idle for ``connections.max.idle.ms``.

    One timer per connection, re-armed lazily: each request only records when it ended
    (``touch``); when the timer fires it closes the transport if the connection is neither
    in a request nor active since, and otherwise sleeps again until the idle limit after the
    last activity. Closing the transport ends the connection's pending read (end of file).
    """

    __slots__ = ("_handle", "_host", "_idle_s", "_last", "_loop", "_transport", "busy")

    def __init__(self, idle_s: float, transport: asyncio.BaseTransport, host: str) -> None:
        self._loop = asyncio.get_running_loop()
        self._idle_s = idle_s
        self._transport = transport
        self._host = host
        self._last = self._loop.time()
        self.busy = False
        self._handle: asyncio.TimerHandle | None = self._loop.call_at(
            self._last + idle_s, self._check)

    def touch(self) -> None:
        """A request ended now."""
        self.busy = False
        self._last = self._loop.time()

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _check(self) -> None:
        now = self._loop.time()
        due = self._last + self._idle_s
        if self.busy:
            due = now + self._idle_s
        elif due <= now:
            self._handle = None
            log.info("closing idle connection from %s", self._host)
            self._transport.close()
            return
        self._handle = self._loop.call_at(due, self._check)


class Server:
    def __init__(
        self,
        config: BrokerConfig,
        host: str = "127.0.0.1",
        port: int = 0,
        services: BrokerContext | None = None,
        *,
        listeners: tuple[Listener, ...] | None = None,
    ) -> None:
        self.config = config
        self.services = services  # set by start(); handlers receive it
        self.listeners = listeners or (Listener(EndPoint("PLAINTEXT", host, port, "PLAINTEXT")),)
        self.bound: list[EndPoint] = []  # the listeners' endpoints with their bound ports
        self._servers: list[asyncio.Server] = []
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._busy: set[asyncio.Task[None]] = set()  # connections inside a request
        # Kafka's queued.max.requests: requests read but not yet answered, over all
        # connections; when they are all taken, connections wait before handling more.
        self._request_slots = asyncio.Semaphore(int(config["queued.max.requests"]))
        self._stopping = False

    def _sasl_gate(self, session: Session) -> SaslConnection | None:
        """The SASL exchange a connection of a SASL listener must pass (None otherwise)."""
        if session.security_protocol not in SASL_PROTOCOLS or self.services is None:
            return None
        assert self.services.credentials is not None
        return SaslConnection(self.config, self.services.credentials, session.listener,
                              session.security_protocol, session.client_host)

    @property
    def host(self) -> str:
        """The first listener's host (the one ``oncelog ready on`` names)."""
        return self.listeners[0].endpoint.host

    @property
    def port(self) -> int:
        """The first listener's port (bound once ``bind`` ran)."""
        return self.bound[0].port if self.bound else self.listeners[0].endpoint.port

    async def bind(self) -> None:
        """Bind every listening socket without accepting yet (an OSError if an address is
        busy), so that a busy port fails before the data directory is touched."""
        for listener in self.listeners:
            endpoint = listener.endpoint
            try:
                server = await asyncio.start_server(
                    functools.partial(self._on_connection, endpoint), endpoint.host or None,
                    endpoint.port, reuse_address=True, limit=2**20, start_serving=False,
                    ssl=listener.tls, ssl_handshake_timeout=10.0 if listener.tls else None,
                )
            except OSError:
                for bound in self._servers:
                    bound.close()
                raise
            self._servers.append(server)
            port = server.sockets[0].getsockname()[1]
            self.bound.append(dataclasses.replace(endpoint, port=port))
            log.info("listener %s bound on %s:%d (%s)", endpoint.name, endpoint.host, port,
                     endpoint.protocol)
        self._server = self._servers[0]

    async def start(self, services: BrokerContext) -> None:
        """Accept connections, answering them with ``services`` (binding first if ``bind``
        was not called)."""
        self.services = services
        if self._server is None:
            await self.bind()
        for server in self._servers:
            await server.start_serving()

    async def stop(self) -> None:
        """Stop accepting, let in-flight requests finish, then close every connection."""
        self._stopping = True
        for server in self._servers:
            server.close()
        for _ in range(300):  # up to ~30 s for in-flight requests
            if not self._busy:
                break
            await asyncio.sleep(0.1)
        for task in list(self._connections):
            task.cancel()
        for task in list(self._connections):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for server in self._servers:
            await server.wait_closed()

    async def _on_connection(
        self, listener: EndPoint, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        peer = writer.get_extra_info("peername")
        host = peer[0] if peer else "?"
        if self._stopping or len(self._connections) >= int(self.config["max.connections"]):
            log.warning("refusing connection from %s: %s", peer,
                        "stopping" if self._stopping else "max.connections reached")
            writer.close()
            return
        self._connections.add(task)
        try:
            session = connection_session(listener, writer, host)
            # authenticated connections at INFO (the audit trail), anonymous ones at DEBUG
            log.log(logging.DEBUG if session.principal == ANONYMOUS else logging.INFO,
                    "connection from %s on listener %s as %s", peer, listener.name,
                    session.principal)
            await self._serve(reader, writer, session, task, self._sasl_gate(session))
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("connection from %s failed", peer)
        finally:
            self._connections.discard(task)
            self._busy.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _serve(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        session: Session,
        task: asyncio.Task[None],
        sasl: SaslConnection | None = None,
    ) -> None:
        host = session.client_host
        max_bytes = int(self.config["socket.request.max.bytes"])
        idle_s = int(self.config["connections.max.idle.ms"]) / 1000
        transport = writer.transport
        # A plain connection's idle limit is one lazy timer (not a timeout per read); a SASL
        # connection keeps a deadline per read (the authentication deadline until then).
        idle = None if sasl is not None else IdleWatch(idle_s, transport, host)
        try:
            while not self._stopping:
                if idle is not None:
                    prefix = await reader.readexactly(4)
                    idle.busy = True  # the idle limit bounds the wait for a frame to begin
                    try:
                        size = frame_size(prefix, max_bytes)
                    except FrameTooLarge as exc:
                        log.warning("closing connection from %s: %s (socket.request.max.bytes)",
                                    host, exc)
                        return
                    frame = await reader.readexactly(size)
                else:
                    assert sasl is not None
                    read = await self._read_sasl_frame(reader, sasl, host, max_bytes, idle_s)
                    if read is None:
                        return
                    frame = read
                    reply = await sasl.on_frame(frame)
                    if reply is not None:
                        if reply.frame is not None:
                            writer.write(reply.frame)
                            await writer.drain()
                        if reply.close:
                            return
                        continue
                    if sasl.authenticated:
                        session = sasl.session()
                self._busy.add(task)
                try:
                    async with self._request_slots:
                        response = await self._handle(frame, session)
                finally:
                    self._busy.discard(task)
                    if idle is not None:
                        idle.touch()
                if response is None:
                    continue
                if isinstance(response, bool) or transport.is_closing():
                    return  # (closing: the client went away; nothing to answer)
                transport.write(response)
                # Wait only while the socket is backed up: a response the kernel took whole
                # leaves nothing buffered (drain would only block above the high-water mark).
                if transport.get_write_buffer_size():
                    await writer.drain()
        finally:
            if idle is not None:
                idle.cancel()

    async def _read_sasl_frame(
        self,
        reader: asyncio.StreamReader,
        sasl: SaslConnection,
        host: str,
        max_bytes: int,
        idle_s: float,
    ) -> bytes | None:
        """The next frame of a SASL listener's connection; None to close it. Before SASL
        authentication the whole frame must come by the deadline."""
        pending = not sasl.authenticated
        try:
            async with asyncio.timeout(sasl.read_timeout_s(idle_s)):
                prefix = await reader.readexactly(4)
                size = frame_size(prefix, sasl.frame_limit(max_bytes))
                frame = await reader.readexactly(size) if pending else b""
            if not pending:
                frame = await reader.readexactly(size)
        except TimeoutError:
            log.info("closing %s connection from %s",
                     "unauthenticated" if pending else "idle", host)
            return None
        except FrameTooLarge as exc:
            log.warning("closing connection from %s: %s (socket.request.max.bytes, or "
                        "sasl.server.max.receive.size before authentication)", host, exc)
            return None
        return frame

    async def _handle(self, frame: bytes, session: Session) -> bytes | bool | None:
        """The response frame, None when none is due (acks=0), False to close."""
        host = session.client_host
        try:
            head = parse_request_header(frame)
        except KafkaError as exc:
            log.warning("closing connection from %s: %s", host, exc)
            return False
        supported = SUPPORTED.get(head.api_key)
        handler = HANDLERS.get(head.api_key)
        if supported is None or handler is None:
            log.warning(
                "closing connection from %s: unknown API key %d (version %d)",
                host, head.api_key, head.api_version,
            )
            return False
        low, high = supported
        if not low <= head.api_version <= high:
            if head.api_key == versions.API_VERSIONS:
                return encode_response(
                    head.api_key, 0, head.correlation_id, unsupported_version_response()
                )
            log.warning(
                "closing connection from %s: unsupported version %d of API %d (serving %d-%d)",
                host, head.api_version, head.api_key, low, high,
            )
            return False
        try:
            header, request = decode_request(frame, head)
        except KafkaError as exc:
            log.warning(
                "closing connection from %s: API %d v%d: %s (first bytes %s)",
                host, head.api_key, head.api_version, exc, frame[:96].hex(),
            )
            return False
        if self.services is None:
            log.error("closing connection from %s: request before the server was started", host)
            return False
        ctx = RequestContext(
            api_key=header.api_key,
            api_version=header.api_version,
            correlation_id=header.correlation_id,
            client_id=header.client_id,
            client_host=host,
            services=self.services,
            session=session,
        )
        try:
            handler_fault(header.api_key)
            response = await handler(ctx, request)
        except Exception as exc:
            return self._error_response(header, request, exc)
        if response is None:
            return None
        return encode_response(header.api_key, header.api_version, header.correlation_id, response)

    def _error_response(self, header: RequestHeader, request: Any, exc: Exception) -> bytes | bool:
        """Answer a request whose handler failed, as Kafka does: its response with the error
        code in every entry (UNKNOWN_SERVER_ERROR unless the error carries a code). An
        acks=0 Produce has no response, so its connection is closed, as Kafka does."""
        if isinstance(exc, KafkaError):
            code, message = exc.code, exc.message
            log.warning(
                "handler for API %d v%d from client %s failed: %s; answering %s",
                header.api_key, header.api_version, header.client_id, exc, code.name,
            )
        else:
            code, message = ErrorCode.unknown_server_error, "unexpected server error"
            log.exception(
                "handler for API %d v%d from client %s failed; answering UNKNOWN_SERVER_ERROR",
                header.api_key, header.api_version, header.client_id,
            )
        if header.api_key == PRODUCE_API_KEY and getattr(request, "acks", -1) == 0:
            return False
        try:
            body = error_response(header.api_key, header.api_version, request, code, message)
            return encode_response(
                header.api_key, header.api_version, header.correlation_id, body
            )
        except Exception:
            log.exception(
                "cannot build the error response of API %d v%d; closing the connection",
                header.api_key, header.api_version,
            )
            return False
