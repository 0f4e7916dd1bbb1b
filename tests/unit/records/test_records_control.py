"""Transaction marker control batches."""

from __future__ import annotations

import pytest
from aiokafka.record.control_record import ABORT_MARKER, COMMIT_MARKER, ControlRecord
from aiokafka.record.default_records import DefaultRecordBatch as AioBatch
from kafka.record.default_records import DefaultRecordBatch as KafkaPythonBatch

from oncelog.errors import ErrorCode, KafkaError
from oncelog.records.codec import Record, decode_batch
from oncelog.records.control import ControlType, decode_control, encode_marker_batch
from oncelog.records.validate import validate_batches


@pytest.mark.parametrize("control_type", list(ControlType))
def test_marker_round_trip(control_type: ControlType) -> None:
    data = encode_marker_batch(control_type, 4242, 7, 13, 1_700_000_000_123)
    header, (record,) = decode_batch(data)
    assert header.is_control and header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (4242, 7, -1)
    assert header.base_offset == 0 and header.records_count == 1 and header.compression == 0
    assert record.timestamp == header.max_timestamp == 1_700_000_000_123
    assert decode_control(record) == (control_type, 13)
    assert record.key == bytes([0, 0, 0, int(control_type)])
    assert record.value == bytes([0, 0, 0, 0, 0, 13])
    (checked,) = validate_batches(data, max_batch_bytes=1 << 20, allow_control=True)
    assert checked == header


@pytest.mark.parametrize(
    ("control_type", "expected"),
    [(ControlType.ABORT, ABORT_MARKER), (ControlType.COMMIT, COMMIT_MARKER)],
)
def test_clients_read_our_markers(control_type: ControlType, expected: ControlRecord) -> None:
    data = encode_marker_batch(control_type, 1, 0, 2, 99)
    aio = AioBatch(data)
    assert aio.is_control_batch and aio.validate_crc()
    (record,) = list(aio)
    assert record.key is not None and ControlRecord.parse(record.key) == expected
    kp = KafkaPythonBatch(data)
    assert kp.is_control_batch
    (kp_record,) = list(kp)
    assert kp_record.type == int(control_type)


def test_newer_value_versions_with_extra_fields_are_read() -> None:
    record = Record(0, 0, b"\x00\x01\x00\x01", b"\x00\x01\x00\x00\x00\x05\x00\x00", ())
    assert decode_control(record) == (ControlType.COMMIT, 5)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (None, b"\x00\x00\x00\x00\x00\x01"),
        (b"\x00\x00\x00", b"\x00\x00\x00\x00\x00\x01"),
        (b"\x00\x00\x00\x02", b"\x00\x00\x00\x00\x00\x01"),  # LEADER_CHANGE, not a marker
        (b"\x00\x00\x00\x01", None),
        (b"\x00\x00\x00\x01", b"\x00\x00\x00"),
    ],
)
def test_non_markers_are_rejected(key: bytes | None, value: bytes | None) -> None:
    with pytest.raises(KafkaError) as info:
        decode_control(Record(0, 0, key, value, ()))
    assert info.value.code == ErrorCode.corrupt_message
