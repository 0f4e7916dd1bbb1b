"""Control records for transaction markers (KIP-98).

A marker is a transactional control batch with one record:
  key   = version int16 (0) | type int16 (0 ABORT, 1 COMMIT)
  value = version int16 (0) | coordinatorEpoch int32
Readers accept a newer key/value version as long as the fields above are there (Kafka does
the same: later versions only append fields).
"""

from __future__ import annotations

import struct
from enum import IntEnum

from oncelog.errors import ErrorCode, KafkaError
from oncelog.records.batch import NO_SEQUENCE
from oncelog.records.codec import Record, RecordInput, encode_batch

__all__ = ["ControlType", "decode_control", "encode_marker_batch", "marker_key", "marker_value"]

_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")
CONTROL_KEY_VERSION = 0
MARKER_VALUE_VERSION = 0


class ControlType(IntEnum):
    ABORT = 0
    COMMIT = 1


def marker_key(control_type: ControlType) -> bytes:
    return _KEY.pack(CONTROL_KEY_VERSION, int(control_type))


def marker_value(coordinator_epoch: int) -> bytes:
    return _VALUE.pack(MARKER_VALUE_VERSION, coordinator_epoch)


def encode_marker_batch(
    control_type: ControlType,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    timestamp_ms: int,
) -> bytes:
    """The batch Kafka appends for a transaction marker: base offset 0 (the log assigns the
    real one), transactional + control, no sequence, CreateTime ``timestamp_ms``."""
    record = RecordInput(
        key=marker_key(control_type), value=marker_value(coordinator_epoch), timestamp=timestamp_ms
    )
    return encode_batch(
        [record],
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=NO_SEQUENCE,
        transactional=True,
        control=True,
    )


def decode_control(record: Record) -> tuple[ControlType, int]:
    """(marker type, coordinator epoch) of a control record; CORRUPT_MESSAGE if it is not a
    transaction marker."""
    key, value = record.key, record.value
    if key is None or len(key) < _KEY.size:
        raise KafkaError(ErrorCode.corrupt_message, "control record key too short")
    _version, type_id = _KEY.unpack_from(key)
    try:
        control_type = ControlType(type_id)
    except ValueError:
        raise KafkaError(
            ErrorCode.corrupt_message, f"control record type {type_id} is not a marker"
        ) from None
    if value is None or len(value) < _VALUE.size:
        raise KafkaError(ErrorCode.corrupt_message, "transaction marker value too short")
    _value_version, coordinator_epoch = _VALUE.unpack_from(value)
    return control_type, coordinator_epoch
