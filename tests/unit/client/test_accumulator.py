"""Batching: when batches fill, when they are ready, draining and retry order."""

from __future__ import annotations

from oncelog.client.accumulator import RecordAccumulator, estimate_record_size
from oncelog.client.types import TopicPartition
from oncelog.records.codec import RecordInput, iter_records

TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)


def rec(size: int = 10) -> RecordInput:
    return RecordInput(value=b"x" * size, timestamp=1)


def test_records_share_a_batch_until_batch_size() -> None:
    per_record = estimate_record_size(None, b"x" * 50, ())
    acc = RecordAccumulator(batch_size=61 + 3 * per_record, linger_ms=5)
    batches = [acc.append(TP0, rec(50), f"h{i}", now_ms=0) for i in range(4)]
    first = batches[0][0]
    assert [b is first for b, _ in batches] == [True, True, True, False]
    assert [full for _, full in batches] == [False, False, True, False]
    assert first.handles == ["h0", "h1", "h2"]


def test_oversized_record_gets_its_own_batch() -> None:
    acc = RecordAccumulator(batch_size=100, linger_ms=5)
    acc.append(TP0, rec(10), "small", now_ms=0)
    big, full = acc.append(TP0, rec(500), "big", now_ms=0)
    assert full and big.handles == ["big"]
    assert len(list(acc.batches())) == 2


def test_ready_after_linger() -> None:
    acc = RecordAccumulator(batch_size=10_000, linger_ms=5)
    acc.append(TP0, rec(), "h", now_ms=100)
    assert acc.ready(now_ms=104) == []
    assert acc.next_ready_delay_ms(now_ms=104) == 1
    assert acc.ready(now_ms=105) == [TP0]
    assert acc.next_ready_delay_ms(now_ms=105) == 0


def test_full_batch_is_ready_at_once() -> None:
    acc = RecordAccumulator(batch_size=100, linger_ms=1000)
    acc.append(TP0, rec(90), "h", now_ms=0)
    assert acc.ready(now_ms=0) == [TP0]


def test_flush_and_close_make_everything_ready() -> None:
    acc = RecordAccumulator(batch_size=10_000, linger_ms=1000)
    acc.append(TP0, rec(), "h", now_ms=0)
    assert acc.ready(now_ms=0) == []
    acc.begin_flush()
    assert acc.ready(now_ms=0) == [TP0]
    acc.end_flush()
    assert acc.ready(now_ms=0) == []
    acc.close()
    assert acc.ready(now_ms=0) == [TP0]


def test_muted_partitions_are_not_ready() -> None:
    acc = RecordAccumulator(batch_size=10_000, linger_ms=0)
    acc.append(TP0, rec(), "a", now_ms=0)
    acc.append(TP1, rec(), "b", now_ms=0)
    assert acc.ready(0, muted=frozenset({TP0})) == [TP1]
    assert acc.next_ready_delay_ms(0) == 0


def test_drain_takes_head_batch_and_retry_goes_back_to_the_head() -> None:
    acc = RecordAccumulator(batch_size=100, linger_ms=0)
    first, _ = acc.append(TP0, rec(80), "first", now_ms=0)
    second, _ = acc.append(TP0, rec(80), "second", now_ms=0)
    (drained,) = acc.drain([TP0], max_bytes=10_000)
    assert drained is first
    acc.reenqueue(drained)
    (again,) = acc.drain([TP0], max_bytes=10_000)
    assert again is first
    (then,) = acc.drain([TP0], max_bytes=10_000)
    assert then is second


def test_drained_batch_takes_no_more_records() -> None:
    acc = RecordAccumulator(batch_size=10_000, linger_ms=0)
    batch, _ = acc.append(TP0, rec(), "a", now_ms=0)
    acc.drain([TP0], max_bytes=10_000)
    acc.reenqueue(batch)
    batch.base_sequence = 0  # a sent batch keeps its records (and sequence) for retries
    other, _ = acc.append(TP0, rec(), "b", now_ms=0)
    assert other is not batch and batch.handles == ["a"]


def test_drain_respects_max_bytes_but_always_sends_one() -> None:
    acc = RecordAccumulator(batch_size=1000, linger_ms=0)
    acc.append(TP0, rec(900), "a", now_ms=0)
    acc.append(TP1, rec(900), "b", now_ms=0)
    assert len(acc.drain([TP0, TP1], max_bytes=100)) == 1
    assert len(acc.drain([TP0, TP1], max_bytes=100)) == 1
    assert not acc.has_queued()


def test_encode_produces_a_valid_batch_with_producer_fields() -> None:
    acc = RecordAccumulator(batch_size=1000, linger_ms=0)
    batch, _ = acc.append(TP0, RecordInput(b"k", b"v", (), 5), "a", now_ms=0)
    acc.append(TP0, RecordInput(None, b"w", (), 6), "b", now_ms=0)
    batch.producer_id, batch.producer_epoch, batch.base_sequence = 42, 3, 7
    batch.transactional = True
    ((header, records),) = list(iter_records(batch.encode(compression=1)))
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (42, 3, 7)
    assert header.is_transactional and header.compression == 1
    assert [(r.key, r.value) for r in records] == [(b"k", b"v"), (None, b"w")]


def test_remove_and_remove_all() -> None:
    acc = RecordAccumulator(batch_size=1000, linger_ms=0)
    batch, _ = acc.append(TP0, rec(), "a", now_ms=0)
    acc.append(TP1, rec(), "b", now_ms=0)
    acc.remove(batch)
    assert acc.queued_partitions() == [TP1]
    assert len(acc.remove_all()) == 1
    assert not acc.has_queued()


def test_size_estimate_grows_with_content() -> None:
    assert estimate_record_size(None, None, ()) < estimate_record_size(
        b"k", b"v" * 10, (("h", b"x"),)
    )


def test_drain_takes_one_batch_per_partition_even_if_named_twice() -> None:
    # The broker refuses a Produce with two batches for one partition (INVALID_RECORD).
    acc = RecordAccumulator(batch_size=100, linger_ms=0)
    first, _ = acc.append(TP0, rec(80), "first", now_ms=0)
    acc.append(TP0, rec(80), "second", now_ms=0)
    acc.append(TP1, rec(10), "other", now_ms=0)
    drained = acc.drain([TP0, TP1, TP0], max_bytes=10_000)
    assert [b.tp for b in drained] == [TP0, TP1]
    assert drained[0] is first
