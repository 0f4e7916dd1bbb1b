"""The transactions console's HTTP side: one page, a JSON snapshot, and two operator actions.

Endpoints (HTTP/1.1, one request per connection, ``Connection: close``, standard library
only):

- ``GET /``: the page (``page.html``: inline CSS and JavaScript, no external asset). It
  polls ``/api/state`` every second.
- ``GET /api/state``: ``oncelog.ui.state.collect_state`` as JSON. Snapshots are shared
  between viewers: one collection at a time, reused for ``min_interval_s``.
- ``POST /api/confirm`` ``{"action": "abort" | "force-terminate", ...target}``: the first
  step of an action. Answers a one-use token, valid for ``TOKEN_TTL_S``, bound to that action
  and target, and a sentence saying what it will do.
- ``POST /api/abort`` ``{"token", "transactional_id"}``: end an open, non-2PC transaction
  (InitProducerId for the id: the coordinator aborts it and fences its producer); a
  two-phase-commit one is refused, as only its owner or a force-terminate may end it.
  ``{"token", "topic", "partition", "producer_id", "producer_epoch", "coordinator_epoch"}``:
  abort a *hanging* transaction on one partition (WriteTxnMarkers ABORT).
- ``POST /api/force-terminate`` ``{"token", "transactional_id"}``: KIP-939's
  forceTerminateTransaction, prepared 2PC transactions included.

POST bodies must be ``application/json`` (a cross-site form cannot send that without a
preflight) and carry the token, so a stray request cannot act. Errors are JSON
``{"error": NAME, "message": ...}``: NAME is the Kafka error name (``INVALID_TXN_STATE``,
``TRANSACTIONAL_ID_NOT_FOUND``, ...) or the console's own (``CONFIRMATION_REQUIRED``,
``BAD_REQUEST``, ``NOT_FOUND``, ``METHOD_NOT_ALLOWED``, ``BROKER_UNREACHABLE``).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources

from oncelog.client.aio.admin import AIOAdmin
from oncelog.client.errors import KafkaClientError
from oncelog.client.types import TopicPartition
from oncelog.http_exchange import answer_once
from oncelog.ui.state import OPEN_STATES, JsonDict, collect_state

log = logging.getLogger(__name__)

TOKEN_TTL_S = 120.0
MIN_INTERVAL_S = 0.5
_REQUEST_TIMEOUT_S = 30.0
_MAX_HEAD = 16 * 1024
_MAX_BODY = 64 * 1024
_REASONS = {200: "OK", 400: "Bad Request", 403: "Forbidden", 404: "Not Found",
            405: "Method Not Allowed", 409: "Conflict", 413: "Payload Too Large",
            415: "Unsupported Media Type", 500: "Internal Server Error",
            502: "Bad Gateway", 503: "Service Unavailable"}
ACTIONS = ("abort", "force-terminate")
_MARKER_FIELDS = ("topic", "partition", "producer_id", "producer_epoch", "coordinator_epoch")


@functools.cache
def page() -> bytes:
    return resources.files("oncelog.ui").joinpath("page.html").read_bytes()


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes
    content_type: str = "application/json"

    def encode(self) -> bytes:
        head = (
            f"HTTP/1.1 {self.status} {_REASONS.get(self.status, 'Error')}\r\n"
            f"Content-Type: {self.content_type}\r\nContent-Length: {len(self.body)}\r\n"
            "Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n"
            "Connection: close\r\n\r\n"
        )
        return head.encode("ascii") + self.body


def json_response(status: int, value: object) -> Response:
    return Response(status, json.dumps(value).encode())


class ConsoleError(Exception):
    """An answer other than 200: ``error`` is a Kafka error name or the console's own."""

    def __init__(self, status: int, error: str, message: str) -> None:
        super().__init__(message)
        self.status, self.error = status, error

    def response(self) -> Response:
        return json_response(self.status, {"error": self.error, "message": str(self)})


def _kafka_error(exc: KafkaClientError, status: int = 409) -> ConsoleError:
    name = exc.code.name.upper() if exc.code is not None else "UNKNOWN_SERVER_ERROR"
    return ConsoleError(status, name, str(exc))


