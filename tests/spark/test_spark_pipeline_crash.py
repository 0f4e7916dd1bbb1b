"""The payments pipeline survives being killed anywhere: the driver (a ``local[2]`` Spark
application in its own process group) is SIGKILLed at chosen points of the exactly-once
protocol and started again from its checkpoints, and tasks fail and are retried
(``local[2,3]``); in the end the verifier finds the output equal to the exactly-once result of
the committed input — no duplicate, nothing missing, nothing of the aborted input."""

from __future__ import annotations

from pathlib import Path

import pytest

from examples.payments.verify import verify
from oncelog.harness.broker import BrokerProcess
from tests.support.spark_pipeline import EVENTS, Pipeline, expect_done, tail


@pytest.fixture
def pipeline(tpc_broker: BrokerProcess, tmp_path: Path) -> Pipeline:
    return Pipeline.create(tpc_broker.bootstrap, tmp_path)


# Four pipeline runs in one test (160 s on a quiet machine): the hang guard is longer than
# the suite's 300 s, which a slow or busy machine exceeds without anything being stuck.
@pytest.mark.timeout(900)
def test_driver_killed_at_every_step_of_the_commit_protocol(pipeline: Pipeline) -> None:
    # One checkpoint, killed again and again, each time at a later step of a later batch.
    steps = [
        ("task.write", 0),  # a task has sent records of its transaction
        ("task.prepared", 1),  # a task prepared: its transaction is in doubt
        ("commit.after_first", 2),  # the driver completed one transaction of several
        ("commit.done", 3),  # the sink committed, Spark's commit log not yet written
    ]
    for point, batch in steps:
        run = pipeline.run(crash_at=f"{point}@{batch}", queries="balances")
        pipeline.expect_killed(run, point)
        if point == "task.prepared":
            assert pipeline.open_transactions(), "nothing left in doubt by the kill"
        report = verify(pipeline.bootstrap, pipeline.input, pipeline.balances, None, partial=True)
        assert report.ok, f"after a kill at {point}@{batch}: {report}"
    # The windowed query too, killed with prepared transactions in doubt.
    run = pipeline.run(crash_at="task.prepared@2", queries="minutes")
    pipeline.expect_killed(run, "task.prepared")
    expect_done(pipeline.run())
    assert pipeline.open_transactions() == []
    report = verify(pipeline.bootstrap, pipeline.input, pipeline.balances, pipeline.minutes)
    assert report.ok, str(report)
    assert report.input_events == EVENTS and report.balance_records == EVENTS
    assert report.minute_records > 3


def test_task_failures_are_retried_without_duplicates(pipeline: Pipeline) -> None:
    run = pipeline.run(
        fail_at="task.write@1,task.prepared@2,task.prepared@3:1", master="local[2,3]"
    )
    expect_done(run)
    assert "injected failure at task.write" in run.stdout, tail(run)
    assert "injected failure at task.prepared" in run.stdout, tail(run)
    report = verify(pipeline.bootstrap, pipeline.input, pipeline.balances, pipeline.minutes)
    assert report.ok, str(report)
    assert report.balance_records == EVENTS
