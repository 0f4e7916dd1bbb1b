"""Batching: when batches fill, when they are ready, draining and retry order."""

from __future__ import annotations

from oncelog.client.accumulator import ProducerBatch, RecordAccumulator, estimate_record_size
from oncelog.client.types import TopicPartition
from oncelog.records.codec import RecordInput, iter_records

TP0 = TopicPartition("t", 0)
TP1 = TopicPartition("t", 1)


def rec(size: int = 10) -> RecordInput:
    return RecordInput(value=b"x" * size, timestamp=1)


def add(
    acc: RecordAccumulator, tp: TopicPartition, r: RecordInput, handle: str, now_ms: int
) -> tuple[ProducerBatch, bool]:
    assert r.timestamp is not None
    batch, index, full = acc.append(tp, r.key, r.value, r.headers, r.timestamp, now_ms, handle)
    assert index == batch.record_count - 1
    return batch, full


def handles(batch: ProducerBatch) -> list[str]:
    return [handle for _, _, handle in batch.handles]


def test_records_share_a_batch_until_batch_size() -> None:
    per_record = estimate_record_size(None, b"x" * 50, ())
    acc = RecordAccumulator(batch_size=61 + 3 * per_record, linger_ms=5)
    batches = [add(acc, TP0, rec(50), f"h{i}", 0) for i in range(4)]
    first = batches[0][0]
    assert [b is first for b, _ in batches] == [True, True, True, False]
    assert [full for _, full in batches] == [False, False, True, False]
    assert handles(first) == ["h0", "h1", "h2"]


def test_oversized_record_gets_its_own_batch() -> None:
    acc = RecordAccumulator(batch_size=100, linger_ms=5)
    add(acc, TP0, rec(10), "small", 0)
    big, full = add(acc, TP0, rec(500), "big", 0)
    assert full and handles(big) == ["big"]
    assert len(list(acc.batches())) == 2


def test_ready_after_linger() -> None:
    acc = RecordAccumulator(batch_size=10_000, linger_ms=5)
    add(acc, TP0, rec(), "h", 100)
    assert acc.ready(now_ms=104) == []
    assert acc.next_ready_delay_ms(now_ms=104) == 1
    assert acc.ready(now_ms=105) == [TP0]
    assert acc.next_ready_delay_ms(now_ms=105) == 0


def test_full_batch_is_ready_at_once() -> None:
    acc = RecordAccumulator(batch_size=100, linger_ms=1000)
    add(acc, TP0, rec(90), "h", 0)
    assert acc.ready(now_ms=0) == [TP0]


def test_flush_and_close_make_everything_ready() -> None:
    acc = RecordAccumulator(batch_size=10_000, linger_ms=1000)
    add(acc, TP0, rec(), "h", 0)
    assert acc.ready(now_ms=0) == []
    acc.begin_flush()
    assert acc.ready(now_ms=0) == [TP0]
    acc.end_flush()
    assert acc.ready(now_ms=0) == []
    acc.close()
    assert acc.ready(now_ms=0) == [TP0]


def test_muted_partitions_are_not_ready() -> None:
    acc = RecordAccumulator(batch_size=10_000, linger_ms=0)
    add(acc, TP0, rec(), "a", 0)
    add(acc, TP1, rec(), "b", 0)
    assert acc.ready(0, muted=frozenset({TP0})) == [TP1]
    assert acc.next_ready_delay_ms(0) == 0


def test_drain_takes_head_batch_and_retry_goes_back_to_the_head() -> None:
    acc = RecordAccumulator(batch_size=100, linger_ms=0)
    first, _ = add(acc, TP0, rec(80), "first", 0)
    second, _ = add(acc, TP0, rec(80), "second", 0)
    (drained,) = acc.drain([TP0], max_bytes=10_000)
    assert drained is first
    acc.reenqueue(drained)
    (again,) = acc.drain([TP0], max_bytes=10_000)
    assert again is first
    (then,) = acc.drain([TP0], max_bytes=10_000)
    assert then is second


