"""Full RecordBatch v2 codec: records in, bytes out, and back.

Not for the broker's produce/fetch hot path (that works on headers, see ``validate``). Used
by tests, the Python client, timestamp lookups and the coordinators' internal topics.

A record inside a (decompressed) batch body, all varints zigzag-encoded::

    length varint | attributes int8 | timestampDelta varlong | offsetDelta varint
    keyLength varint | key | valueLength varint | value
    headerCount varint | [headerKeyLength varint | headerKey | headerValueLength varint | value]

A length of -1 means null. Decoding errors are ``KafkaError(CORRUPT_MESSAGE)``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar, overload

from oncelog.errors import ErrorCode, KafkaError
from oncelog.protocol.varint import VarintError, read_uvarint
from oncelog.records.batch import (
    ATTR_COMPRESSION_MASK,
    ATTR_CONTROL,
    ATTR_DELETE_HORIZON,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    CRC_OFFSET,
    CRC_STRUCT,
    HEADER_SIZE,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    NO_TIMESTAMP,
    BatchHeader,
    pack_header,
    parse_header,
)
from oncelog.records.compression import compress, decompress
from oncelog.records.validate import MIN_BATCH_LENGTH, batch_crc
from oncelog.records.varints import (
    ZIGZAG_TABLE,
    ZIGZAG_TABLE_SIZE,
    corrupt_varint,
    decode_uvarint,
    decode_uvarlong,
    decode_varint,
    decode_varlong,
    encode_uvarint,
    encode_uvarlong,
    encode_varint,
    encode_varlong,
    varlong_size,
    zigzag,
)

__all__ = [
    "Record",
    "RecordInput",
    "RecordMaker",
    "append_record",
    "batch_positions",
    "decode_batch",
    "decode_uvarint",
    "decode_uvarlong",
    "decode_varint",
    "decode_varlong",
    "encode_batch",
    "encode_uvarint",
    "encode_uvarlong",
    "encode_varint",
    "encode_varlong",
    "iter_records",
    "seal_batch",
    "seal_in_place",
    "varlong_size",
]

Buffer = bytes | bytearray | memoryview
T = TypeVar("T")
Headers = tuple[tuple[str, bytes | None], ...]

# --------------------------------------------------------------------------- records


@dataclass(frozen=True, slots=True)
class Record:
    """A decoded record with its absolute offset and effective timestamp."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Headers = ()


class RecordInput(NamedTuple):
    """A record to encode. ``RecordInput(b"k", b"v")`` or ``RecordInput(value=b"v")``.

    ``timestamp=None`` takes the batch's ``base_timestamp`` (or -1 when that is None too).
    A decoded ``Record`` can be passed to ``encode_batch`` as well.
    """

    key: bytes | None = None
    value: bytes | None = None
    headers: Sequence[tuple[str, bytes | None]] = ()
    timestamp: int | None = None


def append_record(
    out: bytearray,
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes | None]] = (),
) -> None:
    """Append one encoded record to ``out`` (a batch body being built)."""
    if not 0 <= offset_delta <= 0x7FFFFFFF:
        raise ValueError(f"offset delta out of range: {offset_delta}")
    # zigzag() inlined (a table lookup for small values): this runs once per record
    table, small = ZIGZAG_TABLE, ZIGZAG_TABLE_SIZE
    head = b"\x00"  # attributes (unused), then the deltas
    head += table[timestamp_delta] if 0 <= timestamp_delta < small else zigzag(timestamp_delta)
    head += table[offset_delta] if offset_delta < small else zigzag(offset_delta)
    if key is None:
        head += b"\x01"  # zigzag(-1): null
    else:
        n = len(key)
        head += (table[n] if n < small else zigzag(n)) + key
    if value is None:
        head += b"\x01"
        value = b""
    else:
        n = len(value)
        head += table[n] if n < small else zigzag(n)
    if not headers:
        n = len(head) + len(value) + 1
        out += table[n] if n < small else zigzag(n)
        out += head
        out += value
        out += b"\x00"  # no headers
        return
    tail = bytearray(zigzag(len(headers)))
    for h_key, h_value in headers:
        h_key_b = h_key.encode("utf-8")
        tail += zigzag(len(h_key_b)) + h_key_b
        tail += b"\x01" if h_value is None else zigzag(len(h_value)) + h_value
    out += zigzag(len(head) + len(value) + len(tail))
    out += head
    out += value
    out += tail


