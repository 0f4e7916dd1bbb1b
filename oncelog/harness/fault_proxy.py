"""A fault-injecting TCP proxy that understands Kafka framing, for fault-tolerance tests.

    broker_port = free_port()
    with FaultProxy("127.0.0.1", broker_port) as proxy:
        broker = BrokerProcess(data_dir, port=broker_port, advertised=proxy.bootstrap).start()
        producer = Producer({"bootstrap.servers": proxy.bootstrap, ...})
        proxy.set_rules(FaultRules(drop_next={ApiKey.PRODUCE: 1}))   # lose one Produce response
        ...
        assert proxy.stats().responses_dropped[ApiKey.PRODUCE] == 1

How clients end up going through the proxy. Kafka clients use the bootstrap address only for
their first request; after that they connect to whatever host:port the broker advertises in
Metadata (and FindCoordinator) responses. Instead of rewriting those responses, the broker
under test is started *advertising the proxy's address* while listening on its own port:
bind the proxy first (it listens at once and only dials upstream when a client connects),
then start the broker with ``--listen 127.0.0.1:<broker_port> --advertised
127.0.0.1:<proxy.port>`` (Tansu: ``--advertised-listener-url``). Every connection a client
makes then passes through the proxy. The ``proxied_broker`` fixture in tests/conftest.py does
exactly this.

What it does to traffic. Each direction is read frame by frame (a 4-byte big-endian length,
then the payload). A request's header starts with api_key (int16), api_version (int16) and
correlation_id (int32); a response's with the correlation_id, which the proxy maps back to
the request's api key. Responses on one connection keep their order (Kafka's guarantee), so:

- to *drop* a response means the client never receives it: the proxy swallows it and cuts
  the connection (a client cannot skip a response and keep using the stream). The broker
  has processed the request — this is the "request applied, acknowledgement lost" fault
  that idempotent producers and transactions must survive;
- to *drop* a request: the broker never sees it, and the connection is cut;
- to *delay* a response holds it (and so every later response on that connection);
- to *hold* requests or responses of an api key (``hold_requests``, ``hold_responses``)
  keeps them back until the rules change: a held response has been answered by the broker
  and counted (``responses_held``), but the client has not heard it yet;
- ``cut_after_bytes`` closes a connection once that many bytes (both directions together)
  have been forwarded on it, in the middle of a frame if that is where the limit falls;
- ``refuse`` closes new connections at once; ``cut_all()`` closes the current ones.

Rules change at runtime with ``set_rules`` (which also resets the ``drop_next`` budgets and
the random generator); ``stats()`` returns an immutable snapshot of what was done. The proxy
runs its own asyncio loop in a daemon thread, so synchronous tests and clients can use it.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import random
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Self

logger = logging.getLogger(__name__)

ANY_API = -1
"""Key for rules that apply to every api key without a rule of its own."""
UNKNOWN_API = -2
"""Api key recorded for a response whose correlation id matched no request."""


class ApiKey(enum.IntEnum):
    """Kafka api keys that fault tests commonly target (any int works in rules)."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    INIT_PRODUCER_ID = 22
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28


@dataclass(frozen=True)
class FaultRules:
    """What the proxy does to traffic. The default is a transparent proxy.

    Per-api-key maps accept ``ANY_API`` as a fallback key.
    """

    drop_rate: Mapping[int, float] = field(default_factory=dict)
    """Share (0..1) of responses of an api key to swallow; the connection is then cut."""
    drop_next: Mapping[int, int] = field(default_factory=dict)
    """Swallow exactly the next N responses of an api key (a budget used up as it goes)."""
    drop_requests_next: Mapping[int, int] = field(default_factory=dict)
    """Swallow the next N requests of an api key before the broker sees them; then cut."""
    delay: Mapping[int, float] = field(default_factory=dict)
    """Seconds to hold each response of an api key before forwarding it."""
    hold_requests: frozenset[int] = frozenset()
    """Api keys whose requests are held back (not forwarded) while these rules are in force;
    a held request goes on when the rules change, or dies with its connection."""
    hold_responses: frozenset[int] = frozenset()
    """Api keys whose responses (and so every later response on their connection) are held
    back while these rules are in force: the broker has answered, the client has not heard
    yet; a held response goes on when the rules change, or dies with its connection."""
    cut_after_bytes: int | None = None
    """Cut a connection after it has forwarded this many bytes (both directions)."""
    refuse: bool = False
    """Close newly accepted connections at once."""
    seed: int | None = 0
    """Seed of the generator behind ``drop_rate`` (None: unseeded)."""

    def __post_init__(self) -> None:
        for key, rate in self.drop_rate.items():
            if not 0.0 <= rate <= 1.0:
                raise ValueError(f"drop_rate[{key}] must be within 0..1, got {rate}")
        for name in ("drop_next", "drop_requests_next", "delay"):
            for key, value in getattr(self, name).items():
                if value < 0:
                    raise ValueError(f"{name}[{key}] must not be negative, got {value}")
        if self.cut_after_bytes is not None and self.cut_after_bytes < 0:
            raise ValueError("cut_after_bytes must not be negative")


