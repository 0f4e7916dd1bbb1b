"""The reader's offset arithmetic: JSON form, resolving specs, rate limits, ranges, data loss,
and the micro-batch end chosen for each read limit."""

from __future__ import annotations

import itertools
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows

from oncelog.spark import offsets as off
from oncelog.spark.offsets import DataLoss, OffsetRange
from oncelog.spark.options import SourceOptions
from oncelog.spark.reader import OncelogStreamReader

A0, A1, B0 = ("a", 0), ("a", 1), ("b", 0)


def test_json_round_trip_uses_sparks_kafka_form() -> None:
    offsets = {A0: 5, A1: 7, B0: 0}
    data = off.to_json(offsets)
    assert data == {"a": {"0": 5, "1": 7}, "b": {"0": 0}}
    assert off.from_json(data) == offsets


def test_resolve_earliest_latest_and_per_partition() -> None:
    parts = [A0, A1, B0]
    earliest = {A0: 2, A1: 0, B0: 10}
    latest = {A0: 9, A1: 4, B0: 12}
    assert off.resolve("earliest", parts, earliest, latest) == earliest
    assert off.resolve("latest", parts, earliest, latest) == latest
    spec = {A0: 5, A1: -2}  # B0 not named: the default
    assert off.resolve(spec, parts, earliest, latest, default=-1) == {A0: 5, A1: 0, B0: 12}
    assert off.resolve(spec, parts, earliest, latest, default=-2) == {A0: 5, A1: 0, B0: 10}


def test_available_counts_offsets_between() -> None:
    assert off.available({A0: 3, A1: 5}, {A0: 10, A1: 5, B0: 2}) == 7 + 0 + 2


def test_rate_limit_shares_in_proportion_and_hits_the_limit_exactly() -> None:
    start = {A0: 0, A1: 100, B0: 0}
    latest = {A0: 600, A1: 400, B0: 100}  # 600 + 300 + 100 waiting
    end = off.rate_limit(start, latest, 100)
    assert off.available(start, end) == 100
    assert end == {A0: 60, A1: 130, B0: 10}


def test_rate_limit_gives_every_waiting_partition_something() -> None:
    start = {A0: 0, A1: 0, B0: 0}
    latest = {A0: 10_000, A1: 1, B0: 0}
    end = off.rate_limit(start, latest, 10)
    assert end[A1] == 1  # a tiny backlog is not starved
    assert end[B0] == 0
    assert off.available(start, end) == 10


def test_rate_limit_below_the_number_of_partitions_serves_the_biggest_backlogs() -> None:
    start = {A0: 0, A1: 0, B0: 0}
    latest = {A0: 5, A1: 50, B0: 20}
    assert off.rate_limit(start, latest, 2) == {A0: 0, A1: 1, B0: 1}


def test_rate_limit_with_room_for_everything_returns_latest() -> None:
    start = {A0: 3, A1: 0}
    latest = {A0: 5, A1: 2}
    assert off.rate_limit(start, latest, 4) == latest
    with pytest.raises(ValueError):
        off.rate_limit(start, latest, 0)


@given(
    st.dictionaries(
        st.tuples(st.sampled_from("abc"), st.integers(0, 5)),
        st.tuples(st.integers(0, 1000), st.integers(0, 1000)),
        min_size=1,
        max_size=8,
    ),
    st.integers(1, 3000),
)
def test_rate_limit_properties(spans: dict[tuple[str, int], tuple[int, int]], limit: int) -> None:
    start = {tp: a for tp, (a, b) in spans.items()}
    latest = {tp: a + b for tp, (a, b) in spans.items()}
    end = off.rate_limit(start, latest, limit)
    assert set(end) == set(latest)
    assert all(start[tp] <= end[tp] <= latest[tp] for tp in latest)
    assert off.available(start, end) == min(limit, off.available(start, latest))


def test_plan_ranges_one_per_partition_with_data() -> None:
    ranges = off.plan_ranges({A0: 0, A1: 5, B0: 3}, {A0: 4, A1: 5, B0: 9})
    assert ranges == [OffsetRange("a", 0, 0, 4), OffsetRange("b", 0, 3, 9)]


