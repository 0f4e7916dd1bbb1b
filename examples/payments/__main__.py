"""The whole demo in one command: generate input, run the pipeline, verify the output.

    python -m examples.payments --bootstrap localhost:9092

against a broker started with ``oncelog serve -c transaction.two.phase.commit.enable=true``.
Topics get a fresh suffix per run unless ``--suffix`` is given.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
import uuid
from pathlib import Path

from examples.payments.generate import create_topics, generate
from examples.payments.pipeline import QUERIES, build_spark, start_query
from examples.payments.verify import verify


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="localhost:9092")
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--max-offsets", type=int, default=500)
    parser.add_argument("--suffix", default=None)
    parser.add_argument("--checkpoint", type=Path, default=None)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
    suffix = args.suffix or uuid.uuid4().hex[:8]
    topics = {
        "input": f"payments-{suffix}",
        "balances": f"balances-{suffix}",
        "minutes": f"minute-totals-{suffix}",
    }
    checkpoint = args.checkpoint or Path(tempfile.mkdtemp(prefix="oncelog-payments-"))
    create_topics(args.bootstrap, list(topics.values()), args.partitions)
    stats = generate(args.bootstrap, topics["input"], events=args.events)
    print(
        f"input: {stats.committed_events} committed events ({stats.committed_txns} "
        f"transactions), {stats.aborted_events} aborted ({stats.aborted_txns} transactions) "
        f"in {topics['input']}"
    )
    spark = build_spark()
    started = time.monotonic()
    try:
        for name in QUERIES:
            query = start_query(
                spark,
                name,
                bootstrap=args.bootstrap,
                input_topic=topics["input"],
                output_topic=topics[name],
                checkpoint=checkpoint,
                max_offsets=args.max_offsets,
            )
            query.awaitTermination()
            print(f"query {name}: {len(query.recentProgress)} micro-batches")
    finally:
        spark.stop()
    print(f"pipeline ran in {time.monotonic() - started:.1f} s (checkpoints in {checkpoint})")
    report = verify(args.bootstrap, topics["input"], topics["balances"], topics["minutes"])
    print(report)
    raise SystemExit(0 if report.ok else 1)


if __name__ == "__main__":
    main()