@dataclass(frozen=True)
class ProxyStats:
    """A snapshot of what the proxy has done since it started (maps are by api key)."""

    connections_accepted: int
    connections_open: int
    connections_refused: int
    connections_cut: int
    upstream_failures: int
    requests: Mapping[int, int]
    responses: Mapping[int, int]
    requests_dropped: Mapping[int, int]
    responses_dropped: Mapping[int, int]
    responses_delayed: Mapping[int, int]
    responses_held: Mapping[int, int]
    """Responses that arrived while ``hold_responses`` held their api key."""
    in_flight: Mapping[int, int]
    """Requests forwarded to the broker on open connections and not answered by it yet."""
    bytes_to_upstream: int
    bytes_to_client: int


class _Cut(Exception):
    """A rule ended this connection."""


class _Connection:
    def __init__(
        self,
        number: int,
        client_writer: asyncio.StreamWriter,
        upstream_writer: asyncio.StreamWriter,
    ) -> None:
        self.number = number
        self.client_writer = client_writer
        self.upstream_writer = upstream_writer
        self.pending: dict[int, int] = {}
        self.bytes_forwarded = 0

    def abort(self) -> None:
        for writer in (self.client_writer, self.upstream_writer):
            writer.transport.abort()


_FRAME_LENGTH = struct.Struct(">i")
_REQUEST_HEADER = struct.Struct(">hhi")
_RESPONSE_HEADER = struct.Struct(">i")


async def _read_frame(reader: asyncio.StreamReader) -> bytes | None:
    """One whole frame (length prefix included), or None at end of stream."""
    try:
        prefix = await reader.readexactly(4)
        (length,) = _FRAME_LENGTH.unpack(prefix)
        if length < 0:
            raise ValueError(f"negative frame length {length}")
        return prefix + await reader.readexactly(length)
    except (asyncio.IncompleteReadError, ConnectionError):
        return None


