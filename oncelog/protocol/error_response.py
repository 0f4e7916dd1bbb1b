"""The error response of any request: what Kafka's ``AbstractRequest.getErrorResponse`` builds.

When a handler fails unexpectedly the broker still answers, as Kafka does: the response of
the request's API and version, with the error code in every place that has one. Entries
that name what the request asked about (topics, partitions, groups, transactional ids,
coordinator keys, markers, resources) are mirrored from the request, so a client sees the
error on each partition or group it sent, and its keys (name, partition index, group id,
producer id, ...) are copied over. Every other field gets the "unknown" value: the schema's
default if it has one, -1 for ids, offsets, epochs and timestamps, else zero or empty.

The builder is generic over kio's schema classes, so every served API and version is
covered by one function (``error_response``), with no table to keep up to date.
"""

from __future__ import annotations

import datetime
import functools
import uuid
from dataclasses import MISSING, Field, fields, is_dataclass
from typing import Any

from kio.index import load_response_schema
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    is_optional,
)

from oncelog.errors import ErrorCode

# Request fields a response list is mirrored from, when their names differ.
_LIST_SOURCES: dict[str, tuple[str, ...]] = {
    "responses": ("topic_data", "topics", "topic_names", "resources"),
    "partition_responses": ("partition_data",),
    "partitions": ("partitions", "partition_indexes"),
    "results_by_transaction": ("transactions",),
    "topic_results": ("topics",),
    "results_by_topic_v3_and_below": ("v3_and_below_topics",),
    "results_by_partition": ("partitions",),
    "results": ("topics", "resources", "groups_names", "partitions", "creations"),
    "filter_results": ("filters",),
    "coordinators": ("coordinator_keys",),
    "transaction_states": ("transactional_ids",),
    "replica_election_results": ("topic_partitions",),
    "partition_result": ("partitions",),
}
# Request lists of lists a response list is mirrored from, flattened (AlterReplicaLogDirs:
# its results are per topic, its request's topics per target directory).
_NESTED_SOURCES: dict[str, tuple[str, str]] = {"results": ("dirs", "topics")}
# Request lists a response list is mirrored from together, one entry per distinct name
# (AlterUserScramCredentials: a result per user named in its deletions or upsertions).
_JOINED_SOURCES: dict[str, tuple[str, str]] = {"results": ("deletions", "upsertions")}
# Request fields a response key is copied from, when their names differ.
_KEY_SOURCES: dict[str, tuple[str, ...]] = {
    "partition_index": ("partition", "index"),
    "name": ("topic",),
    "topic": ("name",),
    "topic_name": ("name",),
    "user": ("name",),
}
_UNKNOWN_IS_MINUS_ONE = ("_id", "offset", "epoch", "timestamp", "watermark")
_EPOCH = datetime.datetime.fromtimestamp(0, tz=datetime.UTC)


def error_response(
    api_key: int, api_version: int, request: Any, code: ErrorCode, message: str | None = None
) -> Any:
    """The response entity of ``api_key``/``api_version`` answering ``request`` with ``code``."""
    cls = load_response_schema(api_key, api_version)
    return _build(cls, request, code, message, copy_keys=False)


def _build(
    cls: type, source: Any, code: ErrorCode, message: str | None, *, copy_keys: bool = True
) -> Any:
    """``cls`` answering ``source`` (a request or one of its entries); keys are copied only
    from entries, not from the request itself (a producer id in InitProducerId is not an
    answer)."""
    kwargs: dict[str, Any] = {}
    for f in _init_fields(cls):
        kwargs[f.name] = _value(f, source, code, message, copy_keys)
    return cls(**kwargs)


def _value(
    f: Field[Any], source: Any, code: ErrorCode, message: str | None, copy_keys: bool = True
) -> Any:
    kafka_type = f.metadata.get("kafka_type", "")
    if kafka_type == "error_code":
        return code
    if f.name == "error_message":
        return message
    kind = classify_field(f)
    if isinstance(kind, EntityTupleField):
        if not _has_error_code(kind.type_):
            return ()
        items = _source_list(f.name, source)
        return tuple(_build_entry(kind.type_, item, code, message) for item in items)
    if isinstance(kind, EntityField):
        return _build(kind.type_, None, code, message)
    if isinstance(kind, PrimitiveTupleField):
        return ()
    copied = _source_key(f.name, source) if copy_keys else MISSING
    if copied is not MISSING:
        return copied
    if f.default is not MISSING:
        return f.default
    return _unknown(f, kafka_type)


def _build_entry(cls: type, item: Any, code: ErrorCode, message: str | None) -> Any:
    if is_dataclass(item):
        return _build(cls, item, code, message)
    # A bare key (a partition index, a group id, a coordinator key): it fills the entry's
    # first field of the same kind.
    kwargs: dict[str, Any] = {}
    placed = False
    for f in _init_fields(cls):
        kafka_type = f.metadata.get("kafka_type", "")
        fits = (
            not placed
            and f.name != "error_message"
            and kafka_type not in ("error_code", "")
            and isinstance(item, str) == (kafka_type == "string")
            and not isinstance(classify_field(f), PrimitiveTupleField)
        )
        if fits:
            kwargs[f.name] = item
            placed = True
        else:
            kwargs[f.name] = _value(f, None, code, message)
    return cls(**kwargs)


def _source_list(name: str, source: Any) -> tuple[Any, ...]:
    if source is None:
        return ()
    outer, inner = _NESTED_SOURCES.get(name, ("", ""))
    groups = getattr(source, outer, None) if outer else None
    if isinstance(groups, tuple):
        return tuple(item for group in groups for item in getattr(group, inner, ()))
    first, second = _JOINED_SOURCES.get(name, ("", ""))
    if first and isinstance(getattr(source, first, None), tuple):
        by_name = {getattr(item, "name", None): item
                   for item in (*getattr(source, first), *getattr(source, second, ()))}
        return tuple(by_name.values())
    for candidate in (name, *_LIST_SOURCES.get(name, ())):
        value = getattr(source, candidate, None)
        if isinstance(value, tuple):
            return value
    return ()


def _source_key(name: str, source: Any) -> Any:
    if source is None:
        return MISSING
    for candidate in (name, *_KEY_SOURCES.get(name, ())):
        value = getattr(source, candidate, MISSING)
        if value is not MISSING and not isinstance(value, tuple) and not is_dataclass(value):
            return value
    return MISSING


def _unknown(f: Field[Any], kafka_type: str) -> Any:
    if is_optional(f):
        return None
    if kafka_type.startswith("timedelta"):
        return datetime.timedelta(0)
    if kafka_type.startswith("datetime"):
        return _EPOCH
    if kafka_type.startswith(("int", "uint", "float")):
        if f.name == "session_id":
            return 0  # Kafka's INVALID_SESSION_ID
        return -1 if f.name.endswith(_UNKNOWN_IS_MINUS_ONE) else 0
    if kafka_type == "bool":
        return False
    if kafka_type == "string":
        return ""
    if kafka_type in ("bytes", "records"):
        return b""
    if kafka_type == "uuid":
        return uuid.UUID(int=0)
    raise TypeError(f"no unknown value for field {f.name} of type {kafka_type!r}")


@functools.cache
def _init_fields(cls: type) -> tuple[Field[Any], ...]:
    return tuple(f for f in fields(cls) if f.init)


@functools.cache
def _has_error_code(cls: type) -> bool:
    for f in _init_fields(cls):
        if f.metadata.get("kafka_type") == "error_code":
            return True
        kind = classify_field(f)
        if isinstance(kind, EntityTupleField | EntityField) and _has_error_code(kind.type_):
            return True
    return False
