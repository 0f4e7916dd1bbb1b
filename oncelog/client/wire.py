"""Client-side framing and version negotiation, sans-IO.

``encode_request`` gives a whole request frame (size, header, body); ``decode_response``
reads a response frame's header and body for the api key and version it answers. Bodies are
kio entities; ``request(api_key, version, **fields)`` and ``nested(...)`` build them from
a superset of field names so each API is written once for all versions (see
``oncelog.protocol.build.make``). The one exception is the producer's hot path:
``produce_request`` encodes a Produce body directly (``RawRequest``), byte for byte what kio
writes for the same entity, without building one per request.

``CLIENT_VERSIONS`` bounds each API to the versions whose semantics this client implements
(for instance Produce stops at v11: v12 means KIP-890's implicit AddPartitionsToTxn, which
this client does not do). ``negotiate`` picks the highest version both sides support.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import struct
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Final

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from oncelog.protocol import versions as api
from oncelog.protocol.build import make, request_module
from oncelog.protocol.varint import read_uvarint
from oncelog.records.codec import Buffer, encode_uvarint

__all__ = [
    "CLIENT_VERSIONS",
    "TRANSACTIONS_V1_MAX",
    "TRANSACTION_VERSION_FEATURE",
    "RawRequest",
    "decode_response",
    "encode_request",
    "negotiate",
    "nested",
    "produce_request",
    "request",
]

CLIENT_VERSIONS: Final[dict[int, tuple[int, int]]] = {
    api.PRODUCE: (3, 12),  # v12 only with transactions v2 (BrokerConnection.version)
    api.FETCH: (4, 12),
    api.OFFSET_FOR_LEADER_EPOCH: (2, 4),  # followers (oncelog.broker.cluster.replica_fetcher)
    api.LIST_OFFSETS: (1, 8),
    api.METADATA: (1, 12),
    api.OFFSET_COMMIT: (2, 8),
    api.OFFSET_FETCH: (1, 8),
    api.LIST_GROUPS: (0, 5),
    api.FIND_COORDINATOR: (0, 6),
    api.JOIN_GROUP: (0, 9),
    api.HEARTBEAT: (0, 4),
    api.LEAVE_GROUP: (0, 5),
    api.SYNC_GROUP: (0, 5),
    api.API_VERSIONS: (0, 4),
    api.CREATE_TOPICS: (2, 7),
    api.DELETE_TOPICS: (1, 6),
    api.DELETE_RECORDS: (0, 2),
    api.INIT_PRODUCER_ID: (0, 6),
    api.ADD_PARTITIONS_TO_TXN: (0, 3),
    api.ADD_OFFSETS_TO_TXN: (0, 4),
    api.END_TXN: (0, 5),  # v5 only with transactions v2 (BrokerConnection.version)
    api.TXN_OFFSET_COMMIT: (0, 4),
    api.OFFSET_DELETE: (0, 0),
    api.DESCRIBE_PRODUCERS: (0, 0),
    api.DESCRIBE_TRANSACTIONS: (0, 0),
    api.LIST_TRANSACTIONS: (0, 2),
    # cluster administration (oncelog.client.aio.admin)
    api.CREATE_PARTITIONS: (0, 3),
    api.DESCRIBE_LOG_DIRS: (1, 4),
    api.ELECT_LEADERS: (0, 2),
    api.ALTER_PARTITION_REASSIGNMENTS: (0, 0),
    api.LIST_PARTITION_REASSIGNMENTS: (0, 0),
    api.DESCRIBE_CLUSTER: (0, 1),
    # configs (oncelog.client.aio.admin); DescribeConfigs v1 is the first with synonyms
    api.DESCRIBE_CONFIGS: (1, 4),
    api.ALTER_CONFIGS: (0, 2),
    api.INCREMENTAL_ALTER_CONFIGS: (0, 1),
    # SASL (oncelog.client.sasl) and SCRAM users (oncelog.client.aio.admin)
    api.SASL_HANDSHAKE: (1, 1),
    api.SASL_AUTHENTICATE: (0, 2),
    api.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
    api.ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
    api.DESCRIBE_ACLS: (1, 3),
    api.CREATE_ACLS: (1, 3),
    api.DELETE_ACLS: (1, 3),
}

_HEAD = struct.Struct(">ihhih")
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_PRODUCE_HEAD = struct.Struct(">hi")  # acks, timeout
_PRODUCE_FLEXIBLE = 9


# Transactions v2 (KIP-890 part 2) is spoken only to a broker that finalized the
# ``transaction.version`` feature at 2 or more; below that the client stays at these versions
# (as Java's ProduceRequest and EndTxnRequest builders do).
TRANSACTIONS_V1_MAX: Final[dict[int, int]] = {api.PRODUCE: 11, api.END_TXN: 4}
TRANSACTION_VERSION_FEATURE: Final = "transaction.version"


def negotiate(api_key: int, broker_range: tuple[int, int] | None) -> int | None:
    """Highest version in both ranges, or None when they do not overlap."""
    ours = CLIENT_VERSIONS.get(api_key)
    if ours is None or broker_range is None:
        return None
    low = max(ours[0], broker_range[0])
    high = min(ours[1], broker_range[1])
    return high if high >= low else None


@functools.cache
def _writer(cls: Any) -> Any:
    return entity_writer(cls)


@functools.cache
def _reader(cls: Any) -> Any:
    return entity_reader(cls)


def request(api_key: int, version: int, /, **fields: Any) -> Any:
    """The request entity of ``api_key``/``version`` from those ``fields`` it has."""
    return make(load_request_schema(api_key, version), **fields)


def nested(api_key: int, version: int, name: str, /, **fields: Any) -> Any:
    """A nested request entity (e.g. ``"TopicProduceData"``) of that version."""
    cls = getattr(request_module(api_key, version), name)
    return make(cls, **fields)


class RawRequest:
    """A request body already encoded (as pieces, joined once with the frame's header),
    with what ``encode_request`` needs to frame it."""

    __slots__ = ("__api_key__", "__flexible__", "__version__", "payload")

    def __init__(
        self, api_key: int, version: int, flexible: bool, payload: Sequence[Buffer]
    ) -> None:
        self.__api_key__ = api_key
        self.__version__ = version
        self.__flexible__ = flexible
        self.payload = payload


@functools.lru_cache(maxsize=1024)
def _produce_string(text: str, flexible: bool) -> bytes:
    data = text.encode()
    return (encode_uvarint(len(data) + 1) if flexible else _I16.pack(len(data))) + data


def produce_request(
    version: int,
    transactional_id: str | None,
    acks: int,
    timeout_ms: int,
    topics: Mapping[str, Sequence[tuple[int, Buffer]]],
) -> RawRequest:
    """A Produce request (v3 to v12) of ``topics``: name -> [(partition, record batch)].
    The batches are not copied until the frame is made."""
    flexible = version >= _PRODUCE_FLEXIBLE
    if transactional_id is None:
        txn_id = b"\0" if flexible else b"\xff\xff"  # null
    else:
        txn_id = _produce_string(transactional_id, flexible)
    parts: list[Buffer] = [
        txn_id,
        _PRODUCE_HEAD.pack(acks, timeout_ms),
        encode_uvarint(len(topics) + 1) if flexible else _I32.pack(len(topics)),
    ]
    add = parts.append
    for name, partitions in topics.items():
        add(_produce_string(name, flexible))
        add(encode_uvarint(len(partitions) + 1) if flexible else _I32.pack(len(partitions)))
        for index, records in partitions:
            n = len(records)
            add(_I32.pack(index) + (encode_uvarint(n + 1) if flexible else _I32.pack(n)))
            add(records)
            if flexible:
                add(b"\0")  # the partition's tagged fields
        if flexible:
            add(b"\0")  # the topic's
    if flexible:
        add(b"\0")  # the request's
    return RawRequest(api.PRODUCE, version, flexible, parts)


def encode_request(correlation_id: int, client_id: str | None, body: Any) -> bytes:
    """A whole frame: size, header v1 (v2 when the request is flexible), body."""
    api_key, version = int(body.__api_key__), int(body.__version__)
    cid = client_id.encode() if client_id is not None else None
    head = [b"", cid or b"", b"\0" if body.__flexible__ else b""]  # no tagged fields
    if isinstance(body, RawRequest):
        parts = [*head, *body.payload]
        size = _HEAD.size - 4 + sum(map(len, parts))
        cid_size = -1 if cid is None else len(cid)
        parts[0] = _HEAD.pack(size, api_key, version, correlation_id, cid_size)
        return b"".join(parts)
    out = io.BytesIO()
    out.write(_HEAD.pack(0, api_key, version, correlation_id, -1 if cid is None else len(cid)))
    out.write(b"".join(head))
    writer: Any = _writer
    writer(type(body))(out, body)
    data = out.getbuffer()
    _I32.pack_into(data, 0, len(data) - 4)
    frame = bytes(data)
    data.release()
    return frame


def _skip_tagged_fields(frame: bytes, pos: int) -> int:
    count, pos = read_uvarint(frame, pos, len(frame))
    for _ in range(count):
        _, pos = read_uvarint(frame, pos, len(frame))
        size, pos = read_uvarint(frame, pos, len(frame))
        pos += size
    return pos


def response_correlation_id(frame: bytes) -> int:
    return int(_I32.unpack_from(frame, 0)[0])


@functools.cache
def _tolerant(cls: Any) -> Any:
    """``cls`` with every non-nullable ``datetime_i64`` field read as a plain int64.

    kio refuses negative timestamps, but Kafka answers -1 for "none" (e.g. the start time of
    a transaction that is not running, in DescribeTransactions)."""
    changed = False
    specs: list[Any] = []
    for f in dataclasses.fields(cls):
        metadata = dict(f.metadata)
        tp: Any = f.type
        if metadata.get("kafka_type") == "datetime_i64" and "None" not in str(f.type):
            # (nullable ones already read -1 as None)
            metadata["kafka_type"] = "int64"
            tp = int
            changed = True
        else:
            inner = _nested_class(f.type)
            if inner is not None and _tolerant(inner) is not inner:
                tp = _replace_nested(f.type, inner, _tolerant(inner))
                changed = True
        default: Any = dataclasses.field(metadata=metadata)
        if f.default is not dataclasses.MISSING:
            default = dataclasses.field(default=f.default, metadata=metadata)
        elif f.default_factory is not dataclasses.MISSING:
            default = dataclasses.field(default_factory=f.default_factory, metadata=metadata)
        specs.append((f.name, tp, default))
    if not changed:
        return cls
    namespace = {
        name: getattr(cls, name)
        for name in ("__type__", "__version__", "__flexible__", "__api_key__", "__header_schema__")
        if hasattr(cls, name)
    }
    clone = dataclasses.make_dataclass(
        cls.__name__, specs, namespace=namespace, frozen=True, slots=True, kw_only=True
    )
    clone.__annotations__.update({k: ClassVar for k in namespace})
    return clone


def _nested_class(tp: Any) -> Any:
    for arg in (tp, *typing.get_args(tp)):
        if dataclasses.is_dataclass(arg):
            return arg
        for inner in typing.get_args(arg):
            if dataclasses.is_dataclass(inner):
                return inner
    return None


def _replace_nested(tp: Any, old: Any, new: Any) -> Any:
    if tp is old:
        return new
    args = typing.get_args(tp)
    if not args:
        return tp
    replaced = tuple(_replace_nested(a, old, new) for a in args)
    origin = typing.get_origin(tp)
    if origin is tuple:
        return tuple[replaced]  # type: ignore[valid-type]
    if origin in (types.UnionType, typing.Union):
        return typing.Union[replaced]  # noqa: UP007
    return tp


@functools.cache
def _response_reader(api_key: int, version: int) -> tuple[Any, bool]:
    """The reader of the response's body, and whether its header has tagged fields
    (looked up once: kio resolves the schema's module by name on every call)."""
    cls = _tolerant(load_response_schema(api_key, version))
    return _reader(cls), bool(cls.__flexible__) and api_key != api.API_VERSIONS


def decode_response(api_key: int, version: int, frame: bytes) -> Any:
    """The body of a response frame (without its 4-byte size prefix)."""
    reader, tagged_header = _response_reader(api_key, version)
    pos = _skip_tagged_fields(frame, 4) if tagged_header else 4
    body, _ = reader(frame, pos)
    return body