class FaultProxy:
    """A Kafka-aware TCP proxy in a background thread; see the module docstring."""

    def __init__(
        self,
        upstream_host: str,
        upstream_port: int,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        rules: FaultRules | None = None,
    ) -> None:
        self.upstream_host = upstream_host
        self.upstream_port = upstream_port
        self.host = host
        self.port = port
        self._lock = threading.Lock()
        self._rules = FaultRules()
        self._drop_next: Counter[int] = Counter()
        self._drop_requests_next: Counter[int] = Counter()
        self._rng = random.Random(0)
        self.set_rules(rules or FaultRules())
        self._counts: Counter[str] = Counter()
        self._requests: Counter[int] = Counter()
        self._responses: Counter[int] = Counter()
        self._requests_dropped: Counter[int] = Counter()
        self._responses_dropped: Counter[int] = Counter()
        self._responses_delayed: Counter[int] = Counter()
        self._responses_held: Counter[int] = Counter()
        self._in_flight: Counter[int] = Counter()
        self._connections: dict[int, _Connection] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    # -- public API ----------------------------------------------------------------------
    @property
    def bootstrap(self) -> str:
        """``HOST:PORT`` clients (and the broker's advertised address) should use."""
        return f"{self.host}:{self.port}"

    def start(self) -> Self:
        if self._thread is not None:
            raise RuntimeError("proxy already started")
        self._thread = threading.Thread(target=self._run, name="fault-proxy", daemon=True)
        self._thread.start()
        self._ready.wait(10)
        if self._error is not None:
            raise RuntimeError(f"fault proxy failed to start: {self._error}") from self._error
        if not self._ready.is_set():
            raise RuntimeError("fault proxy did not start within 10s")
        logger.info("fault proxy %s -> %s:%d", self.bootstrap, self.upstream_host,
                    self.upstream_port)
        return self

    def stop(self) -> None:
        """Close the listener and every connection, and end the thread."""
        if self._thread is None:
            return
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(stop.set)
        self._thread.join(10)
        self._thread = None

    def set_rules(self, rules: FaultRules | None = None) -> None:
        """Replace the rules (None: transparent); resets drop budgets and the generator."""
        rules = rules or FaultRules()
        with self._lock:
            self._rules = rules
            self._drop_next = Counter({k: n for k, n in rules.drop_next.items() if n})
            self._drop_requests_next = Counter(
                {k: n for k, n in rules.drop_requests_next.items() if n}
            )
            self._rng = random.Random(rules.seed)

    @property
    def rules(self) -> FaultRules:
        with self._lock:
            return self._rules

    def cut_all(self) -> int:
        """Close every open connection now; returns how many were closed."""
        loop = self._loop
        if loop is None:
            return 0
        future = asyncio.run_coroutine_threadsafe(self._cut_all(), loop)
        return future.result(10)

    def stats(self) -> ProxyStats:
        with self._lock:
            c = self._counts
            return ProxyStats(
                connections_accepted=c["accepted"],
                connections_open=len(self._connections),
                connections_refused=c["refused"],
                connections_cut=c["cut"],
                upstream_failures=c["upstream_failures"],
                requests=_frozen(self._requests),
                responses=_frozen(self._responses),
                requests_dropped=_frozen(self._requests_dropped),
                responses_dropped=_frozen(self._responses_dropped),
                responses_delayed=_frozen(self._responses_delayed),
                responses_held=_frozen(self._responses_held),
                in_flight=_frozen(+self._in_flight),
                bytes_to_upstream=c["bytes_up"],
                bytes_to_client=c["bytes_down"],
            )

    def wait_for(
        self, predicate: Callable[[ProxyStats], bool], timeout: float = 10.0
    ) -> ProxyStats:
        """Poll ``stats()`` until ``predicate`` holds; AssertionError after ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            stats = self.stats()
            if predicate(stats):
                return stats
            if time.monotonic() >= deadline:
                raise AssertionError(f"proxy stats never satisfied the predicate: {stats}")
            time.sleep(0.01)

    def __enter__(self) -> Self:
        return self.start() if self._thread is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the event loop thread -----------------------------------------------------------
    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # reported to start(), or logged after it
            self._error = exc
            logger.exception("fault proxy loop failed")
        finally:
            self._ready.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        server = await asyncio.start_server(self._on_client, self.host, self.port)
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        async with server:
            await self._stop.wait()
            server.close()
            await self._cut_all(count=False)
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _cut_all(self, *, count: bool = True) -> int:
        connections = list(self._connections.values())
        for connection in connections:
            connection.abort()
        if count:
            with self._lock:
                self._counts["cut"] += len(connections)
        return len(connections)

    async def _on_client(
        self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self._serve_client(client_reader, client_writer)
        finally:
            self._tasks.discard(task)

    async def _serve_client(
        self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter
    ) -> None:
        with self._lock:
            self._counts["accepted"] += 1
            number = self._counts["accepted"]
            refuse = self._rules.refuse
            if refuse:
                self._counts["refused"] += 1
        if refuse:
            client_writer.transport.abort()
            return
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(
                self.upstream_host, self.upstream_port
            )
        except OSError as exc:
            logger.info("proxy connection %d: upstream unreachable: %s", number, exc)
            with self._lock:
                self._counts["upstream_failures"] += 1
            client_writer.transport.abort()
            return
        connection = _Connection(number, client_writer, upstream_writer)
        with self._lock:
            self._connections[number] = connection
        pumps = [
            asyncio.create_task(self._pump_requests(connection, client_reader)),
            asyncio.create_task(self._pump_responses(connection, upstream_reader)),
        ]
        try:
            done, _ = await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
            cut = any(not t.cancelled() and isinstance(t.exception(), _Cut) for t in done)
            if cut:
                with self._lock:
                    self._counts["cut"] += 1
        finally:
            for pump in pumps:
                pump.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
            connection.abort()
            with self._lock:
                self._connections.pop(number, None)
                self._in_flight.subtract(connection.pending.values())
                connection.pending.clear()

    async def _pump_requests(self, connection: _Connection, reader: asyncio.StreamReader) -> None:
        while (frame := await _read_frame(reader)) is not None:
            api_key = UNKNOWN_API
            correlation_id = None
            if len(frame) >= 4 + _REQUEST_HEADER.size:
                api_key, _version, correlation_id = _REQUEST_HEADER.unpack_from(frame, 4)
            if self._take_budget("_drop_requests_next", api_key):
                with self._lock:
                    self._requests_dropped[api_key] += 1
                logger.info("proxy connection %d: dropped request api_key=%d",
                            connection.number, api_key)
                raise _Cut
            while api_key in self.rules.hold_requests:
                await asyncio.sleep(0.01)
            with self._lock:
                self._requests[api_key] += 1
                if correlation_id is not None:
                    connection.pending[correlation_id] = api_key
                    self._in_flight[api_key] += 1
            await self._forward(connection, connection.upstream_writer, frame, "bytes_up")

    async def _pump_responses(
        self, connection: _Connection, reader: asyncio.StreamReader
    ) -> None:
        # Responses are read as soon as the broker sends them (so ``in_flight`` says what the
        # broker has not answered) and forwarded in order, each once its delay has passed.
        queue: asyncio.Queue[tuple[bytes, int, float] | None] = asyncio.Queue()
        loop = asyncio.get_running_loop()

        async def forward_in_order() -> None:
            while (item := await queue.get()) is not None:
                frame, api_key, release_at = item
                wait = release_at - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                while api_key in self.rules.hold_responses:
                    await asyncio.sleep(0.01)
                with self._lock:
                    self._responses[api_key] += 1
                await self._forward(connection, connection.client_writer, frame, "bytes_down")

        async def read_all() -> None:
            while (frame := await _read_frame(reader)) is not None:
                api_key = UNKNOWN_API
                if len(frame) >= 4 + _RESPONSE_HEADER.size:
                    (correlation_id,) = _RESPONSE_HEADER.unpack_from(frame, 4)
                    with self._lock:
                        api_key = connection.pending.pop(correlation_id, UNKNOWN_API)
                        self._in_flight[api_key] -= 1
                if self._should_drop_response(api_key):
                    with self._lock:
                        self._responses_dropped[api_key] += 1
                    logger.info("proxy connection %d: dropped response api_key=%d",
                                connection.number, api_key)
                    raise _Cut
                delay = self._delay_for(api_key)
                if delay > 0:
                    with self._lock:
                        self._responses_delayed[api_key] += 1
                if api_key in self.rules.hold_responses:
                    with self._lock:
                        self._responses_held[api_key] += 1
                queue.put_nowait((frame, api_key, loop.time() + delay))
            queue.put_nowait(None)

        tasks = [asyncio.create_task(read_all()), asyncio.create_task(forward_in_order())]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            for task in done:
                task.result()  # a cut on either side ends the connection
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _forward(
        self, connection: _Connection, writer: asyncio.StreamWriter, frame: bytes, counter: str
    ) -> None:
        limit = self.rules.cut_after_bytes
        cut = False
        if limit is not None and connection.bytes_forwarded + len(frame) > limit:
            frame = frame[: max(0, limit - connection.bytes_forwarded)]
            cut = True
        if frame:
            writer.write(frame)
            connection.bytes_forwarded += len(frame)
            with self._lock:
                self._counts[counter] += len(frame)
            try:
                await writer.drain()
            except ConnectionError:
                return
        if cut:
            logger.info("proxy connection %d: cut after %d bytes", connection.number,
                        connection.bytes_forwarded)
            raise _Cut

    # -- rule evaluation (called on the loop thread) -------------------------------------
    def _take_budget(self, name: str, api_key: int) -> bool:
        with self._lock:
            budget: Counter[int] = getattr(self, name)
            for key in (api_key, ANY_API):
                if budget[key] > 0:
                    budget[key] -= 1
                    return True
            return False

    def _should_drop_response(self, api_key: int) -> bool:
        if self._take_budget("_drop_next", api_key):
            return True
        with self._lock:
            rates = self._rules.drop_rate
            rate = rates.get(api_key, rates.get(ANY_API, 0.0))
            return rate > 0.0 and self._rng.random() < rate

    def _delay_for(self, api_key: int) -> float:
        delays = self.rules.delay
        return delays.get(api_key, delays.get(ANY_API, 0.0))


def _frozen(counter: Counter[int]) -> Mapping[int, int]:
    """A read-only copy that, like a Counter, answers 0 for keys never counted."""
    return MappingProxyType(Counter(counter))
