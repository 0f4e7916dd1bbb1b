"""Options (Spark's Kafka names), the sink's transactional ids and progress records, and the
fault points' syntax."""

from __future__ import annotations

from pathlib import Path

import pytest

from oncelog.spark.faults import InjectedFailure, Point, fail_point, hold_point, parse_points
from oncelog.spark.options import (
    OptionError,
    SinkOptions,
    SourceOptions,
    parse_duration_ms,
    parse_offset_spec,
)
from oncelog.spark.progress import (
    Progress,
    progress_group,
    query_id_from_metadata,
    transactional_id,
    txn_id_partition,
)

BOOT = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


def test_source_defaults_streaming_and_batch() -> None:
    streaming = SourceOptions.parse({**BOOT, "subscribe": "a, b"}, streaming=True)
    assert streaming.subscribe == ("a", "b")
    assert streaming.starting == "latest"
    assert streaming.read_committed is True
    assert streaming.fail_on_data_loss is True
    assert streaming.include_headers is False
    assert streaming.kafka["isolation.level"] == "read_committed"
    batch = SourceOptions.parse({**BOOT, "subscribe": "a"}, streaming=False)
    assert batch.starting == "earliest" and batch.ending == "latest"


def test_source_option_names_are_case_insensitive() -> None:
    parsed = SourceOptions.parse(
        {
            **BOOT,
            "SUBSCRIBEPATTERN": "pay.*",
            "maxoffsetspertrigger": "50",
            "INCLUDEHEADERS": "TRUE",
            "kafka.isolation.level": "read_uncommitted",
        },
        streaming=True,
    )
    assert parsed.subscribe_pattern == "pay.*"
    assert parsed.matches("payments") and not parsed.matches("xpayments")
    assert parsed.max_offsets_per_trigger == 50
    assert parsed.include_headers is True
    assert parsed.read_committed is False


def test_assign_and_offset_specs() -> None:
    parsed = SourceOptions.parse(
        {
            **BOOT,
            "assign": '{"t":[1,0],"u":[2]}',
            "startingOffsets": '{"t":{"0":5,"1":-2},"u":{"2":-1}}',
        },
        streaming=True,
    )
    assert parsed.assign == (("t", 0), ("t", 1), ("u", 2))
    assert parsed.starting == {("t", 0): 5, ("t", 1): -2, ("u", 2): -1}
    assert parsed.matches("u") and not parsed.matches("v")


@pytest.mark.parametrize(
    ("options", "streaming", "message"),
    [
        ({"subscribe": "a"}, True, "kafka.bootstrap.servers is required"),
        ({**BOOT}, True, "exactly one of subscribe"),
        ({**BOOT, "subscribe": "a", "assign": '{"a":[0]}'}, True, "exactly one of"),
        ({**BOOT, "subscribe": "a", "endingOffsets": "latest"}, True, "batch queries only"),
        ({**BOOT, "subscribe": "a", "endingOffsets": "earliest"}, False, "cannot be earliest"),
        ({**BOOT, "subscribe": "a", "startingOffsets": "latest"}, False, "cannot be latest"),
        ({**BOOT, "subscribe": "a", "startingOffsets": "soon"}, True, "earliest, latest or JSON"),
        ({**BOOT, "subscribe": "a", "maxOffsetsPerTrigger": "0"}, True, "must be positive"),
        ({**BOOT, "subscribe": "a", "failOnDataLoss": "maybe"}, True, "true or false"),
        ({**BOOT, "subscribe": "a", "kafka.group.id": "g"}, True, "set by the oncelog"),
        ({**BOOT, "subscribe": "a", "kafka.isolation.level": "x"}, True, "isolation.level"),
        ({**BOOT, "assign": "[1]"}, True, "non-empty JSON object"),
        ({**BOOT, "subscribePattern": "("}, True, "subscribePattern"),
    ],
)
def test_bad_source_options(options: dict[str, str], streaming: bool, message: str) -> None:
    with pytest.raises(OptionError, match=message):
        SourceOptions.parse(options, streaming=streaming)


def test_offset_spec_and_duration_parsing() -> None:
    assert parse_offset_spec(" Earliest ", "x") == "earliest"
    with pytest.raises(OptionError):
        parse_offset_spec('{"t":{"0":-3}}', "x")
    with pytest.raises(OptionError):
        parse_offset_spec('{"t":[1]}', "x")
    assert parse_duration_ms("15m") == 900_000
    assert parse_duration_ms("30 s") == 30_000
    assert parse_duration_ms("250") == 250
    with pytest.raises(OptionError):
        parse_duration_ms("soon")


