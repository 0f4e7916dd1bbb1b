"""The payments pipeline on Spark: exactly-once (2PC) sink versus at-least-once, same run.

    python bench/spark_pipeline.py [--events 20000] [--max-offsets 4000] [--rounds 2]

Starts its own ``oncelog serve`` (two-phase commit on) on loopback, writes ``--events``
payment events (transactionally, some aborted), then runs the ``balances`` query (the
per-event ledger: one output record per input event) with Trigger.AvailableNow over the
whole input, alternately with ``oncelog.delivery=exactly_once`` and ``at_least_once``, each
round with a fresh checkpoint and output topic, in one SparkSession (``local[2]``).

Reported per mode (median over rounds): records/s over the query's wall time, micro-batches,
and per micro-batch the mean ``addBatch`` time (tasks' writes + the sink's commit) and
``triggerExecution`` time from Spark's progress reports. The 2PC overhead per micro-batch is
the difference of the means. Prints a Markdown table and writes it, with the raw numbers as
JSON, to ``bench/out/spark-<timestamp>/``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from examples.payments.generate import create_topics, generate  # noqa: E402
from examples.payments.pipeline import build_spark, start_query  # noqa: E402
from examples.payments.verify import read_topic  # noqa: E402
from oncelog.harness.broker import BrokerProcess  # noqa: E402

MODES = ("exactly_once", "at_least_once")


def run_once(
    spark: Any,
    bootstrap: str,
    input_topic: str,
    mode: str,
    round_no: int,
    max_offsets: int,
    work: Path,
) -> dict[str, Any]:
    output = f"bench-balances-{mode}-{round_no}"
    create_topics(bootstrap, [output], 3)
    checkpoint = work / f"ckpt-{mode}-{round_no}"
    started = time.monotonic()
    query = start_query(
        spark, "balances", bootstrap=bootstrap, input_topic=input_topic, output_topic=output,
        checkpoint=checkpoint, max_offsets=max_offsets, delivery=mode,
    )  # fmt: skip
    query.awaitTermination()
    wall = time.monotonic() - started
    if query.exception() is not None:
        raise RuntimeError(f"{mode} round {round_no} failed: {query.exception()}")
    progress = [p for p in query.recentProgress if int(p["numInputRows"]) > 0]
    rows = sum(int(p["numInputRows"]) for p in progress)
    written = len(read_topic(bootstrap, output))
    return {
        "mode": mode,
        "round": round_no,
        "wall_s": wall,
        "input_rows": rows,
        "output_records": written,
        "records_per_s": rows / wall if wall else 0.0,
        "batches": len(progress),
        "add_batch_ms": [int(p["durationMs"].get("addBatch", 0)) for p in progress],
        "trigger_ms": [int(p["durationMs"].get("triggerExecution", 0)) for p in progress],
    }


def summarize(results: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for mode in MODES:
        runs = [r for r in results if r["mode"] == mode]
        out[mode] = {
            "records_per_s": statistics.median(r["records_per_s"] for r in runs),
            "wall_s": statistics.median(r["wall_s"] for r in runs),
            "batches": statistics.median(r["batches"] for r in runs),
            "add_batch_ms": statistics.mean(x for r in runs for x in r["add_batch_ms"]),
            "trigger_ms": statistics.mean(x for r in runs for x in r["trigger_ms"]),
        }
    return out


def table(summary: dict[str, dict[str, float]], args: argparse.Namespace) -> str:
    eos, alo = summary["exactly_once"], summary["at_least_once"]
    lines = [
        f"Payments `balances` query, {args.events} committed events, maxOffsetsPerTrigger "
        f"{args.max_offsets}, local[2], {args.rounds} rounds per mode (median / mean)",
        "",
        "| sink | records/s | wall s | micro-batches | addBatch ms/batch | trigger ms/batch |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for label, row in (("exactly-once (2PC)", eos), ("at-least-once", alo)):
        lines.append(
            f"| {label} | {row['records_per_s']:.0f} | {row['wall_s']:.1f} | "
            f"{row['batches']:.0f} | {row['add_batch_ms']:.0f} | {row['trigger_ms']:.0f} |"
        )
    lines += [
        "",
        f"2PC overhead per micro-batch: {eos['add_batch_ms'] - alo['add_batch_ms']:.0f} ms "
        f"(addBatch), {eos['trigger_ms'] - alo['trigger_ms']:.0f} ms (whole trigger); "
        f"throughput ratio {eos['records_per_s'] / alo['records_per_s']:.2f}",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20000)
    parser.add_argument("--max-offsets", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    work = Path(tempfile.mkdtemp(prefix="oncelog-spark-bench-"))
    broker = BrokerProcess(
        work / "data", log_level="WARNING",
        configs={"transaction.two.phase.commit.enable": True},
    ).start()  # fmt: skip
    try:
        input_topic = "bench-payments"
        create_topics(broker.bootstrap, [input_topic], 3)
        generate(broker.bootstrap, input_topic, events=args.events, txn_size=500, abort_every=10)
        spark = build_spark("local[2]", shuffle_partitions=4)
        try:
            # Warm-up: JIT, Python workers, pandas imports.
            run_once(
                spark, broker.bootstrap, input_topic, "at_least_once", 0, args.max_offsets, work
            )
            results = []
            for round_no in range(1, args.rounds + 1):
                for mode in MODES if round_no % 2 else tuple(reversed(MODES)):
                    result = run_once(
                        spark, broker.bootstrap, input_topic, mode, round_no, args.max_offsets, work
                    )
                    print(
                        f"{mode} round {round_no}: {result['records_per_s']:.0f} records/s, "
                        f"{result['batches']} batches, {result['wall_s']:.1f} s",
                        flush=True,
                    )
                    results.append(result)
        finally:
            spark.stop()
    finally:
        broker.kill()
        shutil.rmtree(work, ignore_errors=True)
    summary = summarize(results)
    text = table(summary, args)
    print(text)
    out = REPO / "bench" / "out" / time.strftime("spark-%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    (out / "spark_pipeline.md").write_text(text + "\n")
    (out / "spark_pipeline.json").write_text(
        json.dumps({"args": vars(args), "summary": summary, "runs": results}, indent=2)
    )
    print(f"written to {out}")


if __name__ == "__main__":
    main()