def seal_batch(
    body: Buffer,
    *,
    record_count: int,
    base_timestamp: int,
    max_timestamp: int,
    base_offset: int = 0,
    compression: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    control: bool = False,
    timestamp_type: int = 0,
    partition_leader_epoch: int = -1,
) -> bytes:
    """The RecordBatch v2 around ``body`` (``record_count`` records from ``append_record``,
    offset deltas from 0): compressed with ``compression``, header and CRC added."""
    if not 0 <= compression <= 4:
        raise ValueError(f"unknown compression codec {compression}")
    out = bytearray(HEADER_SIZE)
    out += compress(compression, body) if compression else body
    attributes = compression & ATTR_COMPRESSION_MASK
    if timestamp_type:
        attributes |= ATTR_TIMESTAMP_TYPE
    if control:
        attributes |= ATTR_CONTROL
    seal_in_place(
        out, record_count=record_count, base_timestamp=base_timestamp,
        max_timestamp=max_timestamp, producer_id=producer_id, producer_epoch=producer_epoch,
        base_sequence=base_sequence, transactional=transactional, attributes=attributes,
        base_offset=base_offset, partition_leader_epoch=partition_leader_epoch,
    )  # fmt: skip
    return bytes(out)


def seal_in_place(
    buf: bytearray,
    *,
    record_count: int,
    base_timestamp: int,
    max_timestamp: int,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    attributes: int = 0,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
) -> None:
    """Write the header and CRC of the batch in ``buf``: ``HEADER_SIZE`` bytes kept for
    the header, then the (compressed, per ``attributes``) records. Sealing again, e.g.
    with another producer epoch for a retry, rewrites them."""
    if transactional:
        attributes |= ATTR_TRANSACTIONAL
    HEADER_STRUCT.pack_into(
        buf, 0, base_offset, len(buf) - LOG_OVERHEAD, partition_leader_epoch, 2, 0,
        attributes, record_count - 1, base_timestamp, max_timestamp, producer_id,
        producer_epoch, base_sequence, record_count,
    )  # fmt: skip
    CRC_STRUCT.pack_into(buf, CRC_OFFSET, batch_crc(buf, 0, len(buf)))


def encode_batch(
    records: Sequence[RecordInput | Record],
    *,
    base_offset: int = 0,
    compression: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    control: bool = False,
    timestamp_type: int = 0,
    partition_leader_epoch: int = -1,
    base_timestamp: int | None = None,
) -> bytes:
    """Build one RecordBatch v2 holding ``records`` at offsets base_offset, base_offset+1, ...

    The batch's baseTimestamp is ``base_timestamp`` or, when None, the first record's
    timestamp; maxTimestamp is the largest record timestamp. The body is compressed with
    ``compression`` (a ``Compression`` id) even when that does not make it smaller.
    """
    if not records:
        raise ValueError("a record batch needs at least one record")
    fallback = NO_TIMESTAMP if base_timestamp is None else base_timestamp
    timestamps = [fallback if r.timestamp is None else r.timestamp for r in records]
    first_timestamp = timestamps[0] if base_timestamp is None else base_timestamp

    body = bytearray()
    for delta, (record, ts) in enumerate(zip(records, timestamps, strict=True)):
        append_record(body, delta, ts - first_timestamp, record.key, record.value, record.headers)
    return seal_batch(
        body,
        record_count=len(records),
        base_timestamp=first_timestamp,
        max_timestamp=max(timestamps),
        base_offset=base_offset,
        compression=compression,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        transactional=transactional,
        control=control,
        timestamp_type=timestamp_type,
        partition_leader_epoch=partition_leader_epoch,
    )


def _seal(header: BatchHeader, payload: bytes) -> bytes:
    """The batch: ``header`` (its CRC computed here) followed by ``payload``."""
    out = bytearray(pack_header(header))
    out += payload
    CRC_STRUCT.pack_into(out, CRC_OFFSET, batch_crc(out, 0, len(out)))
    return bytes(out)


