"""Produce-path validation and offset assignment, on batch headers only.

This is the broker's hot path: per batch there is one ``struct`` unpack and one CRC32C over
the batch; records are never decoded (use ``oncelog.records.codec`` for that).

Checks, in order, for each batch (the error is a ``KafkaError`` with Kafka's code):

==============================================================  ==============================
condition                                                       code
==============================================================  ==============================
no data at all                                                  CORRUPT_MESSAGE
fewer than 17 bytes left (cannot even read the magic byte)      CORRUPT_MESSAGE
magic 0 or 1 (legacy message sets)                              UNSUPPORTED_FOR_MESSAGE_FORMAT
magic other than 0, 1, 2                                        CORRUPT_MESSAGE
fewer than 61 bytes left, or batchLength < 49                   CORRUPT_MESSAGE
batch runs past the end of the data (partial last batch)        CORRUPT_MESSAGE
batch size (batchLength + 12) > ``max_batch_bytes``             MESSAGE_TOO_LARGE
CRC32C of bytes 21..end differs from the crc field              CORRUPT_MESSAGE
compression codec > 4                                           UNSUPPORTED_COMPRESSION_TYPE
recordsCount < 1 or lastOffsetDelta != recordsCount - 1         INVALID_RECORD
control batch and not ``allow_control``                         INVALID_RECORD
producerId >= 0 with baseSequence < 0 (client batches only)     INVALID_RECORD
transactional batch without a producerId (client batches only)  INVALID_RECORD
==============================================================  ==============================

Kafka trims a partial trailing batch from a produce request silently; oncelog rejects it,
because a client that sent half a batch has a bug we would rather surface. The size check
comes before the CRC check, as in Kafka's ``UnifiedLog.analyzeAndValidateRecords``.

``allow_control=False`` means "the batches come from a client": control batches are
refused and the client-only checks run. The transaction coordinator's own marker appends
(and replication, later) pass ``allow_control=True``.

Not checked here (callers' business): that a produce request v3+ carries exactly one batch
per partition (``len(result) == 1``), per-record timestamps against
``message.timestamp.*.max.ms``, and that a compressed body really holds ``recordsCount``
records (that needs decompression).
"""

from __future__ import annotations

import struct

from crc32c import crc32c

from oncelog.errors import ErrorCode, KafkaError
from oncelog.records.batch import (
    ATTR_COMPRESSION_MASK,
    ATTR_CONTROL,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    ATTRIBUTES_OFFSET,
    CRC_OFFSET,
    CRC_STRUCT,
    HEADER_SIZE,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    BatchHeader,
)

__all__ = ["MIN_BATCH_LENGTH", "assign_offsets", "batch_crc", "validate_batches"]

Buffer = bytes | bytearray | memoryview

MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD  # 49: a batch header with no records
_HEADER_UP_TO_MAGIC = MAGIC_OFFSET + 1
_MAX_CODEC = 4
# attributes, lastOffsetDelta, baseTimestamp, maxTimestamp (bytes 21..43)
_ATTRS_AND_MAX_TS = struct.Struct(">hiqq")
_BASE_OFFSET = struct.Struct(">q")
_LEADER_EPOCH = struct.Struct(">i")
_LEADER_EPOCH_OFFSET = 12


def batch_crc(buf: Buffer, pos: int, size: int) -> int:
    """The CRC32C a batch of ``size`` bytes at ``pos`` should carry (over bytes 21..end)."""
    view = memoryview(buf)
    return crc32c(view[pos + ATTRIBUTES_OFFSET : pos + size])


def _corrupt(message: str) -> KafkaError:
    return KafkaError(ErrorCode.corrupt_message, message)


def _invalid(message: str) -> KafkaError:
    return KafkaError(ErrorCode.invalid_record, message)


def validate_batches(
    data: Buffer | None, *, max_batch_bytes: int, allow_control: bool = False
) -> list[BatchHeader]:
    """Check every RecordBatch v2 in ``data``; return their headers in order.

    Raises KafkaError with the code of the first failing check (see the module docstring).
    """
    if not data:
        raise _corrupt("no record batches")
    # Release the view even on error, so a bytearray the caller owns can be resized later.
    with memoryview(data) as view:
        return _validate(view, max_batch_bytes, allow_control)


