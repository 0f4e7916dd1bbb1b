"""``oncelog groups``: consumer groups as kafka-consumer-groups.sh shows and changes them,
with its flags (``--group``, ``--all-groups``, ...) and its action flags: ``groups
--describe --group G`` is ``groups describe G``.

- ``list``: every group of every broker (``--state`` adds its state or filters by states).
- ``describe GROUP...``: per partition the committed offset, the log end offset (high
  watermark) and the lag between them, and the member that owns it; ``--members`` lists the
  members instead (``--verbose``: with their partitions), ``--state`` the group's state.
- ``reset-offsets``: new committed offsets for inactive groups (``--to-earliest``,
  ``--to-latest``, ``--to-current``, ``--to-offset``, ``--to-datetime``, ``--by-duration``,
  ``--shift-by``, ``--from-file``), printed by ``--dry-run`` (the default; ``--export`` as
  CSV) and committed with ``--execute``; as Kafka, offsets asked for by number outside a
  partition's [earliest, latest] are clamped into it.
- ``delete GROUP...``: delete empty groups and their offsets.
- ``delete-offsets GROUP --topic T[:P,...]``: delete an empty group's offsets (OffsetDelete).

Everything goes through ``oncelog.client.Admin`` (list/describe/delete_consumer_groups,
list_consumer_group_offsets, list_offsets, delete_consumer_group_offsets); committing new
offsets uses a Consumer.
"""

from __future__ import annotations

import argparse
import datetime
import re
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from oncelog.cli.common import (
    CommandError,
    admin_config,
    connection_options,
    open_admin,
    print_table,
    run_command,
)
from oncelog.client import (
    Admin,
    Consumer,
    ConsumerGroupDescription,
    ConsumerGroupListing,
    OffsetSpec,
    TopicPartition,
)
from oncelog.client.errors import KafkaClientError
from oncelog.errors import ErrorCode

DESCRIBE_HEADERS = ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                    "CONSUMER-ID", "HOST", "CLIENT-ID")
MEMBERS_HEADERS = ("GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS")
STATE_HEADERS = ("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS")
RESET_HEADERS = ("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET")
INACTIVE_STATES = ("Empty", "Dead")
# Kafka's ConsumerGroupState names (what --state filters on, any case).
STATES = ("PreparingRebalance", "CompletingRebalance", "Stable", "Dead", "Empty",
          "Assigning", "Reconciling")
# oncelog's groups are all classic ones (JoinGroup/SyncGroup; no KIP-848 heartbeat groups).
GROUP_TYPES = ("classic", "consumer", "share", "streams")

# kafka-consumer-groups.sh's action flags: `groups --describe --group G` is `groups describe`.
KAFKA_ACTIONS = {"--list": "list", "--describe": "describe", "--delete": "delete",
                 "--reset-offsets": "reset-offsets", "--delete-offsets": "delete-offsets"}