def encode_retained_batch(
    header: BatchHeader, records: Sequence[Record], *, delete_horizon_ms: int | None
) -> bytes:
    """Rebuild ``header``'s batch holding only ``records`` (a subset of its records, with
    their own offsets): what the log cleaner writes (Kafka's MemoryRecords.filterTo). The
    base offset, last offset delta, producer fields, max timestamp and codec are kept, so
    producer state and sequences read the same. With ``delete_horizon_ms`` the base
    timestamp carries it and the delete-horizon attribute is set (KIP-534); the records'
    timestamp deltas are taken from it, so their timestamps do not change. With no records
    the batch is Kafka's empty batch: the header alone, uncompressed."""
    attributes = header.attributes & ~ATTR_DELETE_HORIZON
    if delete_horizon_ms is not None:
        attributes |= ATTR_DELETE_HORIZON
        base_timestamp = delete_horizon_ms
    elif records:
        base_timestamp = records[0].timestamp
    else:
        base_timestamp = header.max_timestamp
    body = bytearray()
    for record in records:
        append_record(
            body,
            record.offset - header.base_offset,
            record.timestamp - base_timestamp,
            record.key,
            record.value,
            record.headers,
        )
    if records and header.compression:
        payload = compress(header.compression, body)
    else:
        payload = bytes(body)
        if not records:
            attributes &= ~ATTR_COMPRESSION_MASK
    rebuilt = header._replace(
        batch_length=HEADER_SIZE - LOG_OVERHEAD + len(payload),
        crc=0,
        attributes=attributes,
        base_timestamp=base_timestamp,
        records_count=len(records),
    )
    return _seal(rebuilt, payload)


def _corrupt(message: str) -> KafkaError:
    return KafkaError(ErrorCode.corrupt_message, message)


RecordMaker = Callable[[int, int, "bytes | None", "bytes | None", Headers], T]


def _decode_records(
    buf: bytes, pos: int, body_end: int, header: BatchHeader, make: RecordMaker[T]
) -> list[T]:
    """The records of ``header``'s batch, whose (uncompressed) body is
    ``buf[pos:body_end]``: ``make(offset, timestamp, key, value, headers)`` for each.

    This runs for every consumed record: positions index ``buf`` directly (no copy of the
    body) and the varints are read by the one decoder, called directly."""
    read = read_uvarint
    base_offset = header.base_offset
    base_timestamp = header.base_timestamp
    append_time = header.max_timestamp if header.attributes & ATTR_TIMESTAMP_TYPE else None
    records: list[T] = []
    append = records.append
    try:
        for _ in range(header.records_count):
            z, pos = read(buf, pos, body_end, 5)
            length = (z >> 1) ^ -(z & 1)
            end = pos + length
            if length < 1 or end > body_end:
                raise _corrupt(f"invalid record length {length}")
            z_ts, pos = read(buf, pos + 1, body_end, 10)  # past the attributes
            z_off, pos = read(buf, pos, body_end, 5)
            z, pos = read(buf, pos, body_end, 5)
            key, pos = _field(buf, pos, end, z)
            z, pos = read(buf, pos, body_end, 5)
            value, pos = _field(buf, pos, end, z)
            z, pos = read(buf, pos, body_end, 5)
            headers, pos = _headers(buf, pos, end, body_end, z) if z else ((), pos)
            if (z_off | z) >> 32 or z_ts >> 64:
                raise _corrupt("varint exceeds its 32 or 64 bits")
            if pos != end:
                raise _corrupt(f"record declares {length} bytes but holds {length + pos - end}")
            if append_time is None:
                timestamp = base_timestamp + ((z_ts >> 1) ^ -(z_ts & 1))
            else:
                timestamp = append_time
            append(make(base_offset + ((z_off >> 1) ^ -(z_off & 1)), timestamp, key, value,
                        headers))  # fmt: skip
    except VarintError as exc:
        raise corrupt_varint(exc) from None
    if pos != body_end:
        raise _corrupt(f"{body_end - pos} bytes left after {header.records_count} records")
    return records


def _field(buf: bytes, pos: int, end: int, z: int) -> tuple[bytes | None, int]:
    """A key, value or header field of zigzag length ``z`` at ``pos`` (-1: null)."""
    if z & 1:
        if z != 1:
            raise _corrupt(f"invalid length {(z >> 1) ^ -1}")
        return None, pos
    stop = pos + (z >> 1)
    if stop > end:
        raise _corrupt("field runs past the end of its record")
    return buf[pos:stop], stop


