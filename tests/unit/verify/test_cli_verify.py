"""``oncelog verify``'s command line: durations, usage errors (exit 2), the summary."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from oncelog.cli.main import main
from oncelog.cli.verify import parse_duration
from oncelog.verify.history import Anomaly, Results
from oncelog.verify.summary import summary


@pytest.mark.parametrize(("text", "seconds"), [
    ("90", 90.0), ("90s", 90.0), ("2m", 120.0), ("1h", 3600.0), ("1.5m", 90.0), (" 10m ", 600.0),
])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "0", "-5", "10d", "m", "1m30s", "ten"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        parse_duration(text)


@pytest.mark.parametrize(("argv", "message"), [
    (["--bootstrap-server", "127.0.0.1:1", "--faults", "kill"], "--faults needs --spawn"),
    (["--spawn", "single", "--faults", "kill,meteor"], "unknown fault meteor"),
    (["--bootstrap-server", "127.0.0.1:1", "--clients", "oncelog,rdkafka-go"],
     "unknown client rdkafka-go"),
    (["--bootstrap-server", "127.0.0.1:1", "--duration", "soon"], "positive duration"),
    (["--bootstrap-server", "127.0.0.1:1", "--spawn", "single"], "not allowed with"),
    (["--duration", "1m"], "one of the arguments --bootstrap-server --spawn is required"),
    (["--bootstrap-server", "127.0.0.1:1", "--clients", "java"], "--java-classpath"),
    (["--bootstrap-server", "127.0.0.1:1", "--concurrency", "0"], "at least 1"),
])
def test_usage_errors_exit_2_with_one_clear_line(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # No Java harness built here, whatever the machine's .cache holds.
    monkeypatch.setenv("ONCELOG_REFERENCE_CACHE", str(tmp_path / "empty-cache"))
    with pytest.raises(SystemExit) as exited:
        code = main(["verify", *argv, "--report", str(tmp_path / "r")])
        raise SystemExit(code)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_summary_gives_the_verdict_totals_anomalies_and_report_path() -> None:
    results = Results(
        valid=False,
        anomalies={"G0": [Anomaly("G0", "cycle")],
                   "aborted-read": [Anomaly("aborted-read", "x")] * 2, "duplicate": []},
        totals={"ops": 120, "txns": {"ok": 100, "fail": 15, "unknown": 5}, "sends": 400,
                "polled_records": 200, "faults": {"kill": 2, "cut": 1}, "final_records": 390,
                "duration_s": 20.0, "clients": {"oncelog": 60, "confluent-kafka": 60}})
    text = summary(results, Path("/r"), 7)
    assert text.splitlines()[0] == "verdict: INVALID (seed 7)"
    assert "ok 100, fail 15, unknown 5" in text
    assert "faults: kill 2, cut 1" in text
    assert "  aborted-read: 2\n  G0: 1 (not a failure)" in text
    assert "duplicate" not in text
    assert text.splitlines()[-1] == "report: /r/report.html"