def _group_options(p: argparse.ArgumentParser, *, many: bool, all_groups: bool = True) -> None:
    p.add_argument("group", nargs="*" if many else "?", metavar="GROUP",
                   help="the consumer group" + ("s" if many else ""))
    p.add_argument("--group", dest="group_option", action="append", default=[],
                   metavar="GROUP", help="the same, as kafka-consumer-groups.sh takes it"
                   + (" (repeatable)" if many else ""))
    if all_groups:
        p.add_argument("--all-groups", action="store_true", help="every consumer group")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    # -v logs the client's activity; --verbose is kafka-consumer-groups.sh's (describe).
    conn = connection_options(verbose_flags=("-v",))
    groups = sub.add_parser(
        "groups", help="list, describe, reset and delete consumer groups",
        description="Consumer groups, as kafka-consumer-groups.sh: `oncelog groups describe "
        "G` or Kafka's form `oncelog groups --describe --group G` (--list, --delete, "
        "--reset-offsets, --delete-offsets alike).",
    )
    commands = groups.add_subparsers(dest="groups_command", required=True, metavar="COMMAND")

    p = commands.add_parser("list", parents=[conn], help="list consumer groups")
    p.add_argument("--state", nargs="?", const="", default=None, metavar="STATE[,STATE...]",
                   help="show each group's state; with states, only groups in them ("
                        + ", ".join(STATES) + "; any case)")
    p.add_argument("--type", nargs="?", const="", default=None, metavar="TYPE[,TYPE...]",
                   help="show each group's type (oncelog's are all Classic); with types, "
                        "only groups of them (" + ", ".join(GROUP_TYPES) + ")")
    _timeout_option(p)
    p.set_defaults(handler=cmd_list)

    p = commands.add_parser("describe", parents=[conn],
                            help="offsets, log end offsets and lag per partition")
    _group_options(p, many=True)
    shown = p.add_mutually_exclusive_group()
    shown.add_argument("--offsets", action="store_true",
                       help="per partition: committed offset, log end offset and lag (what "
                            "describe shows without --members or --state)")
    shown.add_argument("--members", action="store_true",
                       help="list the group's members instead of its partitions")
    shown.add_argument("--state", action="store_true",
                       help="the group's coordinator, assignment strategy, state and "
                            "member count instead of its partitions")
    p.add_argument("--verbose", action="store_true",
                   help="with --members: each member's assigned partitions too")
    _timeout_option(p)
    p.set_defaults(handler=cmd_describe)

    p = commands.add_parser("reset-offsets", parents=[conn],
                            help="move an inactive group's committed offsets")
    _group_options(p, many=True)
    scope = p.add_mutually_exclusive_group()
    scope.add_argument("--topic", action="append", default=[], metavar="TOPIC[:P,P...]",
                       help="a topic, or some of its partitions, repeatable")
    scope.add_argument("--all-topics", action="store_true",
                       help="every topic the group has committed offsets for")
    to = p.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true", help="to each partition's start")
    to.add_argument("--to-latest", action="store_true", help="to each partition's end")
    to.add_argument("--to-current", action="store_true",
                    help="to the committed offset (the end where there is none)")
    to.add_argument("--to-offset", type=int, default=None, metavar="N", help="to offset N")
    to.add_argument("--to-datetime", default=None, metavar="ISO",
                    help="to the first record at or after this time, e.g. "
                         "2024-01-31T12:00:00.000 (UTC unless it says otherwise)")
    to.add_argument("--by-duration", default=None, metavar="PnDTnHnMnS",
                    help="to the first record at or after this long ago (ISO-8601 duration, "
                         "e.g. PT1H30M)")
    to.add_argument("--shift-by", type=int, default=None, metavar="N",
                    help="by N from the committed offset (negative: back)")
    to.add_argument("--from-file", type=Path, default=None, metavar="CSV",
                    help="to the offsets of a CSV file as --export writes it: "
                         "TOPIC,PARTITION,OFFSET lines (GROUP,TOPIC,PARTITION,OFFSET for "
                         "several groups)")
    run_mode = p.add_mutually_exclusive_group()
    run_mode.add_argument("--dry-run", action="store_true",
                          help="only print the new offsets (what happens without --execute)")
    run_mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    p.add_argument("--export", action="store_true",
                   help="print the new offsets as CSV, the format --from-file reads")
    _timeout_option(p)
    p.set_defaults(handler=cmd_reset)

    p = commands.add_parser("delete", parents=[conn], help="delete empty consumer groups")
    _group_options(p, many=True)
    _timeout_option(p)
    p.set_defaults(handler=cmd_delete)

    p = commands.add_parser("delete-offsets", parents=[conn],
                            help="delete an empty group's committed offsets (OffsetDelete)")
    _group_options(p, many=False, all_groups=False)
    p.add_argument("--topic", action="append", default=[], required=True,
                   metavar="TOPIC[:P,P...]",
                   help="a topic, or some of its partitions, repeatable")
    _timeout_option(p)
    p.set_defaults(handler=cmd_delete_offsets)


def _timeout_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--timeout", dest="timeout_ms", type=int, default=argparse.SUPPRESS,
                   metavar="MS", help="kafka-consumer-groups.sh's name for --timeout-ms")


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