def _headers(buf: bytes, pos: int, end: int, body_end: int, z: int) -> tuple[Headers, int]:
    count = (z >> 1) ^ -(z & 1)
    if count < 0:
        raise _corrupt(f"invalid header count {count}")
    headers: list[tuple[str, bytes | None]] = []
    for _ in range(count):
        z, pos = read_uvarint(buf, pos, body_end, 5)
        h_key, pos = _field(buf, pos, end, z)
        if h_key is None:
            raise _corrupt("null header key")
        z, pos = read_uvarint(buf, pos, body_end, 5)
        h_value, pos = _field(buf, pos, end, z)
        try:
            headers.append((h_key.decode("utf-8"), h_value))
        except UnicodeDecodeError as exc:
            raise _corrupt("header key is not UTF-8") from exc
    return tuple(headers), pos


def _check_frame(data: Buffer, pos: int) -> int:
    """Return the size of the complete batch at ``pos`` or raise CORRUPT_MESSAGE."""
    remaining = len(data) - pos
    if remaining < HEADER_SIZE:
        raise _corrupt(f"truncated batch header: {remaining} bytes")
    magic = data[pos + MAGIC_OFFSET]
    if magic != 2:
        raise _corrupt(f"unsupported magic {magic}")
    batch_length = int.from_bytes(data[pos + 8 : pos + 12], "big", signed=True)
    if batch_length < MIN_BATCH_LENGTH:
        raise _corrupt(f"invalid batch length {batch_length}")
    size = batch_length + LOG_OVERHEAD
    if size > remaining:
        raise _corrupt(f"truncated batch: needs {size} bytes, {remaining} left")
    return size


@overload
def decode_batch(
    data: Buffer, pos: int = 0, *, verify_crc: bool = True
) -> tuple[BatchHeader, list[Record]]: ...


@overload
def decode_batch(
    data: Buffer, pos: int = 0, *, verify_crc: bool = True, make: RecordMaker[T]
) -> tuple[BatchHeader, list[T]]: ...


def decode_batch(
    data: Buffer, pos: int = 0, *, verify_crc: bool = True, make: Any = Record
) -> tuple[BatchHeader, list[Any]]:
    """Decode the batch at ``pos``: its header and records with absolute offsets/timestamps,
    each ``make(offset, timestamp, key, value, headers)`` (a ``Record`` by default).

    With LogAppendTime every record's timestamp is the batch's maxTimestamp.
    """
    size = _check_frame(data, pos)
    header = parse_header(data, pos)
    if verify_crc and batch_crc(data, pos, size) != header.crc:
        raise _corrupt("crc mismatch")
    start, end = pos + HEADER_SIZE, pos + size
    if header.compression:
        body = decompress(header.compression, bytes(memoryview(data)[start:end]))
        return header, _decode_records(body, 0, len(body), header, make)
    if not isinstance(data, bytes):  # record fields are sliced out of it: they must be bytes
        data, start, end = bytes(memoryview(data)[start:end]), 0, end - start
    return header, _decode_records(data, start, end, header, make)


@overload
def iter_records(
    data: Buffer, *, verify_crc: bool = True
) -> Iterator[tuple[BatchHeader, list[Record]]]: ...


@overload
def iter_records(
    data: Buffer, *, verify_crc: bool = True, make: RecordMaker[T]
) -> Iterator[tuple[BatchHeader, list[T]]]: ...


def iter_records(
    data: Buffer, *, verify_crc: bool = True, make: Any = Record
) -> Iterator[tuple[BatchHeader, list[Any]]]:
    """Decode concatenated batches; a partial batch at the end (as a fetch may return) is
    skipped, corruption anywhere else raises CORRUPT_MESSAGE."""
    for pos in batch_positions(data):
        yield decode_batch(data, pos, verify_crc=verify_crc, make=make)


def batch_positions(data: Buffer) -> Iterator[int]:
    """Where each batch of ``data`` starts, but for a partial batch at the end. Positions
    follow the batches' length fields: a reader stops at the first batch that does not
    decode."""
    end = len(data)
    pos = 0
    while end - pos >= HEADER_SIZE:
        batch_length = int.from_bytes(data[pos + 8 : pos + 12], "big", signed=True)
        if batch_length >= MIN_BATCH_LENGTH and pos + batch_length + LOG_OVERHEAD > end:
            return  # partial trailing batch
        yield pos
        pos += batch_length + LOG_OVERHEAD