def test_plan_ranges_splits_for_min_partitions_without_gaps_or_overlaps() -> None:
    ranges = off.plan_ranges({A0: 0, B0: 0}, {A0: 90, B0: 10}, min_partitions=10)
    assert len(ranges) >= 10
    for tp, (lo, hi) in {A0: (0, 90), B0: (0, 10)}.items():
        mine = [r for r in ranges if (r.topic, r.partition) == tp]
        assert mine[0].start == lo and mine[-1].end == hi
        assert all(x.end == y.start for x, y in itertools.pairwise(mine))
    # Splitting stops at single offsets.
    tiny = off.plan_ranges({A0: 0}, {A0: 3}, min_partitions=10)
    assert [r.size for r in tiny] == [1, 1, 1]


def test_offset_range_rejects_a_backwards_range() -> None:
    with pytest.raises(ValueError):
        OffsetRange("a", 0, 5, 4)


def test_data_loss_reports_vanished_and_truncated_partitions() -> None:
    lost = off.data_loss({A0: 5, A1: 3, B0: 0}, {A0: 7, A1: 0})
    assert lost == [DataLoss("a", 0, 5, 7), DataLoss("b", 0, 0, None)]
    assert "5..6 are gone" in str(lost[0])
    assert "no longer exists" in str(lost[1])


# ------------------------------------------------------------------ read limits


def stream_reader(**extra: str) -> OncelogStreamReader:
    options = SourceOptions.parse(
        {"kafka.bootstrap.servers": "127.0.0.1:1", "subscribe": "a", **extra}, streaming=True
    )
    return OncelogStreamReader(options)


def test_default_read_limit_follows_the_options() -> None:
    assert stream_reader().getDefaultReadLimit() == ReadAllAvailable()
    assert stream_reader(maxOffsetsPerTrigger="10").getDefaultReadLimit() == ReadMaxRows(10)
    assert stream_reader(minOffsetsPerTrigger="7").getDefaultReadLimit() == ReadMinRows(7)


def test_end_for_max_rows_rate_limits() -> None:
    reader = stream_reader(maxOffsetsPerTrigger="10")
    end = reader.end_for({A0: 0, A1: 0}, {A0: 30, A1: 10}, ReadMaxRows(10))
    assert end == {A0: 7, A1: 3} or off.available({A0: 0, A1: 0}, end) == 10


def test_end_for_all_available_ignores_option_limits() -> None:
    reader = stream_reader(maxOffsetsPerTrigger="10", minOffsetsPerTrigger="1000")
    assert reader.end_for({A0: 0}, {A0: 50}, ReadAllAvailable()) == {A0: 50}


def test_end_for_min_rows_waits_until_enough_or_the_delay_passed() -> None:
    reader = stream_reader(minOffsetsPerTrigger="20", maxTriggerDelay="50ms")
    reader._last_trigger = time.monotonic()
    assert reader.end_for({A0: 0}, {A0: 5}, ReadMinRows(20)) == {A0: 0}
    assert reader.end_for({A0: 0}, {A0: 25}, ReadMinRows(20)) == {A0: 25}
    reader._last_trigger = time.monotonic() - 1.0
    assert reader.end_for({A0: 0}, {A0: 5}, ReadMinRows(20)) == {A0: 5}


def test_end_for_min_and_max_together() -> None:
    reader = stream_reader(minOffsetsPerTrigger="5", maxOffsetsPerTrigger="8")
    reader._last_trigger = time.monotonic()
    assert reader.end_for({A0: 0}, {A0: 3}, ReadMaxRows(8)) == {A0: 0}  # fewer than min
    assert reader.end_for({A0: 0}, {A0: 30}, ReadMaxRows(8)) == {A0: 8}


def test_available_now_never_waits_for_min_rows() -> None:
    reader = stream_reader(minOffsetsPerTrigger="1000")
    reader._available_now = {A0: 5}
    reader._last_trigger = time.monotonic()
    assert reader.end_for({A0: 0}, {A0: 5}, ReadMinRows(1000)) == {A0: 5}


def test_stream_reader_pickles_without_clients() -> None:
    import pickle

    reader = stream_reader()
    copy = pickle.loads(pickle.dumps(reader))
    assert copy.options == reader.options
    assert copy.planner._admin is None and copy.planner._consumer is None