def _listed(admin: Admin) -> list[ConsumerGroupListing]:
    """The consumer groups (and simple ones, with offsets only), as Kafka's tool lists them."""
    return [g for g in admin.list_consumer_groups() if g.protocol_type in ("consumer", "")]


def _group_ids(admin: Admin | None, args: argparse.Namespace) -> list[str]:
    """The groups named (GROUP or --group) or, with --all-groups, every consumer group."""
    named = list(dict.fromkeys([*_as_list(args.group), *args.group_option]))
    if getattr(args, "all_groups", False):
        if named:
            raise CommandError("give groups or --all-groups, not both", 2)
        return [] if admin is None else [g.group_id for g in _listed(admin)]
    if not named:
        raise CommandError("name a group: GROUP, --group GROUP"
                           + (" or --all-groups" if hasattr(args, "all_groups") else ""), 2)
    return named


def _as_list(value: str | list[str] | None) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


def _names(text: str, known: Sequence[str], what: str) -> set[str]:
    """A comma-separated list of ``known`` names, any case, as their lower-case forms."""
    lowered = {name.lower(): name for name in known}
    wanted = {part.strip().lower() for part in text.split(",") if part.strip()}
    unknown = sorted(wanted - set(lowered))
    if unknown:
        raise CommandError(f"Invalid {what} list '{text}'. Valid {what}s are: "
                           f"{', '.join(known)}", 2)
    return wanted


# ------------------------------------------------------------------------------ commands

def cmd_list(args: argparse.Namespace) -> int:
    states = _names(args.state, STATES, "state") if args.state else set()
    types = _names(args.type, GROUP_TYPES, "type") if args.type else set()
    with open_admin(args) as admin:
        listed = [(g.group_id, g.state) for g in _listed(admin)
                  if (not states or g.state.lower() in states)
                  and (not types or "classic" in types)]
    if args.state is None and args.type is None:
        for group_id, _ in listed:
            print(group_id)
        return 0
    headers = ["GROUP"]
    headers += ["TYPE"] if args.type is not None else []
    headers += ["STATE"] if args.state is not None else []
    print_table(headers, [
        [group_id, *(["Classic"] if args.type is not None else []),
         *([state] if args.state is not None else [])]
        for group_id, state in listed
    ])
    return 0


def cmd_describe(args: argparse.Namespace) -> int:
    failed = 0
    with open_admin(args) as admin:
        group_ids = _group_ids(admin, args)
        brokers = admin.describe_cluster().brokers if args.state else {}
        for number, group_id in enumerate(group_ids):
            if number:
                print()
            try:
                group, committed = _existing(admin, group_id)
            except CommandError as exc:
                print(f"oncelog: {exc}", file=sys.stderr)
                failed += 1
                continue
            if args.state:
                _print_state(group, brokers)
            elif args.members:
                _print_members(group, args.verbose)
            else:
                _print_offsets(admin, group, committed)
    return 1 if failed else 0


def _print_offsets(admin: Admin, group: ConsumerGroupDescription,
                   committed: dict[TopicPartition, int]) -> None:
    owner = {tp: m for m in group.members for tp in m.assignment}
    partitions = sorted(set(committed) | set(owner))
    _, latest = _offsets(admin, partitions)
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


def _print_members(group: ConsumerGroupDescription, verbose: bool) -> None:
    """--members; with --verbose each member's partitions, as topic(p,p), ..."""
    headers = MEMBERS_HEADERS + (("ASSIGNMENT",) if verbose else ())
    rows = []
    for m in group.members:
        row: tuple[object, ...] = (group.group_id, m.member_id, m.host, m.client_id,
                                   len(m.assignment))
        if verbose:
            by_topic: dict[str, list[int]] = {}
            for tp in m.assignment:
                by_topic.setdefault(tp.topic, []).append(tp.partition)
            row += (", ".join(f"{topic}({','.join(map(str, sorted(parts)))})"
                              for topic, parts in sorted(by_topic.items())) or "-",)
        rows.append(row)
    print_table(headers, rows)


