"""The payments pipeline survives being killed anywhere: the driver (a ``local[2]`` Spark
application in its own process group) is SIGKILLed at chosen points of the exactly-once
protocol and started again from its checkpoints, and tasks fail and are retried
(``local[2,3]``); in the end the verifier finds the output equal to the exactly-once result of
the committed input — no duplicate, nothing missing, nothing of the aborted input."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from examples.payments.generate import create_topics, generate
from examples.payments.verify import verify
from oncelog.client import Admin
from tests.support.broker import REPO_ROOT, BrokerProcess
from tests.support.names import unique_name

EVENTS = 600
MAX_OFFSETS = 200  # ~850 input offsets: five micro-batches per query
RUN_TIMEOUT = 300


@dataclass
class Pipeline:
    bootstrap: str
    input: str
    balances: str
    minutes: str
    checkpoint: Path
    logs: Path
    runs: int = 0

    @classmethod
    def create(cls, bootstrap: str, tmp_path: Path) -> Pipeline:
        name = unique_name("pay")
        pipeline = cls(
            bootstrap,
            f"{name}-in",
            f"{name}-balances",
            f"{name}-minutes",
            tmp_path / "checkpoint",
            tmp_path / "logs",
        )
        pipeline.logs.mkdir()
        create_topics(bootstrap, [pipeline.input, pipeline.balances, pipeline.minutes], 3)
        stats = generate(bootstrap, pipeline.input, events=EVENTS, step_ms=1000, abort_every=4)
        assert stats.aborted_txns >= 3
        return pipeline

    def run(
        self,
        *,
        crash_at: str = "",
        fail_at: str = "",
        queries: str = "balances,minutes",
        master: str = "local[2]",
    ) -> subprocess.CompletedProcess[str]:
        """Run the pipeline's driver until it ends (or is killed); returns its exit and logs."""
        self.runs += 1
        env = dict(os.environ)
        env.pop("ONCELOG_SPARK_CRASH_AT", None)
        env.pop("ONCELOG_SPARK_FAIL_AT", None)
        if crash_at:
            env["ONCELOG_SPARK_CRASH_AT"] = crash_at
        if fail_at:
            env["ONCELOG_SPARK_FAIL_AT"] = fail_at
        env["ONCELOG_SPARK_CRASH_LOG"] = str(self.crash_log)
        env["PYTHONPATH"] = str(REPO_ROOT)
        argv = [
            sys.executable, "-m", "examples.payments.pipeline",
            "--bootstrap", self.bootstrap,
            "--input", self.input,
            "--balances-topic", self.balances,
            "--minutes-topic", self.minutes,
            "--checkpoint", str(self.checkpoint),
            "--max-offsets", str(MAX_OFFSETS),
            "--queries", queries,
            "--master", master,
        ]  # fmt: skip
        log_path = self.logs / f"run-{self.runs}.log"
        with log_path.open("w") as log:
            process = subprocess.Popen(
                argv, env=env, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True, text=True,
            )  # fmt: skip
            try:
                code = process.wait(RUN_TIMEOUT)
            finally:
                # The driver's JVM and Python workers share its process group.
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                process.wait()
        output = log_path.read_text(errors="replace")
        return subprocess.CompletedProcess(argv, code, output, "")

    @property
    def crash_log(self) -> Path:
        return self.logs / "crashes.log"

    def expect_killed(self, run: subprocess.CompletedProcess[str], point: str) -> None:
        assert run.returncode == -signal.SIGKILL, f"not killed at {point}:\n{tail(run)}"
        fired = self.crash_log.read_text().splitlines() if self.crash_log.exists() else []
        assert fired and fired[-1].startswith(f"crash point {point} "), (fired, tail(run))

    def open_transactions(self) -> list[str]:
        with Admin({"bootstrap.servers": self.bootstrap}) as admin:
            return sorted(
                t.transactional_id
                for t in admin.list_transactions()
                if t.state == "Ongoing" and t.transactional_id.startswith("payments-")
            )


def tail(run: subprocess.CompletedProcess[str], lines: int = 60) -> str:
    kept = [line for line in run.stdout.splitlines() if "\tat " not in line]
    return "\n".join(kept[-lines:])


def expect_done(run: subprocess.CompletedProcess[str]) -> None:
    assert run.returncode == 0, tail(run)


@pytest.fixture
def pipeline(tpc_broker: BrokerProcess, tmp_path: Path) -> Pipeline:
    return Pipeline.create(tpc_broker.bootstrap, tmp_path)


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
