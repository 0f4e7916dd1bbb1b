"""``oncelog groups``: consumer groups as kafka-consumer-groups.sh shows and changes them.

- ``list``: every group of every broker (``--state`` adds its state).
- ``describe GROUP``: per partition the committed offset, the log end offset (high
  watermark) and the lag between them, and the member that owns it; ``--members`` lists the
  members instead.
- ``reset-offsets``: new committed offsets for an inactive group (``--to-earliest``,
  ``--to-latest``, ``--to-offset``, ``--to-datetime``, ``--shift-by``), printed by
  ``--dry-run`` (the default) and committed with ``--execute``; as Kafka, offsets outside a
  partition's [earliest, latest] are clamped into it.
- ``delete GROUP...``: delete empty groups and their offsets.

Everything goes through ``oncelog.client.Admin`` (list/describe/delete_consumer_groups,
list_consumer_group_offsets, list_offsets); committing new offsets uses a Consumer.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from collections.abc import Iterable

from oncelog.cli.common import (
    CommandError,
    admin_config,
    connection_options,
    open_admin,
    print_table,
    run_command,
)
from oncelog.client import Admin, Consumer, ConsumerGroupDescription, OffsetSpec, TopicPartition
from oncelog.client.errors import KafkaClientError
from oncelog.errors import ErrorCode

DESCRIBE_HEADERS = ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                    "CONSUMER-ID", "HOST", "CLIENT-ID")
MEMBERS_HEADERS = ("GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS")
RESET_HEADERS = ("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET")
INACTIVE_STATES = ("Empty", "Dead")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    conn = connection_options()
    groups = sub.add_parser("groups", help="list, describe, reset and delete consumer groups")
    commands = groups.add_subparsers(dest="groups_command", required=True, metavar="COMMAND")

    p = commands.add_parser("list", parents=[conn], help="list consumer groups")
    p.add_argument("--state", action="store_true", help="show each group's state too")
    p.set_defaults(handler=cmd_list)

    p = commands.add_parser("describe", parents=[conn],
                            help="offsets, log end offsets and lag per partition")
    p.add_argument("group", metavar="GROUP", help="the consumer group")
    p.add_argument("--members", action="store_true",
                   help="list the group's members instead of its partitions")
    p.set_defaults(handler=cmd_describe)

    p = commands.add_parser("reset-offsets", parents=[conn],
                            help="move an inactive group's committed offsets")
    p.add_argument("group", metavar="GROUP", help="the consumer group")
    scope = p.add_mutually_exclusive_group(required=True)
    scope.add_argument("--topic", action="append", default=[], metavar="TOPIC[:P,P...]",
                       help="a topic, or some of its partitions, repeatable")
    scope.add_argument("--all-topics", action="store_true",
                       help="every topic the group has committed offsets for")
    to = p.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true", help="to each partition's start")
    to.add_argument("--to-latest", action="store_true", help="to each partition's end")
    to.add_argument("--to-offset", type=int, default=None, metavar="N", help="to offset N")
    to.add_argument("--to-datetime", default=None, metavar="ISO",
                    help="to the first record at or after this time, e.g. "
                         "2024-01-31T12:00:00.000 (UTC unless it says otherwise)")
    to.add_argument("--shift-by", type=int, default=None, metavar="N",
                    help="by N from the committed offset (negative: back)")
    run_mode = p.add_mutually_exclusive_group()
    run_mode.add_argument("--dry-run", action="store_true",
                          help="only print the new offsets (what happens without --execute)")
    run_mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    p.set_defaults(handler=cmd_reset)

    p = commands.add_parser("delete", parents=[conn], help="delete empty consumer groups")
    p.add_argument("group", nargs="+", metavar="GROUP", help="the consumer groups")
    p.set_defaults(handler=cmd_delete)


def run(args: argparse.Namespace) -> int:
    return run_command(args, args.handler, f"groups {args.groups_command}")


# ------------------------------------------------------------------------------ lookups

def _offsets(admin: Admin, partitions: Iterable[TopicPartition]) -> tuple[
    dict[TopicPartition, int], dict[TopicPartition, int]
]:
    """(earliest, latest = high watermark) of each partition, as Kafka's tool reads them."""
    tps = list(partitions)
    if not tps:
        return {}, {}
    return (admin.list_offsets(tps, OffsetSpec.earliest()),
            admin.list_offsets(tps, OffsetSpec.latest()))


def _committed(admin: Admin, group_id: str) -> dict[TopicPartition, int]:
    return {tp: om.offset for tp, om in admin.list_consumer_group_offsets(group_id).items()}


def _existing(admin: Admin, group_id: str) -> tuple[
    ConsumerGroupDescription, dict[TopicPartition, int]
]:
    group = admin.describe_consumer_groups([group_id])[group_id]
    committed = _committed(admin, group_id)
    if group.state == "Dead" and not committed:
        raise CommandError(f"consumer group {group_id!r} does not exist")
    return group, committed


# ------------------------------------------------------------------------------ commands

def cmd_list(args: argparse.Namespace) -> int:
    with open_admin(args) as admin:
        listed = [(g.group_id, g.state) for g in admin.list_consumer_groups()
                  if g.protocol_type in ("consumer", "")]
    if args.state:
        print_table(("GROUP", "STATE"), listed)
    else:
        for group_id, _ in listed:
            print(group_id)
    return 0