def test_drained_batch_takes_no_more_records() -> None:
    acc = RecordAccumulator(batch_size=10_000, linger_ms=0)
    batch, _ = add(acc, TP0, rec(), "a", 0)
    acc.drain([TP0], max_bytes=10_000)
    acc.reenqueue(batch)
    batch.base_sequence = 0  # a sent batch keeps its records (and sequence) for retries
    other, _ = add(acc, TP0, rec(), "b", 0)
    assert other is not batch and handles(batch) == ["a"]


def test_drain_respects_max_bytes_but_always_sends_one() -> None:
    acc = RecordAccumulator(batch_size=1000, linger_ms=0)
    add(acc, TP0, rec(900), "a", 0)
    add(acc, TP1, rec(900), "b", 0)
    assert len(acc.drain([TP0, TP1], max_bytes=100)) == 1
    assert len(acc.drain([TP0, TP1], max_bytes=100)) == 1
    assert not acc.has_queued()


def test_encode_produces_a_valid_batch_with_producer_fields() -> None:
    acc = RecordAccumulator(batch_size=1000, linger_ms=0)
    batch, _ = add(acc, TP0, RecordInput(b"k", b"v", (), 5), "a", 0)
    add(acc, TP0, RecordInput(None, b"w", (), 6), "b", 0)
    batch.producer_id, batch.producer_epoch, batch.base_sequence = 42, 3, 7
    batch.transactional = True
    ((header, records),) = list(iter_records(batch.encode(compression=1)))
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (42, 3, 7)
    assert header.is_transactional and header.compression == 1
    assert [(r.key, r.value) for r in records] == [(b"k", b"v"), (None, b"w")]


def test_remove_and_remove_all() -> None:
    acc = RecordAccumulator(batch_size=1000, linger_ms=0)
    batch, _ = add(acc, TP0, rec(), "a", 0)
    add(acc, TP1, rec(), "b", 0)
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
    first, _ = add(acc, TP0, rec(80), "first", 0)
    add(acc, TP0, rec(80), "second", 0)
    add(acc, TP1, rec(10), "other", 0)
    drained = acc.drain([TP0, TP1, TP0], max_bytes=10_000)
    assert [b.tp for b in drained] == [TP0, TP1]
    assert drained[0] is first


def test_retries_go_back_in_sequence_order_ahead_of_unsent_batches() -> None:
    # Several batches of a partition are in flight; failed ones come back in any order.
    acc = RecordAccumulator(batch_size=100, linger_ms=0)
    sent = [add(acc, TP0, rec(80), f"b{i}", 0)[0] for i in range(3)]
    unsent, _ = add(acc, TP0, rec(80), "unsent", 0)
    for seq, batch in enumerate(acc.drain([TP0], 10_000) + acc.drain([TP0], 10_000)
                                + acc.drain([TP0], 10_000)):  # fmt: skip
        batch.producer_id, batch.producer_epoch, batch.base_sequence = 1, 0, seq
        batch.attempts = 1
    for batch in (sent[2], sent[0], sent[1]):
        acc.reenqueue(batch)
    assert list(acc.queued(TP0)) == [*sent, unsent]
    assert acc.head(TP0) is sent[0]


def test_records_are_encoded_as_appended_with_deltas_from_the_first() -> None:
    acc = RecordAccumulator(batch_size=10_000, linger_ms=0)
    batch, _ = add(acc, TP0, RecordInput(b"k", b"v", (("h", b"1"),), 1000), "a", 0)
    add(acc, TP0, RecordInput(None, None, (), 990), "b", 0)
    ((header, records),) = list(iter_records(batch.encode(compression=0)))
    assert (header.base_timestamp, header.max_timestamp) == (1000, 1000)
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in records] == [
        (0, 1000, b"k", b"v", (("h", b"1"),)),
        (1, 990, None, None, ()),
    ]
