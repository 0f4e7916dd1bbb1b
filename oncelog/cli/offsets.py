"""``oncelog offsets``: each partition's earliest and latest offset and its last stable offset
(kafka-get-offsets.sh plus the LSO: where read_committed consumers stop while a transaction
is open; LATEST - LSO records are waiting on one)."""

from __future__ import annotations

import argparse

from oncelog.cli.common import (
    CommandError,
    admin_config,
    connection_options,
    open_admin,
    print_table,
    run_command,
)
from oncelog.client import Consumer, TopicPartition
from oncelog.client.errors import KafkaClientError

HEADERS = ("TOPIC", "PARTITION", "EARLIEST", "LATEST", "LSO", "UNSTABLE")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "offsets", parents=[connection_options()],
        help="earliest, latest and last stable offset per partition",
        description="Earliest and latest offset (high watermark) of each partition, and the "
        "LSO (the latest offset a read_committed consumer may read; below LATEST while a "
        "transaction is open). UNSTABLE = LATEST - LSO.",
    )
    p.add_argument("--topic", action="append", default=[],
                   help="topic, repeatable (default: every topic but internal ones)")
    p.add_argument("--partitions", default=None, metavar="P[,P...]",
                   help="only these partitions (default: all)")
    p.set_defaults(handler=cmd_offsets)


def run(args: argparse.Namespace) -> int:
    return run_command(args, args.handler, "offsets")


def partition_offsets(
    args: argparse.Namespace, partitions: list[TopicPartition], isolation: str
) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
    """(earliest, latest) of each partition as a consumer with ``isolation`` sees them:
    latest is the high watermark under read_uncommitted, the LSO under read_committed."""
    with Consumer({**admin_config(args), "isolation.level": isolation}) as consumer:
        return consumer.beginning_offsets(partitions), consumer.end_offsets(partitions)


def cmd_offsets(args: argparse.Namespace) -> int:
    wanted = None
    if args.partitions is not None:
        try:
            wanted = {int(p) for p in args.partitions.split(",") if p.strip()}
        except ValueError:
            raise CommandError(f"--partitions expects P[,P...], got {args.partitions!r}",
                               2) from None
    with open_admin(args) as admin:
        try:
            topics = admin.describe_topics(args.topic or None)
        except KafkaClientError as exc:
            raise CommandError(f"cannot describe {', '.join(args.topic)}: {exc}") from None
    partitions = [
        TopicPartition(name, index)
        for name, description in sorted(topics.items())
        if args.topic or not name.startswith("__")
        for index in range(description.num_partitions)
        if wanted is None or index in wanted
    ]
    if not partitions:
        raise CommandError("no such partitions")
    earliest, latest = partition_offsets(args, partitions, "read_uncommitted")
    _, stable = partition_offsets(args, partitions, "read_committed")
    print_table(HEADERS, [
        (tp.topic, tp.partition, earliest[tp], latest[tp], stable[tp], latest[tp] - stable[tp])
        for tp in partitions
    ])
    return 0