def cmd_describe(args: argparse.Namespace) -> int:
    with open_admin(args) as admin:
        group, committed = _existing(admin, args.group)
        owner = {tp: m for m in group.members for tp in m.assignment}
        partitions = sorted(set(committed) | set(owner))
        _, latest = ({}, {}) if args.members else _offsets(admin, partitions)
    if args.members:
        print_table(MEMBERS_HEADERS, [
            (group.group_id, m.member_id, m.host, m.client_id, len(m.assignment))
            for m in group.members
        ])
        return 0
    rows = []
    for tp in partitions:
        current = committed.get(tp)
        end = latest.get(tp)
        lag = "-" if current is None or end is None else max(0, end - current)
        m = owner.get(tp)
        rows.append((group.group_id, tp.topic, tp.partition,
                     "-" if current is None else current, "-" if end is None else end, lag,
                     m.member_id if m else "-", m.host if m else "-", m.client_id if m else "-"))
    if not group.members:
        print(f"Consumer group '{group.group_id}' has no active members.\n")
    print_table(DESCRIBE_HEADERS, rows)
    return 0


def _parse_datetime(text: str) -> int:
    try:
        when = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise CommandError(f"--to-datetime expects ISO-8601, got {text!r}", 2) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return int(when.timestamp() * 1000)


def _scope(admin: Admin, args: argparse.Namespace,
           committed: dict[TopicPartition, int]) -> list[TopicPartition]:
    if args.all_topics:
        return sorted(committed)
    out: list[TopicPartition] = []
    for spec in args.topic:
        name, _, parts = spec.partition(":")
        try:
            count = admin.describe_topics([name])[name].num_partitions
        except KafkaClientError:
            raise CommandError(f"topic {name!r} does not exist") from None
        if parts:
            try:
                wanted = [int(p) for p in parts.split(",")]
            except ValueError:
                raise CommandError(f"--topic expects TOPIC[:P,P...], got {spec!r}", 2) from None
            for p in wanted:
                if not 0 <= p < count:
                    raise CommandError(f"topic {name!r} has no partition {p}")
        else:
            wanted = list(range(count))
        out += [TopicPartition(name, p) for p in wanted]
    return out


def cmd_reset(args: argparse.Namespace) -> int:
    with open_admin(args) as admin:
        group, committed = _existing_or_new(admin, args.group)
        if group.state not in INACTIVE_STATES:
            raise CommandError(
                f"assignments can only be reset if the group '{args.group}' is inactive, but "
                f"the current state is {group.state}"
            )
        partitions = _scope(admin, args, committed)
        earliest, latest = _offsets(admin, partitions)
        targets: dict[TopicPartition, int] = {}
        if args.to_datetime is not None:
            when = _parse_datetime(args.to_datetime)
            found = admin.list_offsets(partitions, OffsetSpec.for_timestamp(when))
            targets = {tp: found.get(tp, -1) if found.get(tp, -1) >= 0 else latest[tp]
                       for tp in partitions}
    for tp in partitions:
        if args.to_earliest:
            target = earliest[tp]
        elif args.to_latest:
            target = latest[tp]
        elif args.to_offset is not None:
            target = args.to_offset
        elif args.shift_by is not None:
            target = committed.get(tp, latest[tp]) + args.shift_by
        else:
            target = targets[tp]
        targets[tp] = min(max(target, earliest[tp]), latest[tp])
    if args.execute:
        with Consumer({**admin_config(args), "group.id": args.group,
                       "enable.auto.commit": False}) as consumer:
            consumer.commit(targets)
    print_table(RESET_HEADERS, [(args.group, tp.topic, tp.partition, targets[tp])
                                for tp in partitions])
    if not args.execute:
        print("\n(dry run: nothing committed; add --execute to commit these offsets)")
    return 0


def _existing_or_new(admin: Admin, group_id: str) -> tuple[
    ConsumerGroupDescription, dict[TopicPartition, int]
]:
    """Resetting may create a group's offsets (Kafka allows it for a group not yet used)."""
    return admin.describe_consumer_groups([group_id])[group_id], _committed(admin, group_id)


def cmd_delete(args: argparse.Namespace) -> int:
    failed: dict[str, str] = {}
    with open_admin(args) as admin:
        for group_id, error in admin.delete_consumer_groups(args.group).items():
            code = ErrorCode.none if error is None else error.code
            if code == ErrorCode.non_empty_group:
                failed[group_id] = "the group is not empty"
            elif code == ErrorCode.group_id_not_found:
                failed[group_id] = "the group does not exist"
            elif error is not None:
                failed[group_id] = code.name if code is not None else str(error)
    deleted = [g for g in args.group if g not in failed]
    if deleted:
        names = ", ".join(f"'{g}'" for g in deleted)
        print(f"Deletion of requested consumer groups ({names}) was successful.")
    for group_id, why in failed.items():
        print(f"oncelog: deletion of consumer group '{group_id}' failed: {why}",
              file=sys.stderr)
    return 1 if failed else 0