def test_sink_options() -> None:
    parsed = SinkOptions.parse(
        {**BOOT, "topic": "out", "checkpointLocation": "/tmp/c", "kafka.linger.ms": "20"}
    )
    assert parsed.topic == "out"
    assert parsed.delivery == "exactly_once"
    assert parsed.txn_id_prefix == "oncelog-spark"
    assert parsed.checkpoint_location == "/tmp/c"
    assert parsed.kafka == {"bootstrap.servers": "127.0.0.1:9092", "linger.ms": "20"}
    with pytest.raises(OptionError, match="set by the oncelog"):
        SinkOptions.parse({**BOOT, "kafka.transactional.id": "x"})
    with pytest.raises(OptionError, match=r"oncelog\.delivery"):
        SinkOptions.parse({**BOOT, "oncelog.delivery": "maybe_once"})
    with pytest.raises(OptionError, match="prefix"):
        SinkOptions.parse({**BOOT, "oncelog.transactional.id.prefix": "a b"})


# ------------------------------------------------------------------ ids and progress


def test_transactional_ids_are_deterministic_and_reversible() -> None:
    txn = transactional_id("pre", "q-1", 7)
    assert txn == transactional_id("pre", "q-1", 7) == "pre-q-1-7"
    assert txn_id_partition("pre", "q-1", txn) == 7
    assert txn_id_partition("pre", "q-1", "pre-q-2-7") is None
    assert txn_id_partition("pre", "q-1", "pre-q-1-x") is None
    assert txn_id_partition("pre", "q-1", "pre-q-1-7-3") is None
    assert progress_group("pre", "q-1") == "pre-q-1"
    with pytest.raises(ValueError):
        transactional_id("pre", "q", -1)
    with pytest.raises(ValueError):
        transactional_id("pre", "", 0)


def test_progress_round_trip_and_coverage() -> None:
    mark = Progress(batch_id=12, query_id="q", partition=3)
    back = Progress.parse(mark.offset(), mark.metadata(), query_id="q", partition=3)
    assert back == mark
    assert back.covers(12) and back.covers(0) and not back.covers(13)


@pytest.mark.parametrize(
    ("offset", "query", "partition"),
    [(12, "other", 3), (12, "q", 4), (11, "q", 3)],
)
def test_progress_of_another_query_partition_or_batch_is_refused(
    offset: int, query: str, partition: int
) -> None:
    mark = Progress(batch_id=12, query_id="q", partition=3)
    with pytest.raises(ValueError):
        Progress.parse(offset, mark.metadata(), query_id=query, partition=partition)
    with pytest.raises(ValueError):
        Progress.parse(12, "not json", query_id="q", partition=3)


def test_query_id_from_checkpoint_metadata() -> None:
    assert query_id_from_metadata('{"id":"5e1c"}\n') == "5e1c"
    for bad in ("", "{}", "[1]", '{"id": ""}', "garbage"):
        with pytest.raises(ValueError):
            query_id_from_metadata(bad)


# ------------------------------------------------------------------ fault points


def test_fault_point_syntax() -> None:
    assert parse_points("task.write@2:1, commit.done ,commit.start@0") == (
        Point("task.write", 2, 1),
        Point("commit.done"),
        Point("commit.start", 0),
    )
    point = Point("task.write", 2)
    assert point.matches("task.write", 2, 5) and not point.matches("task.write", 3, 5)


def test_fail_point_fails_only_the_first_attempt(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ONCELOG_SPARK_FAIL_AT", "task.prepared@1:0")
    with pytest.raises(InjectedFailure):
        fail_point("task.prepared", 1, 0, attempt=0)
    fail_point("task.prepared", 1, 0, attempt=1)
    fail_point("task.prepared", 1, 1, attempt=0)
    fail_point("task.write", 1, 0, attempt=0)


def test_hold_point_waits_for_its_release_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("ONCELOG_SPARK_HOLD_AT", "commit.start@1")
    monkeypatch.setenv("ONCELOG_SPARK_HOLD_DIR", str(tmp_path))
    hold_point("commit.start", 2, None)  # another batch: passes without a trace
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "release-commit.start-1").touch()  # released before it is reached
    hold_point("commit.start", 1, None)
    assert (tmp_path / "held-commit.start-1").exists()
