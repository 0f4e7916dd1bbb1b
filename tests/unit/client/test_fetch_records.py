"""Aborted-transaction filtering over hand-built fetch data (KIP-98 "Consumer" section).

Every test runs twice: with aiokafka's native batch decoder for uncompressed batches, and
with the codec's alone."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from oncelog.client import fetch_records
from oncelog.client.fetch_records import decode_fetched
from oncelog.records.batch import set_base_offset
from oncelog.records.codec import RecordInput, encode_batch
from oncelog.records.control import ControlType, encode_marker_batch


@pytest.fixture(autouse=True, params=["native", "codec"])
def decoder(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    if request.param == "codec":
        monkeypatch.setattr(fetch_records, "NATIVE_BATCH", None)
    else:
        assert fetch_records.NATIVE_BATCH is not None  # aiokafka (a test dependency) is here
    yield request.param


def data_batch(base: int, values: list[bytes], pid: int = -1, transactional: bool = False) -> bytes:
    return encode_batch(
        [RecordInput(value=v, timestamp=1000 + i) for i, v in enumerate(values)],
        base_offset=base,
        producer_id=pid,
        producer_epoch=0 if pid >= 0 else -1,
        base_sequence=0 if pid >= 0 else -1,
        transactional=transactional,
    )


def marker(base: int, pid: int, kind: ControlType) -> bytes:
    buf = bytearray(encode_marker_batch(kind, pid, 0, 0, 2000))
    set_base_offset(buf, 0, base)
    return bytes(buf)


def values(result: object) -> list[bytes | None]:
    return [m.value for m in result.messages]  # type: ignore[attr-defined]


# Log: 0-1 txn pid 7 | 2 plain | 3 txn pid 8 | 4 ABORT(7) | 5 COMMIT(8) | 6 txn pid 7 | 7 COMMIT(7)
LOG = b"".join(
    [
        data_batch(0, [b"a7-0", b"a7-1"], pid=7, transactional=True),
        data_batch(2, [b"plain"]),
        data_batch(3, [b"c8"], pid=8, transactional=True),
        marker(4, 7, ControlType.ABORT),
        marker(5, 8, ControlType.COMMIT),
        data_batch(6, [b"c7"], pid=7, transactional=True),
        marker(7, 7, ControlType.COMMIT),
    ]
)


def test_read_committed_drops_aborted_and_control_records() -> None:
    result = decode_fetched("t", 0, LOG, 0, read_committed=True, aborted_transactions=[(7, 0)])
    assert values(result) == [b"plain", b"c8", b"c7"]
    assert [m.offset for m in result.messages] == [2, 3, 6]
    assert result.next_offset == 8


def test_read_uncommitted_returns_everything_but_markers() -> None:
    result = decode_fetched("t", 0, LOG, 0, read_committed=False, aborted_transactions=[(7, 0)])
    assert values(result) == [b"a7-0", b"a7-1", b"plain", b"c8", b"c7"]
    assert result.next_offset == 8


def test_without_aborted_list_transactions_count_as_committed() -> None:
    result = decode_fetched("t", 0, LOG, 0, read_committed=True, aborted_transactions=None)
    assert values(result) == [b"a7-0", b"a7-1", b"plain", b"c8", b"c7"]


def test_aborted_entry_only_applies_from_its_first_offset() -> None:
    # pid 7 aborted a transaction starting at offset 6: the earlier batch (0-1) is committed.
    log = b"".join(
        [
            data_batch(0, [b"early"], pid=7, transactional=True),
            marker(1, 7, ControlType.COMMIT),
            data_batch(2, [b"late"], pid=7, transactional=True),
            marker(3, 7, ControlType.ABORT),
        ]
    )
    result = decode_fetched("t", 0, log, 0, read_committed=True, aborted_transactions=[(7, 2)])
    assert values(result) == [b"early"]
    assert result.next_offset == 4


def test_abort_marker_ends_the_aborted_range() -> None:
    # Aborted txn of pid 9 at 0, its ABORT at 1, then a new (committed) txn of pid 9 at 2.
    log = b"".join(
        [
            data_batch(0, [b"x"], pid=9, transactional=True),
            marker(1, 9, ControlType.ABORT),
            data_batch(2, [b"y"], pid=9, transactional=True),
            marker(3, 9, ControlType.COMMIT),
        ]
    )
    result = decode_fetched("t", 0, log, 0, read_committed=True, aborted_transactions=[(9, 0)])
    assert values(result) == [b"y"]


def test_interleaved_producers_only_the_aborted_one_is_dropped() -> None:
    log = b"".join(
        [
            data_batch(0, [b"p1-a"], pid=1, transactional=True),
            data_batch(1, [b"p2-a"], pid=2, transactional=True),
            data_batch(2, [b"p1-b"], pid=1, transactional=True),
            marker(3, 2, ControlType.COMMIT),
            marker(4, 1, ControlType.ABORT),
        ]
    )
    result = decode_fetched("t", 0, log, 0, read_committed=True, aborted_transactions=[(1, 0)])
    assert values(result) == [b"p2-a"]
    assert result.next_offset == 5


def test_non_transactional_batch_of_an_aborted_pid_is_kept() -> None:
    log = b"".join(
        [
            data_batch(0, [b"txn"], pid=5, transactional=True),
            data_batch(1, [b"idempotent"], pid=5, transactional=False),
            marker(2, 5, ControlType.ABORT),
        ]
    )
    result = decode_fetched("t", 0, log, 0, read_committed=True, aborted_transactions=[(5, 0)])
    assert values(result) == [b"idempotent"]


def test_records_below_the_fetch_offset_are_skipped() -> None:
    log = data_batch(10, [b"a", b"b", b"c"])
    result = decode_fetched("t", 0, log, 11, read_committed=True)
    assert [m.offset for m in result.messages] == [11, 12]
    assert result.next_offset == 13


def test_only_markers_still_advance_the_position() -> None:
    log = marker(20, 3, ControlType.COMMIT)
    result = decode_fetched("t", 0, log, 20, read_committed=True)
    assert result.messages == []
    assert result.next_offset == 21


def test_partial_trailing_batch_is_left_for_the_next_fetch() -> None:
    whole = data_batch(0, [b"one"])
    partial = data_batch(1, [b"two" * 50])[:40]
    result = decode_fetched("t", 0, whole + partial, 0, read_committed=True)
    assert values(result) == [b"one"]
    assert result.next_offset == 1


def test_empty_data() -> None:
    assert decode_fetched("t", 0, b"", 5, read_committed=True).next_offset == 5
    assert decode_fetched("t", 0, None, 5, read_committed=False).messages == []


def test_message_fields() -> None:
    batch = encode_batch([RecordInput(b"k", b"v", (("h", b"1"),), 1234)], base_offset=3)
    (msg,) = decode_fetched("topic", 2, batch, 0, read_committed=False).messages
    assert (msg.topic, msg.partition, msg.offset, msg.timestamp) == ("topic", 2, 3, 1234)
    assert (msg.key, msg.value, msg.headers) == (b"k", b"v", (("h", b"1"),))


def flip_byte_in_body(batch: bytes) -> bytes:
    """The batch with one byte of its last record flipped (inside the CRC-covered part)."""
    buf = bytearray(batch)
    buf[len(buf) - 2] ^= 0xFF
    return bytes(buf)


def test_corrupt_batch_ends_the_data_with_an_error_naming_partition_and_offset() -> None:
    log = b"".join(
        [
            data_batch(0, [b"a", b"b"]),
            flip_byte_in_body(data_batch(2, [b"bad-1", b"bad-2"])),
            data_batch(4, [b"after"]),
        ]
    )
    result = decode_fetched("orders", 3, log, 0, read_committed=True)
    assert values(result) == [b"a", b"b"]  # what precedes the corrupt batch is delivered
    assert result.next_offset == 2  # and the position stays at the corrupt batch
    assert result.error is not None
    assert (result.error.topic, result.error.partition, result.error.offset) == ("orders", 3, 2)
    text = str(result.error)
    assert "orders-3" in text and "offset 2" in text and "2..3" in text
    assert "crc mismatch" in text and "seek past" in text


def test_corrupt_first_batch_gives_no_messages_and_keeps_the_fetch_offset() -> None:
    log = flip_byte_in_body(data_batch(7, [b"x"])) + data_batch(8, [b"y"])
    result = decode_fetched("t", 0, log, 7, read_committed=False)
    assert result.messages == []
    assert result.next_offset == 7
    assert result.error is not None and result.error.offset == 7


def test_corrupt_control_batch_is_an_error_too() -> None:
    log = data_batch(0, [b"x"], pid=4, transactional=True) + flip_byte_in_body(
        marker(1, 4, ControlType.ABORT)
    )
    result = decode_fetched("t", 0, log, 0, read_committed=True, aborted_transactions=[(4, 0)])
    assert result.messages == []
    assert result.next_offset == 1
    assert result.error is not None and result.error.offset == 1


def test_without_crc_check_a_flipped_value_byte_is_not_detected() -> None:
    log = flip_byte_in_body(data_batch(0, [b"value"]))
    result = decode_fetched("t", 0, log, 0, read_committed=False, verify_crc=False)
    assert result.error is None
    assert len(result.messages) == 1


@pytest.mark.parametrize("compression", [0, 1, 4])
@pytest.mark.parametrize("log_append_time", [False, True])
def test_both_decoders_give_the_same_messages(compression: int, log_append_time: bool) -> None:
    records = [
        RecordInput(b"k", b"v" * 300, (("h", b"1"), ("empty", None)), 1000),
        RecordInput(None, None, (), 990),
        RecordInput(b"", b"", (), 5000),
        RecordInput(None, bytes(range(256)) * 70, (), 1001),
    ]
    log = encode_batch(records, base_offset=10, compression=compression,
                       timestamp_type=int(log_append_time)) + data_batch(14, [b"x"])  # fmt: skip
    native = decode_fetched("t", 1, log, 11, read_committed=True)
    codec = decode_fetched("t", 1, log, 11, read_committed=True, native=False)
    assert native == codec
    assert [m.offset for m in native.messages] == [11, 12, 13, 14]
    assert native.messages[0].timestamp == (5000 if log_append_time else 990)
    assert native.messages[0].timestamp_type == int(log_append_time)


def test_a_record_running_past_its_batch_is_corrupt_for_both_decoders() -> None:
    batch = bytearray(data_batch(0, [b"abc"]))
    batch[61] = 0x7E  # the record's length varint: far more than the batch holds
    for native in (True, False):
        result = decode_fetched("t", 0, bytes(batch), 0, read_committed=False, native=native,
                                verify_crc=False)  # fmt: skip
        assert result.messages == [] and result.error is not None