@dataclass(frozen=True)
class Target:
    """What an action applies to: a transactional id, or one hanging transaction."""

    transactional_id: str | None = None
    marker: tuple[str, int, int, int, int] | None = None  # topic, partition, pid, epochs

    @classmethod
    def parse(cls, body: JsonDict, action: str) -> Target:
        txn_id = body.get("transactional_id")
        if isinstance(txn_id, str) and txn_id:
            return cls(transactional_id=txn_id)
        if action == "abort" and all(k in body for k in _MARKER_FIELDS):
            topic, *numbers = (body[k] for k in _MARKER_FIELDS)
            if isinstance(topic, str) and all(type(n) is int for n in numbers):
                partition, pid, epoch, coordinator_epoch = numbers
                return cls(marker=(topic, partition, pid, epoch, coordinator_epoch))
        wanted = "transactional_id" if action == "force-terminate" else (
            "transactional_id, or " + ", ".join(_MARKER_FIELDS))
        raise ConsoleError(400, "BAD_REQUEST", f"{action} needs {wanted}")

    def describe(self, action: str) -> str:
        if self.marker is not None:
            topic, partition, pid, epoch, _ = self.marker
            return (f"write an ABORT marker for producer {pid} (epoch {epoch}) on "
                    f"{topic}-{partition}")
        if action == "force-terminate":
            return (f"force-terminate transactional id {self.transactional_id!r}: abort its "
                    "transaction, even a prepared two-phase-commit one, and fence its producer")
        return (f"abort the open transaction of {self.transactional_id!r} and fence its "
                "producer")


class Console:
    """The console's state: one admin client, the shared snapshot, the pending tokens."""

    def __init__(
        self,
        bootstrap: str,
        *,
        max_timeout_ms: int,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        min_interval_s: float = MIN_INTERVAL_S,
        timeout_ms: int = 10_000,
    ) -> None:
        self.bootstrap = bootstrap
        self.timeout_ms = max(1, timeout_ms)
        self.max_timeout_ms = max_timeout_ms
        self._clock, self._monotonic = clock, monotonic
        self._min_interval_s = min_interval_s
        self._admin: AIOAdmin | None = None
        self._lock = asyncio.Lock()
        self._snapshot: tuple[float, JsonDict] | None = None
        self._tokens: dict[str, tuple[str, Target, float]] = {}

    def _client(self) -> AIOAdmin:
        if self._admin is None:
            self._admin = AIOAdmin({
                "bootstrap.servers": self.bootstrap, "client.id": "oncelog-console",
                "allow.auto.create.topics": False, "request.timeout.ms": self.timeout_ms,
                "default.api.timeout.ms": self.timeout_ms, "max.block.ms": self.timeout_ms,
                "socket.connection.setup.timeout.ms": min(self.timeout_ms, 5_000),
            })
        return self._admin

    async def close(self) -> None:
        if self._admin is not None:
            await self._admin.close()
            self._admin = None

    # ------------------------------------------------------------------ reading

    async def state(self) -> JsonDict:
        async with self._lock:  # one collection at a time, shared by every viewer
            now = self._monotonic()
            if self._snapshot is not None and now - self._snapshot[0] < self._min_interval_s:
                return self._snapshot[1]
            try:
                state = await collect_state(self._client(), max_timeout_ms=self.max_timeout_ms,
                                            now_ms=int(self._clock() * 1000))
            except (KafkaClientError, OSError, TimeoutError) as exc:
                # Whatever the request that failed, the page cannot show the brokers' state.
                raise ConsoleError(503, "BROKER_UNREACHABLE",
                                   f"cannot read the state from {self.bootstrap}: {exc}"
                                   ) from None
            state["bootstrap"] = self.bootstrap
            self._snapshot = (self._monotonic(), state)
            return state

    # ------------------------------------------------------------------ acting

    def confirm(self, body: JsonDict) -> JsonDict:
        action = body.get("action")
        if action not in ACTIONS:
            raise ConsoleError(400, "BAD_REQUEST", f"action must be one of {', '.join(ACTIONS)}")
        target = Target.parse(body, action)
        now = self._monotonic()
        self._tokens = {t: v for t, v in self._tokens.items() if v[2] > now}
        token = secrets.token_urlsafe(16)
        self._tokens[token] = (action, target, now + TOKEN_TTL_S)
        return {"token": token, "action": action, "summary": target.describe(action),
                "expires_in_ms": int(TOKEN_TTL_S * 1000)}

    def _redeem(self, body: JsonDict, action: str) -> Target:
        target = Target.parse(body, action)
        token = body.get("token")
        pending = self._tokens.pop(token, None) if isinstance(token, str) else None
        if pending is None or pending[2] <= self._monotonic():
            raise ConsoleError(403, "CONFIRMATION_REQUIRED",
                               "confirm first: POST /api/confirm gives a one-use token")
        if pending[:2] != (action, target):
            raise ConsoleError(403, "CONFIRMATION_REQUIRED",
                               "the token confirms a different action or target")
        return target

    async def act(self, action: str, body: JsonDict) -> JsonDict:
        target = self._redeem(body, action)
        admin = self._client()
        try:
            if target.marker is not None:
                topic, partition, pid, epoch, coordinator_epoch = target.marker
                # A producer that hung before its first marker shows coordinator epoch -1.
                await admin.abort_transaction(TopicPartition(topic, partition), pid, epoch,
                                              max(0, coordinator_epoch))
            else:
                assert target.transactional_id is not None
                if action == "abort":
                    await self._check_abortable(admin, target.transactional_id)
                await admin.force_terminate_transaction(target.transactional_id)
        except KafkaClientError as exc:
            raise _kafka_error(exc) from None
        finally:
            self._snapshot = None  # the next poll shows the outcome
        done = target.describe(action)
        log.info("console: %s (%s)", done, action)
        return {"ok": True, "action": action, "done": done}

    @staticmethod
    async def _check_abortable(admin: AIOAdmin, txn_id: str) -> None:
        d = (await admin.describe_transactions([txn_id]))[txn_id]
        if d.state not in OPEN_STATES:
            raise ConsoleError(409, "INVALID_TXN_STATE",
                               f"{txn_id!r} has no open transaction (state {d.state})")
        if d.two_phase_commit:
            raise ConsoleError(
                409, "INVALID_TXN_STATE",
                f"{txn_id!r} is a two-phase-commit (KIP-939) transaction: only its owner "
                "decides it; use force-terminate to end it anyway")

    # ------------------------------------------------------------------ routing

    async def handle(self, method: str, path: str, content_type: str, body: bytes) -> Response:
        try:
            return await self._route(method, path, content_type, body)
        except ConsoleError as exc:
            return exc.response()
        except Exception:
            log.exception("console request %s %s failed", method, path)
            return json_response(500, {"error": "UNKNOWN_SERVER_ERROR",
                                       "message": "internal error, see the server's log"})

    async def _route(self, method: str, path: str, content_type: str, body: bytes) -> Response:
        gets = {"/": None, "/index.html": None, "/api/state": None}
        posts = {"/api/confirm": None, "/api/abort": "abort",
                 "/api/force-terminate": "force-terminate"}
        if path in gets:
            if method != "GET":
                raise ConsoleError(405, "METHOD_NOT_ALLOWED", f"{path} answers GET")
            if path == "/api/state":
                return json_response(200, await self.state())
            return Response(200, page(), "text/html; charset=utf-8")
        if path not in posts:
            raise ConsoleError(404, "NOT_FOUND", f"no such page: {path}")
        if method != "POST":
            raise ConsoleError(405, "METHOD_NOT_ALLOWED", f"{path} answers POST")
        if content_type.split(";")[0].strip().lower() != "application/json":
            raise ConsoleError(415, "BAD_REQUEST", "POST bodies are application/json")
        try:
            parsed = json.loads(body or b"{}")
        except (UnicodeDecodeError, ValueError):
            raise ConsoleError(400, "BAD_REQUEST", "the body is not JSON") from None
        if not isinstance(parsed, dict):
            raise ConsoleError(400, "BAD_REQUEST", "the body must be a JSON object")
        action = posts[path]
        if action is None:
            return json_response(200, self.confirm(parsed))
        return json_response(200, await self.act(action, parsed))


