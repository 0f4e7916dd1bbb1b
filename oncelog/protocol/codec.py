"""Kafka framing and request/response headers, sans-IO.

A frame is a 4-byte big-endian size followed by that many bytes. A request frame starts
with the request header: api_key int16, api_version int16, correlation_id int32,
client_id nullable string, then (header v2, flexible versions) tagged fields. The body is
decoded by kio's generated schema for that API and version.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Callable
from typing import Any, NamedTuple

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader

from oncelog.errors import ErrorCode, KafkaError
from oncelog.protocol.skim import skim
from oncelog.protocol.varint import VarintError, read_uvarint
from oncelog.protocol.writer import body_writer

_SIZE = struct.Struct(">i")
_PREFIX = struct.Struct(">hhi")
_I16 = struct.Struct(">h")
_HEADER = struct.Struct(">ii")  # frame size, correlation id


class FrameTooLarge(Exception):
    """A frame's declared size is negative or over socket.request.max.bytes."""


def frame_size(prefix: bytes, max_bytes: int) -> int:
    """The body size announced by a 4-byte frame prefix; FrameTooLarge when out of bounds."""
    (size,) = _SIZE.unpack(prefix)
    if size < 0 or size > max_bytes:
        raise FrameTooLarge(f"frame of {size} bytes (limit {max_bytes})")
    return size


class RequestHeader(NamedTuple):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def _read_uvarint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    try:
        return read_uvarint(buf, pos, len(buf))
    except VarintError as exc:
        message = "truncated varint" if exc.truncated else "varint too long"
        raise KafkaError(ErrorCode.invalid_request, message) from None


def parse_request_header(frame: bytes | memoryview) -> RequestHeader:
    """The api key, version and correlation id; enough to answer even an unknown API."""
    if len(frame) < _PREFIX.size:
        raise KafkaError(ErrorCode.invalid_request, "frame shorter than a request header")
    api_key, api_version, correlation_id = _PREFIX.unpack_from(frame, 0)
    return RequestHeader(api_key, api_version, correlation_id, None)


@functools.cache
def request_schema(api_key: int, api_version: int) -> tuple[type, Callable[..., Any], bool]:
    cls = load_request_schema(api_key, api_version)
    return cls, entity_reader(cls), bool(cls.__flexible__)


@functools.cache
def response_writer(api_key: int, api_version: int) -> tuple[Callable[..., Any], bool]:
    """The compiled body writer of a response (``protocol.writer``) and whether its header
    is flexible."""
    cls = load_response_schema(api_key, api_version)
    # ApiVersions responses always use header v0 so that any client can read the error.
    flexible_header = bool(cls.__flexible__) and api_key != 18
    return body_writer(cls), flexible_header


def decode_request(
    frame: bytes | memoryview, head: RequestHeader | None = None
) -> tuple[RequestHeader, Any]:
    """Decode header and body. KafkaError(INVALID_REQUEST) for malformed bytes.

    An API key or version without a schema raises KafkaError(UNSUPPORTED_VERSION).
    ``head``: the frame's ``parse_request_header``, when the caller has it already.
    """
    if head is None:
        head = parse_request_header(frame)
    try:
        schema, reader, flexible = request_schema(head.api_key, head.api_version)
    except Exception:  # kio knows no such API key or version
        raise KafkaError(
            ErrorCode.unsupported_version,
            f"no schema for API {head.api_key} version {head.api_version}",
        ) from None
    pos = _PREFIX.size
    try:
        (length,) = _I16.unpack_from(frame, pos)
        pos += 2
        client_id: str | None = None
        if length >= 0:
            if pos + length > len(frame):
                raise KafkaError(ErrorCode.invalid_request, "truncated client id")
            client_id = bytes(frame[pos : pos + length]).decode("utf-8", "replace")
            pos += length
        if flexible:
            count, pos = _read_uvarint(frame, pos)
            for _ in range(count):
                _, pos = _read_uvarint(frame, pos)
                size, pos = _read_uvarint(frame, pos)
                pos += size
            if pos > len(frame):
                raise KafkaError(ErrorCode.invalid_request, "truncated header tags")
        skim(schema, frame, pos)
        body, used = reader(frame, pos)
    except KafkaError:
        raise
    except Exception as exc:  # kio raises a variety of errors on malformed input
        raise KafkaError(ErrorCode.invalid_request, f"malformed request: {exc}") from None
    if pos + used > len(frame):
        raise KafkaError(ErrorCode.invalid_request, "request body runs past its frame")
    # Trailing bytes are ignored, as Kafka's own parser does: librdkafka sends a few
    # extra bytes on some versions (e.g. Metadata v12 asking for all topics).
    header = RequestHeader(head.api_key, head.api_version, head.correlation_id, client_id)
    return header, body


def encode_response(api_key: int, api_version: int, correlation_id: int, body: Any) -> bytes:
    """A whole response frame: size prefix, response header, body."""
    writer, flexible_header = response_writer(api_key, api_version)
    out = bytearray(_HEADER.pack(0, correlation_id))
    if flexible_header:
        out.append(0)
    writer(out, body)
    _SIZE.pack_into(out, 0, len(out) - 4)
    return bytes(out)
