"""Bounds-check a request body against its schema before kio decodes it.

kio's native reader trusts length prefixes: a compact array claiming billions of elements
makes it try to allocate them and abort the whole process. ``skim`` walks the same schema
(kio's generated dataclasses and their ``kafka_type`` metadata) over the bytes, checking that
every string, byte string, array and tagged field fits in what is left, without building
anything. It costs a few microseconds per request (records are skipped, never walked).
"""

from __future__ import annotations

import functools
import struct
from dataclasses import fields, is_dataclass
from types import EllipsisType, NoneType, UnionType
from typing import Any, Union, get_args, get_origin

from oncelog.errors import ErrorCode, KafkaError
from oncelog.protocol.varint import VarintError, read_uvarint

_FIXED = {
    "bool": 1,
    "int8": 1,
    "int16": 2,
    "uint16": 2,
    "error_code": 2,
    "int32": 4,
    "uint32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "uint64": 8,
    "float64": 8,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "uuid": 16,
}
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

# A step: (fixed size or -1, kafka type, is array, nested entity class or None)
Step = tuple[int, str, bool, Any]


def _bad(message: str) -> KafkaError:
    return KafkaError(ErrorCode.invalid_request, message)


def _unwrap(tp: Any) -> tuple[Any, bool]:
    """(element type, is_array) with Optional stripped."""
    if get_origin(tp) in (UnionType, Union):
        tp = next(a for a in get_args(tp) if a is not NoneType)
    if get_origin(tp) is tuple:
        args = get_args(tp)
        if (len(args) == 2 and isinstance(args[1], EllipsisType)) or args[1:] == (Ellipsis,):
            inner = args[0]
            if get_origin(inner) in (UnionType, Union):
                inner = next(a for a in get_args(inner) if a is not NoneType)
            return inner, True
    return tp, False


@functools.cache
def _plan(cls: type) -> tuple[tuple[Step, ...], dict[int, Step], bool]:
    steps: list[Step] = []
    tagged: dict[int, Step] = {}
    for f in fields(cls):
        inner, is_array = _unwrap(f.type)
        if is_dataclass(inner):
            # A nullable struct field (e.g. DescribeTopicPartitions' cursor) is preceded by
            # an int8 saying whether it is there (-1: null).
            nullable = not is_array and get_origin(f.type) in (UnionType, Union)
            step: Step = (-1, "nullable_entity" if nullable else "entity", is_array, inner)
        else:
            kafka_type = f.metadata["kafka_type"]
            step = (_FIXED.get(kafka_type, -1), kafka_type, is_array, None)
        tag = f.metadata.get("tag")
        if tag is None:
            steps.append(step)
        else:
            tagged[int(tag)] = step
    return tuple(steps), tagged, bool(getattr(cls, "__flexible__", False))


def _uvarint(buf: bytes | memoryview, pos: int, end: int) -> tuple[int, int]:
    # Up to six bytes (Kafka stops at five) as skim always allowed; kio decodes after it.
    try:
        return read_uvarint(buf, pos, end, 6)
    except VarintError as exc:
        raise _bad("truncated varint" if exc.truncated else "varint too long") from None


def _length(
    buf: bytes | memoryview, pos: int, end: int, flexible: bool, wide: bool
) -> tuple[int, int]:
    """A length prefix: -1 for null. Compact forms store length + 1."""
    if flexible:
        n, pos = _uvarint(buf, pos, end)
        return n - 1, pos
    size = 4 if wide else 2
    if pos + size > end:
        raise _bad("truncated length")
    n = (_I32 if wide else _I16).unpack_from(buf, pos)[0]
    return n, pos + size


def _value(buf: bytes | memoryview, pos: int, end: int, step: Step, flexible: bool) -> int:
    fixed, kafka_type, _, entity = step
    if fixed >= 0:
        pos += fixed
    elif kafka_type == "nullable_entity":
        if pos >= end:
            raise _bad("truncated nullable struct")
        if buf[pos] == 0xFF:
            return pos + 1
        pos = skim(entity, buf, pos + 1, end)
    elif entity is not None:
        pos = skim(entity, buf, pos, end)
    elif kafka_type == "string":
        n, pos = _length(buf, pos, end, flexible, wide=False)
        if n < -1:
            raise _bad("negative string length")
        pos += max(n, 0)
    elif kafka_type in ("bytes", "records"):
        n, pos = _length(buf, pos, end, flexible, wide=True)
        if n < -1:
            raise _bad("negative bytes length")
        pos += max(n, 0)
    else:
        raise _bad(f"unknown field type {kafka_type}")
    if pos > end:
        raise _bad(f"{kafka_type} runs past the end of the request")
    return pos


def _field(buf: bytes | memoryview, pos: int, end: int, step: Step, flexible: bool) -> int:
    if not step[2]:
        return _value(buf, pos, end, step, flexible)
    count, pos = _length(buf, pos, end, flexible, wide=True)
    if count < -1:
        raise _bad("negative array length")
    if count > end - pos:
        raise _bad(f"array of {count} elements in {end - pos} bytes")
    for _ in range(max(count, 0)):
        pos = _value(buf, pos, end, step, flexible)
    return pos


def skim(cls: type, buf: bytes | memoryview, pos: int, end: int | None = None) -> int:
    """Check that an entity of ``cls`` fits at ``pos``; the position after it."""
    if end is None:
        end = len(buf)
    steps, tagged, flexible = _plan(cls)
    for step in steps:
        pos = _field(buf, pos, end, step, flexible)
    if flexible:
        count, pos = _uvarint(buf, pos, end)
        if count > end - pos:
            raise _bad("too many tagged fields")
        for _ in range(count):
            tag, pos = _uvarint(buf, pos, end)
            size, pos = _uvarint(buf, pos, end)
            if pos + size > end:
                raise _bad("tagged field runs past the end of the request")
            known = tagged.get(tag)
            if known is not None:
                _field(buf, pos, pos + size, known, flexible)
            pos += size
    return pos
