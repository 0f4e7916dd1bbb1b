"""``oncelog records delete``: delete records below an offset (a small kafka-delete-records.sh).

The partitions come from ``--offset-json-file`` in kafka-delete-records.sh's format
(``{"partitions": [{"topic": "t", "partition": 0, "offset": 3}], "version": 1}``; offset -1
means the high watermark) or from ``--topic T --partition P --offset O``. The output is that
tool's: one ``partition: T-P\\tlow_watermark: N`` (or ``error: ...``) line per partition.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from oncelog.cli.common import CommandError, connection_options, open_admin, run_command
from oncelog.client import TopicPartition
from oncelog.client.errors import KafkaClientError


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    conn = connection_options()
    records = sub.add_parser("records", help="delete records below an offset")
    commands = records.add_subparsers(dest="records_command", required=True, metavar="COMMAND")
    p = commands.add_parser("delete", parents=[conn],
                            help="move partitions' log start offsets up (DeleteRecords)")
    p.add_argument("--offset-json-file", type=Path, default=None, metavar="FILE",
                   help='kafka-delete-records.sh JSON: {"partitions": [{"topic": ..., '
                        '"partition": ..., "offset": ...}], "version": 1}')
    p.add_argument("--topic", default=None, help="topic (instead of --offset-json-file)")
    p.add_argument("--partition", type=int, default=None, help="partition of --topic")
    p.add_argument("--offset", type=int, default=None,
                   help="delete the records below this offset (-1: the high watermark)")
    p.set_defaults(handler=cmd_delete)


def run(args: argparse.Namespace) -> int:
    return run_command(args, args.handler, f"records {args.records_command}")


def requested_offsets(args: argparse.Namespace) -> dict[TopicPartition, int]:
    """The partitions and offsets named on the command line or in the JSON file."""
    simple = (args.topic, args.partition, args.offset)
    if args.offset_json_file is not None:
        if any(v is not None for v in simple):
            raise CommandError("give --offset-json-file or --topic/--partition/--offset, "
                               "not both", 2)
        return _offsets_from_json(args.offset_json_file)
    if any(v is None for v in simple):
        raise CommandError("--topic, --partition and --offset are required together "
                           "(or give --offset-json-file)", 2)
    return {TopicPartition(args.topic, args.partition): args.offset}


def _offsets_from_json(path: Path) -> dict[TopicPartition, int]:
    try:
        document = json.loads(path.read_text())
        entries = document["partitions"]
        offsets: dict[TopicPartition, int] = {}
        for entry in entries:
            tp = TopicPartition(str(entry["topic"]), int(entry["partition"]))
            if tp in offsets:
                raise CommandError(f"partition {tp.topic}-{tp.partition} is given twice", 2)
            offsets[tp] = int(entry["offset"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CommandError(f"cannot read offsets from {path}: {exc}", 2) from None
    if not offsets:
        raise CommandError(f"{path} names no partitions", 2)
    return offsets


def cmd_delete(args: argparse.Namespace) -> int:
    offsets = requested_offsets(args)
    print("Executing records delete operation")
    failed = 0
    lines = []
    with open_admin(args) as admin:
        for tp, offset in offsets.items():
            try:
                low = admin.delete_records({tp: offset}, timeout_ms=args.timeout_ms)[tp]
                lines.append(f"partition: {tp.topic}-{tp.partition}\tlow_watermark: {low}")
            except KafkaClientError as exc:
                failed += 1
                lines.append(f"partition: {tp.topic}-{tp.partition}\terror: {exc}")
    print("Records delete operation completed:")
    for line in lines:
        print(line)
    return 1 if failed else 0