def _print_state(group: ConsumerGroupDescription,
                 brokers: Mapping[int, tuple[str, int]]) -> None:
    host, port = brokers.get(group.coordinator_id, ("?", 0))
    print_table(STATE_HEADERS, [(
        group.group_id, f"{host}:{port} ({group.coordinator_id})",
        group.assignment_strategy or "", group.state, len(group.members),
    )])


def _parse_datetime(text: str) -> int:
    try:
        when = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise CommandError(f"--to-datetime expects ISO-8601, got {text!r}", 2) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return int(when.timestamp() * 1000)


_DURATION = re.compile(r"([-+]?)P(?:([-+]?\d+)D)?(?:T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?"
                       r"(?:([-+]?\d+(?:[.,]\d{0,9})?)S)?)?", re.IGNORECASE)


def parse_duration_ms(text: str) -> int:
    """An ISO-8601 duration as java.time.Duration.parse reads it (PnDTnHnMn.nS, days the
    largest unit), in milliseconds."""
    match = _DURATION.fullmatch(text.strip())
    if match is None or not any(match.groups()[1:]) or text.strip().upper().endswith("T"):
        raise CommandError(f"--by-duration expects an ISO-8601 duration like PT1H30M or P1D, "
                           f"got {text!r}", 2)
    sign, days, hours, minutes, seconds = match.groups()
    total = (int(days or 0) * 86400 + int(hours or 0) * 3600 + int(minutes or 0) * 60
             + float((seconds or "0").replace(",", ".")))
    return int(total * 1000) * (-1 if sign == "-" else 1)


def _scope(admin: Admin, topics: list[str], all_topics: bool,
           committed: dict[TopicPartition, int]) -> list[TopicPartition]:
    if all_topics:
        return sorted(committed)
    out: list[TopicPartition] = []
    for spec in topics:
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


def _plan_from_file(path: Path, group_ids: list[str]) -> dict[str, dict[TopicPartition, int]]:
    """--from-file: TOPIC,PARTITION,OFFSET lines for the one group, or
    GROUP,TOPIC,PARTITION,OFFSET lines (as --export writes them)."""
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise CommandError(f"cannot read {path}: {exc.strerror}", 2) from None
    plan: dict[str, dict[TopicPartition, int]] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        fields = [field.strip() for field in line.split(",")]
        if len(fields) == 3 and len(group_ids) == 1:
            fields = [group_ids[0], *fields]
        try:
            group_id, topic, partition, offset = fields
            plan.setdefault(group_id, {})[TopicPartition(topic, int(partition))] = int(offset)
        except ValueError:
            form = "GROUP,TOPIC,PARTITION,OFFSET"
            raise CommandError(f"{path} line {number}: expected "
                               f"{form.removeprefix('GROUP,') if len(group_ids) == 1 else form}"
                               f", got {line!r}", 2) from None
    return plan


def _targets(admin: Admin, args: argparse.Namespace, group_id: str,
             committed: dict[TopicPartition, int],
             plan: dict[str, dict[TopicPartition, int]] | None) -> dict[TopicPartition, int]:
    """The new offsets of one group; those asked for by number (--to-offset, --shift-by,
    --from-file) clamped into each partition's [earliest, latest], as Kafka's tool does."""
    if plan is not None:
        requested = dict(plan.get(group_id, {}))
        partitions = sorted(requested)
    else:
        partitions = _scope(admin, args.topic, args.all_topics, committed)
        requested = {}
    earliest, latest = _offsets(admin, partitions)
    when = None
    if args.to_datetime is not None:
        when = _parse_datetime(args.to_datetime)
    elif args.by_duration is not None:
        when = int(time.time() * 1000) - parse_duration_ms(args.by_duration)
    if when is not None:
        found = admin.list_offsets(partitions, OffsetSpec.for_timestamp(when))
        requested = {tp: found.get(tp, -1) if found.get(tp, -1) >= 0 else latest[tp]
                     for tp in partitions}
    for tp in partitions:
        if args.to_earliest:
            requested[tp] = earliest[tp]
        elif args.to_latest:
            requested[tp] = latest[tp]
        elif args.to_current:
            requested[tp] = committed.get(tp, latest[tp])
        elif args.to_offset is not None:
            requested[tp] = args.to_offset
        elif args.shift_by is not None:
            if tp not in committed:
                raise CommandError(f"Cannot shift offset for partition {tp.topic}-"
                                   f"{tp.partition} since there is no current committed offset")
            requested[tp] = committed[tp] + args.shift_by
    if plan is None and args.to_offset is None and args.shift_by is None:
        return {tp: requested[tp] for tp in partitions}
    return {tp: min(max(requested[tp], earliest[tp]), latest[tp]) for tp in partitions}