# ---------------------------------------------------------------------------- HTTP/1.1

def _parse_head(head: bytes) -> tuple[str, str, dict[str, str]]:
    try:
        lines = head.decode("latin-1").split("\r\n")
        method, target, version = lines[0].split(" ")
    except ValueError:
        raise ConsoleError(400, "BAD_REQUEST", "malformed request line") from None
    if not version.startswith("HTTP/1."):
        raise ConsoleError(400, "BAD_REQUEST", "HTTP/1.x only")
    headers = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return method, target.split("?", 1)[0], headers


async def _respond(console: Console, reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    try:
        method, path, headers = _parse_head(head)
        length = int(headers.get("content-length", "0") or "0")
        if not 0 <= length <= _MAX_BODY:
            raise ConsoleError(413, "BAD_REQUEST", "body too large")
    except ValueError:
        return ConsoleError(400, "BAD_REQUEST", "bad Content-Length").response().encode()
    except ConsoleError as exc:
        return exc.response().encode()
    body = await reader.readexactly(length) if length else b""
    response = await console.handle(method, path, headers.get("content-type", ""), body)
    return response.encode()


async def _handle_connection(
    console: Console, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    await answer_once(reader, writer, functools.partial(_respond, console), what="console",
                      timeout_s=_REQUEST_TIMEOUT_S)


async def bind_console(host: str, port: int, console: Console) -> asyncio.Server:
    """Bind ``host:port`` without accepting yet (an OSError if it cannot be bound)."""
    return await asyncio.start_server(
        functools.partial(_handle_connection, console), host, port, limit=_MAX_HEAD,
        start_serving=False,
    )


def console_url(server: asyncio.Server) -> str:
    host, port = server.sockets[0].getsockname()[:2]
    return f"http://{host}:{port}/" if ":" not in host else f"http://[{host}]:{port}/"


async def serve_console(server: asyncio.Server, console: Console) -> None:
    """Answer the console's requests on a bound server until cancelled."""
    log.info("transactions console on %s (brokers %s)", console_url(server), console.bootstrap)
    try:
        async with server:
            await server.serve_forever()
    finally:
        await console.close()


__all__: list[str] = ["Console", "bind_console", "console_url", "serve_console"]
