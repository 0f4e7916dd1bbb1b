"""The payments pipeline's driver as a test runs it: topics and input made by ``create``,
``examples.payments.pipeline`` started in a session of its own (so that a crash point's
SIGKILL takes only the driver, its JVM and its Python workers), its exit code and log."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from examples.payments.generate import create_topics, generate
from oncelog.client import Admin
from oncelog.harness.broker import REPO_ROOT
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

    def start(
        self,
        *,
        crash_at: str = "",
        fail_at: str = "",
        queries: str = "balances,minutes",
        master: str = "local[2]",
        env: Mapping[str, str] | None = None,
    ) -> subprocess.Popen[str]:
        """Start the pipeline's driver; ``finish`` waits for it."""
        self.runs += 1
        environ = dict(os.environ)
        environ.pop("ONCELOG_SPARK_CRASH_AT", None)
        environ.pop("ONCELOG_SPARK_FAIL_AT", None)
        environ.pop("ONCELOG_SPARK_HOLD_AT", None)
        if crash_at:
            environ["ONCELOG_SPARK_CRASH_AT"] = crash_at
        if fail_at:
            environ["ONCELOG_SPARK_FAIL_AT"] = fail_at
        environ["ONCELOG_SPARK_CRASH_LOG"] = str(self.crash_log)
        environ["PYTHONPATH"] = str(REPO_ROOT)
        environ.update(env or {})
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
        with self.log_path.open("w") as log:
            return subprocess.Popen(
                argv, env=environ, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True, text=True,
            )  # fmt: skip

    def finish(
        self, process: subprocess.Popen[str], timeout: float = RUN_TIMEOUT
    ) -> subprocess.CompletedProcess[str]:
        """Wait for the driver to end (or be killed); its exit code and log."""
        try:
            code = process.wait(timeout)
        finally:
            # The driver's JVM and Python workers share its process group.
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait()
        output = self.log_path.read_text(errors="replace")
        return subprocess.CompletedProcess(process.args, code, output, "")

    def run(self, **options: Any) -> subprocess.CompletedProcess[str]:
        """Run the pipeline's driver (``start``'s options) until it ends (or is killed);
        returns its exit and logs."""
        return self.finish(self.start(**options))

    @property
    def log_path(self) -> Path:
        return self.logs / f"run-{self.runs}.log"

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