def _validate(view: memoryview, max_batch_bytes: int, allow_control: bool) -> list[BatchHeader]:
    end = len(view)
    unpack_from = HEADER_STRUCT.unpack_from
    headers: list[BatchHeader] = []
    pos = 0
    while pos < end:
        remaining = end - pos
        if remaining < _HEADER_UP_TO_MAGIC:
            raise _corrupt(f"truncated batch at byte {pos}: {remaining} bytes left")
        magic = view[pos + MAGIC_OFFSET]
        if magic != 2:
            if magic == 0 or magic == 1:
                raise KafkaError(
                    ErrorCode.unsupported_for_message_format,
                    f"message format v{magic} at byte {pos}; only v2 record batches are accepted",
                )
            raise _corrupt(f"invalid magic {magic} at byte {pos}")
        if remaining < HEADER_SIZE:
            raise _corrupt(f"truncated batch header at byte {pos}: {remaining} bytes left")
        fields = unpack_from(view, pos)
        batch_length = fields[1]
        if batch_length < MIN_BATCH_LENGTH:
            raise _corrupt(f"batch length {batch_length} at byte {pos} is below {MIN_BATCH_LENGTH}")
        size = batch_length + LOG_OVERHEAD
        if size > remaining:
            raise _corrupt(f"batch at byte {pos} needs {size} bytes, only {remaining} left")
        if size > max_batch_bytes:
            raise KafkaError(
                ErrorCode.message_too_large,
                f"batch of {size} bytes exceeds the maximum of {max_batch_bytes}",
            )
        crc = fields[4]
        actual = crc32c(view[pos + ATTRIBUTES_OFFSET : pos + size])
        if actual != crc:
            raise _corrupt(f"batch at byte {pos}: crc {crc:#010x} but computed {actual:#010x}")
        attributes = fields[5]
        if attributes & ATTR_COMPRESSION_MASK > _MAX_CODEC:
            raise KafkaError(
                ErrorCode.unsupported_compression_type,
                f"unknown compression codec {attributes & ATTR_COMPRESSION_MASK}",
            )
        count = fields[12]
        if count < 1 or fields[6] != count - 1:
            raise _invalid(
                f"batch at byte {pos}: recordsCount {count}, lastOffsetDelta {fields[6]}"
            )
        if not allow_control:
            if attributes & ATTR_CONTROL:
                raise _invalid("clients are not allowed to write control records")
            producer_id = fields[9]
            if producer_id >= 0 and fields[11] < 0:
                raise _invalid(f"invalid sequence {fields[11]} for producer id {producer_id}")
            if attributes & ATTR_TRANSACTIONAL and producer_id < 0:
                raise _invalid("transactional batch without a producer id")
        headers.append(BatchHeader(*fields))
        pos += size
    return headers


def assign_offsets(
    buf: bytearray,
    headers: list[BatchHeader],
    first_offset: int,
    log_append_time_ms: int | None,
    *,
    partition_leader_epoch: int | None = None,
) -> list[BatchHeader]:
    """Rewrite, in place, the batches ``headers`` describes (laid out back to back from 0).

    Each batch's baseOffset becomes ``first_offset`` plus the record count of the batches
    before it. With ``log_append_time_ms`` (topic uses LogAppendTime) the timestamp-type bit
    is set and maxTimestamp becomes that time, and the CRC is recomputed, as Kafka does;
    without it a LogAppendTime bit a client may have set is cleared (the topic's type wins).
    ``partition_leader_epoch``, when given, is written too (it is outside the CRC).
    Returns the headers as they now are.
    """
    out: list[BatchHeader] = []
    offset = first_offset
    pos = 0
    for h in headers:
        size = h.batch_length + LOG_OVERHEAD
        _BASE_OFFSET.pack_into(buf, pos, offset)
        epoch = h.partition_leader_epoch
        if partition_leader_epoch is not None:
            epoch = partition_leader_epoch
            _LEADER_EPOCH.pack_into(buf, pos + _LEADER_EPOCH_OFFSET, epoch)
        attributes = h.attributes
        max_timestamp = h.max_timestamp
        crc = h.crc
        if log_append_time_ms is not None:
            attributes |= ATTR_TIMESTAMP_TYPE
            max_timestamp = log_append_time_ms
        else:
            attributes &= ~ATTR_TIMESTAMP_TYPE
        if attributes != h.attributes or max_timestamp != h.max_timestamp:
            _ATTRS_AND_MAX_TS.pack_into(
                buf,
                pos + ATTRIBUTES_OFFSET,
                attributes,
                h.last_offset_delta,
                h.base_timestamp,
                max_timestamp,
            )
            crc = batch_crc(buf, pos, size)
            CRC_STRUCT.pack_into(buf, pos + CRC_OFFSET, crc)
        out.append(
            BatchHeader(
                offset,
                h.batch_length,
                epoch,
                h.magic,
                crc,
                attributes,
                h.last_offset_delta,
                h.base_timestamp,
                max_timestamp,
                h.producer_id,
                h.producer_epoch,
                h.base_sequence,
                h.records_count,
            )
        )
        offset += h.last_offset_delta + 1
        pos += size
    return out
