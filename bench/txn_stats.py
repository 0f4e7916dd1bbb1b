"""Transaction-rate figures: percentiles of commit latencies and the merge of concurrent
producers' results into one aggregate (pure; used by the workers and by bench/run.py).

A transaction-rate result is a dict with ``records``, ``bytes``, ``txns``, ``started_at`` and
``ended_at`` (wall-clock seconds), ``latencies_ms`` (one per transaction), ``errors`` and
``first_errors``; ``merge_txn_rates`` returns the same shape, so per-thread results merge into
a per-process one and per-process results into the run's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

Result = dict[str, Any]


def percentile(ordered: Sequence[float], p: float) -> float:
    """The ``p`` quantile (0-1) of sorted values, nearest rank below; 0.0 for none."""
    if not ordered:
        return 0.0
    return float(ordered[min(len(ordered) - 1, int(p * len(ordered)))])


def txn_rate_result(
    *, txns: int, records_per_txn: int, record_size: int, started_at: float, seconds: float,
    latencies_ms: Sequence[float], errors: Sequence[str], **extra: Any,
) -> Result:
    """One producer's result: ``txns`` transactions over ``seconds`` from ``started_at``."""
    ordered = sorted(latencies_ms)
    if "prepare_ms" in extra:
        extra["prepare_ms"] = sorted(round(x, 3) for x in extra["prepare_ms"])
        extra["prepare_p50_ms"] = percentile(extra["prepare_ms"], 0.50)
    return {
        "records": txns * records_per_txn,
        "bytes": txns * records_per_txn * record_size,
        "seconds": seconds,
        "txns": txns,
        "txn_per_s": txns / seconds if seconds else 0.0,
        "started_at": started_at,
        "ended_at": started_at + seconds,
        "latencies_ms": [round(x, 3) for x in ordered],
        "p50_ms": percentile(ordered, 0.50),
        "p99_ms": percentile(ordered, 0.99),
        "producers": 1,
        "errors": len(errors),
        "first_errors": list(errors[:5]),
        **extra,
    }


def merge_txn_rates(results: Sequence[Result]) -> Result:
    """Concurrent transaction-rate results as one: transactions over the span from the first
    producer's start to the last one's end; latency percentiles over every transaction;
    ``producers`` summed. Any failed result (or none at all) makes the merge a failure."""
    failed = [r for r in results if r.get("errors")]
    producers = sum(int(r.get("producers", 1)) for r in results)
    if failed or not results:
        return {"records": 0, "bytes": 0, "seconds": 0.0, "producers": producers,
                "errors": sum(int(r.get("errors", 1)) for r in failed) or 1,
                "first_errors": [e for r in failed for e in r.get("first_errors", [])][:5]}
    started_at = min(r["started_at"] for r in results)
    ended_at = max(r["ended_at"] for r in results)
    seconds = ended_at - started_at
    latencies = sorted(x for r in results for x in r["latencies_ms"])
    txns = sum(int(r["txns"]) for r in results)
    merged: Result = {
        "records": sum(int(r["records"]) for r in results),
        "bytes": sum(int(r["bytes"]) for r in results),
        "seconds": seconds,
        "txns": txns,
        "txn_per_s": txns / seconds if seconds else 0.0,
        "started_at": started_at,
        "ended_at": ended_at,
        "latencies_ms": latencies,
        "p50_ms": percentile(latencies, 0.50),
        "p99_ms": percentile(latencies, 0.99),
        "producers": producers,
        "errors": 0,
        "first_errors": [],
    }
    prepares = sorted(x for r in results for x in r.get("prepare_ms", []))
    if prepares:
        merged["prepare_ms"] = prepares
        merged["prepare_p50_ms"] = percentile(prepares, 0.50)
    return merged


def without_samples(result: Result) -> Result:
    """The result without its per-transaction lists (for results.json and reports)."""
    return {k: v for k, v in result.items() if k not in ("latencies_ms", "prepare_ms")}