def cmd_reset(args: argparse.Namespace) -> int:
    if args.from_file is None and not args.topic and not args.all_topics:
        raise CommandError("one of the arguments --topic --all-topics is required (unless "
                           "--from-file)", 2)
    results: dict[str, dict[TopicPartition, int]] = {}
    with open_admin(args) as admin:
        group_ids = _group_ids(admin, args)
        plan = None if args.from_file is None else _plan_from_file(args.from_file, group_ids)
        for group_id in group_ids:
            group, committed = _existing_or_new(admin, group_id)
            if group.state not in INACTIVE_STATES:
                raise CommandError(
                    f"assignments can only be reset if the group '{group_id}' is inactive, "
                    f"but the current state is {group.state}"
                )
            results[group_id] = _targets(admin, args, group_id, committed, plan)
    if args.execute:
        for group_id, targets in results.items():
            with Consumer({**admin_config(args), "group.id": group_id,
                           "enable.auto.commit": False}) as consumer:
                consumer.commit(targets)
    if args.export:
        for group_id, targets in results.items():
            for tp, offset in targets.items():
                prefix = f"{group_id}," if len(results) > 1 else ""
                print(f"{prefix}{tp.topic},{tp.partition},{offset}")
        return 0
    print_table(RESET_HEADERS, [(group_id, tp.topic, tp.partition, offset)
                                for group_id, targets in results.items()
                                for tp, offset in targets.items()])
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
        group_ids = _group_ids(admin, args)
        for group_id, error in admin.delete_consumer_groups(group_ids).items():
            code = ErrorCode.none if error is None else error.code
            if code == ErrorCode.non_empty_group:
                failed[group_id] = "the group is not empty"
            elif code == ErrorCode.group_id_not_found:
                failed[group_id] = "the group does not exist"
            elif error is not None:
                failed[group_id] = code.name if code is not None else str(error)
    deleted = [g for g in group_ids if g not in failed]
    if deleted:
        names = ", ".join(f"'{g}'" for g in deleted)
        print(f"Deletion of requested consumer groups ({names}) was successful.")
    for group_id, why in failed.items():
        print(f"oncelog: deletion of consumer group '{group_id}' failed: {why}",
              file=sys.stderr)
    return 1 if failed else 0


def cmd_delete_offsets(args: argparse.Namespace) -> int:
    """kafka-consumer-groups.sh --delete-offsets: OffsetDelete of the group's offsets on
    the topics (or partitions) given; a line per partition with its outcome."""
    group_id = _group_ids(None, args)
    if len(group_id) != 1:
        raise CommandError("--delete-offsets takes one group", 2)
    with open_admin(args) as admin:
        partitions = _scope(admin, args.topic, False, {})
        results = admin.delete_consumer_group_offsets(group_id[0], partitions)
    failed = {tp: error for tp, error in results.items() if error is not None}
    if not failed:
        print(f"Request succeed for deleting offsets with topic {', '.join(args.topic)} "
              f"group {group_id[0]}")
    print_table(("TOPIC", "PARTITION", "STATUS"), [
        (tp.topic, tp.partition, "Successful" if error is None else f"Error: {error}")
        for tp, error in sorted(results.items())
    ])
    return 1 if failed else 0
