"""The one-screen summary ``oncelog verify`` prints at the end of a run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from oncelog.verify.history import ANOMALY_KINDS, NOT_FAILURES, Results


def _pairs(counts: Any) -> str:
    if not isinstance(counts, dict) or not counts:
        return "none"
    return ", ".join(f"{k} {v}" for k, v in counts.items())


def summary(results: Results, report_dir: Path, seed: int) -> str:
    totals = results.totals
    txns = totals.get("txns", {})
    lines = [
        f"verdict: {'VALID' if results.valid else 'INVALID'} (seed {seed})",
        f"operations: {totals.get('ops', 0)} in {totals.get('duration_s', 0):.0f}s; "
        f"transactions: ok {txns.get('ok', 0)}, fail {txns.get('fail', 0)}, "
        f"unknown {txns.get('unknown', 0)}",
        f"clients: {_pairs(totals.get('clients'))}",
        f"sends {totals.get('sends', 0)}, polled records {totals.get('polled_records', 0)}, "
        f"final read {totals.get('final_records', 0)} records",
        f"faults: {_pairs(totals.get('faults'))}",
    ]
    counts = results.counts()
    if counts:
        lines.append("anomalies:")
        for kind in sorted(counts, key=lambda k: (ANOMALY_KINDS.index(k)
                                                  if k in ANOMALY_KINDS else len(ANOMALY_KINDS))):
            note = " (not a failure)" if kind in NOT_FAILURES else ""
            lines.append(f"  {kind}: {counts[kind]}{note}")
    else:
        lines.append("anomalies: none")
    lines.append(f"report: {report_dir / 'report.html'}")
    return "\n".join(lines)
