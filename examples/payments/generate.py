"""Write payment events to the input topic, in transactions, some of them aborted.

    python -m examples.payments.generate --bootstrap localhost:9092 --events 2000

Committed transactions carry ``--txn-size`` events of accounts ``acct-00``..; every
``--abort-every``-th transaction is aborted after its records reached the broker, and
carries events that would stand out if anything counted them: huge amounts, and accounts
(``ghost-*``) that no committed event has. Event times start at a fixed instant and advance
``--step-ms`` per committed event; the last committed event is far enough ahead
(``WATERMARK_DELAY_MS`` + 2 minutes) to close every window before it. Deterministic for a
given ``--seed``.
"""

from __future__ import annotations

import argparse
import logging
import random
from dataclasses import dataclass

from examples.payments.model import MINUTE_MS, WATERMARK_DELAY_MS, Event
from oncelog.client import Admin, Producer
from oncelog.client.errors import TopicAlreadyExistsError

log = logging.getLogger(__name__)

__all__ = ["GeneratorStats", "create_topics", "generate"]

START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


@dataclass
class GeneratorStats:
    committed_events: int = 0
    aborted_events: int = 0
    committed_txns: int = 0
    aborted_txns: int = 0


def create_topics(bootstrap: str, names: list[str], partitions: int) -> None:
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        for name in names:
            try:
                admin.create_topic(name, partitions)
            except TopicAlreadyExistsError:
                pass


def generate(
    bootstrap: str,
    topic: str,
    *,
    events: int,
    txn_size: int = 50,
    abort_every: int = 4,
    accounts: int = 20,
    step_ms: int = 150,
    seed: int = 7,
    transactional_id: str | None = None,
) -> GeneratorStats:
    """Write ``events`` committed events (plus aborted ones) to ``topic``."""
    rng = random.Random(seed)
    stats = GeneratorStats()
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id or f"payments-generator-{topic}-{seed}",
            "linger.ms": 5,
        }
    )
    ts = START_MS
    txn_index = 0
    try:
        producer.init_transactions()
        while stats.committed_events < events:
            txn_index += 1
            abort = abort_every > 0 and txn_index % abort_every == 0
            producer.begin_transaction()
            if abort:
                for i in range(txn_size):
                    account = f"ghost-{i % 3}" if i % 2 else f"acct-{rng.randrange(accounts):02d}"
                    ghost = Event(
                        f"x{txn_index}-{i}",
                        account,
                        10_000_000 + i,
                        ts + rng.randrange(10 * MINUTE_MS),
                    )
                    producer.send(topic, ghost.encode(), key=ghost.account)
                producer.flush(60)
                producer.abort_transaction()
                stats.aborted_txns += 1
                stats.aborted_events += txn_size
                continue
            size = min(txn_size, events - stats.committed_events)
            for i in range(size):
                last = stats.committed_events + i == events - 1
                ts += (WATERMARK_DELAY_MS + 2 * MINUTE_MS) if last else step_ms
                event = Event(
                    f"e{stats.committed_events + i}",
                    f"acct-{rng.randrange(accounts):02d}",
                    rng.randrange(-5_000, 20_000),
                    ts,
                )
                producer.send(topic, event.encode(), key=event.account)
            producer.commit_transaction()
            stats.committed_txns += 1
            stats.committed_events += size
    finally:
        producer.close()
    log.info("generated %s", stats)
    return stats


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="localhost:9092")
    parser.add_argument("--topic", default="payments")
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--txn-size", type=int, default=50)
    parser.add_argument("--abort-every", type=int, default=4)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    create_topics(args.bootstrap, [args.topic], args.partitions)
    stats = generate(
        args.bootstrap,
        args.topic,
        events=args.events,
        txn_size=args.txn_size,
        abort_every=args.abort_every,
        seed=args.seed,
    )
    print(
        f"committed {stats.committed_events} events in {stats.committed_txns} transactions, "
        f"aborted {stats.aborted_events} in {stats.aborted_txns}"
    )


if __name__ == "__main__":
    main()
