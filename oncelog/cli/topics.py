"""``oncelog topics``: create, delete, list, describe and alter topics (kafka-topics.sh, its
flags and its action flags: ``topics --create --topic T`` is ``topics create T``), and elect
leaders (kafka-leader-election.sh).

Unlike kafka-topics.sh, ``list`` and ``describe`` leave internal topics out unless asked
(``list --internal``, a name, or a ``--topic`` pattern that matches them)."""

from __future__ import annotations

import argparse
import datetime
import re
import sys

from oncelog.cli.common import (
    CommandError,
    add_hints,
    connection_options,
    node_ids,
    open_admin,
    print_table,
    run_command,
)
from oncelog.cli.metrics import fetch_text, parse
from oncelog.client import (
    Admin,
    ConfigEntry,
    ConfigResource,
    ConfigResourceType,
    NewPartitions,
    NewTopic,
    TopicDescription,
    TopicPartition,
)
from oncelog.client.errors import KafkaClientError, TopicAlreadyExistsError
from oncelog.errors import ErrorCode

# kafka-topics.sh's action flags: `oncelog topics --create --topic X` is `topics create`.
KAFKA_ACTIONS = {"--create": "create", "--delete": "delete", "--list": "list",
                 "--describe": "describe", "--alter": "alter"}
ALTER_CONFIGS_HINT = ("topic configs are changed with `oncelog configs --alter --topic T "
                      "--add-config K=V` (or --delete-config K), as with kafka-configs.sh")


def _topic_option(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--topic", default=None, metavar="REGEX",
                   help=f"kafka-topics.sh's --topic: the topics to {what}, a Java-style "
                        "regular expression matching whole names (commas separate "
                        "alternatives), internal topics included unless --exclude-internal")


def _exclude_internal(p: argparse.ArgumentParser) -> None:
    p.add_argument("--exclude-internal", action="store_true",
                   help="leave internal topics (__consumer_offsets, __transaction_state) out "
                        "even when --topic matches them")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    conn = connection_options()
    topics = sub.add_parser(
        "topics", help="create, delete, list, describe and alter topics",
        description="Topics, as kafka-topics.sh: `oncelog topics create T` or Kafka's form "
        "`oncelog topics --create --topic T` (--list, --describe, --delete, --alter alike).",
    )
    commands = topics.add_subparsers(dest="topics_command", required=True, metavar="COMMAND")

    p = commands.add_parser("create", parents=[conn], help="create a topic")
    p.add_argument("name", nargs="?", metavar="TOPIC", help="name of the topic to create")
    p.add_argument("--topic", default=None, help="the same, as kafka-topics.sh takes it")
    p.add_argument("--partitions", type=int, default=-1,
                   help="partition count (default: the broker's num.partitions)")
    p.add_argument("--replication-factor", type=int, default=-1,
                   help="replicas per partition (default: the broker's "
                        "default.replication.factor)")
    _replica_assignment(p)
    p.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                   help="a topic config (repeatable), e.g. cleanup.policy=compact")
    p.add_argument("--if-not-exists", action="store_true",
                   help="succeed when the topic already exists")
    p.set_defaults(handler=cmd_create)

    p = commands.add_parser("delete", parents=[conn], help="delete topics")
    p.add_argument("names", nargs="*", metavar="TOPIC", help="names of the topics to delete")
    _topic_option(p, "delete")
    _exclude_internal(p)
    p.add_argument("--if-exists", action="store_true",
                   help="succeed when no topic matches --topic")
    p.set_defaults(handler=cmd_delete)

    p = commands.add_parser("list", parents=[conn], help="list topic names")
    p.add_argument("--internal", action="store_true", help="include internal topics")
    _topic_option(p, "list")
    _exclude_internal(p)
    p.set_defaults(handler=cmd_list)

    p = commands.add_parser("describe", parents=[conn],
                            help="partitions, leaders and cleanup policy")
    p.add_argument("names", nargs="*", metavar="TOPIC",
                   help="topics (default: all but internal ones)")
    _topic_option(p, "describe")
    _exclude_internal(p)
    p.add_argument("--if-exists", action="store_true",
                   help="succeed when no topic matches --topic")
    p.add_argument("--under-replicated-partitions", action="store_true",
                   help="only partitions whose ISR is smaller than their replicas")
    p.add_argument("--unavailable-partitions", action="store_true",
                   help="only partitions without a leader on a live broker")
    p.add_argument("--under-min-isr-partitions", action="store_true",
                   help="only partitions whose ISR is below the topic's min.insync.replicas "
                        "(or without a leader)")
    p.add_argument("--at-min-isr-partitions", action="store_true",
                   help="only partitions whose ISR is exactly min.insync.replicas")
    p.add_argument("--topics-with-overrides", action="store_true",
                   help="instead of partitions: the topics that have a config not at its "
                        "default, and those configs")
    p.add_argument("--partition-size-limit-per-response", type=int, default=None,
                   metavar="N", help="accepted for kafka-topics.sh; oncelog reads every "
                                     "partition in one request")
    p.add_argument("--metrics-url", default=None, metavar="URL",
                   help="the broker's metrics endpoint (serve --metrics): adds the log "
                        "cleaner's state of each compacted partition (dirty ratio, last "
                        "clean), which the Kafka protocol does not carry")
    p.set_defaults(handler=cmd_describe)

    p = commands.add_parser("alter", parents=[conn],
                            help="add partitions to topics (CreatePartitions)")
    p.add_argument("names", nargs="*", metavar="TOPIC", help="names of the topics to alter")
    _topic_option(p, "alter")
    _exclude_internal(p)
    p.add_argument("--partitions", type=int, default=None,
                   help="the new partition count, more than the topic has (required)")
    _replica_assignment(p)
    p.add_argument("--if-exists", action="store_true",
                   help="succeed when no topic matches --topic")
    add_hints(p, {"--config": ALTER_CONFIGS_HINT, "--delete-config": ALTER_CONFIGS_HINT})
    p.set_defaults(handler=cmd_alter)

    p = commands.add_parser("elect-leaders", parents=[conn],
                            help="elect preferred (or unclean) leaders, like "
                                 "kafka-leader-election.sh")
    p.add_argument("--election-type", required=True, type=str.lower,
                   choices=("preferred", "unclean"), help="the election to run")
    p.add_argument("--topic", help="the topic of the partition to elect (with --partition)")
    p.add_argument("--partition", type=int, help="the partition to elect (with --topic)")
    p.add_argument("--all-topic-partitions", action="store_true",
                   help="every partition (those needing no election are not listed)")
    p.set_defaults(handler=cmd_elect_leaders)


def _replica_assignment(p: argparse.ArgumentParser) -> None:
    p.add_argument("--replica-assignment", type=replica_assignment, default=None,
                   metavar="B:B,B:B,...",
                   help="the brokers of each partition, partitions separated by commas and "
                        "their replicas by colons, the first the preferred leader (instead "
                        "of --partitions / --replication-factor on create)")


def replica_assignment(text: str) -> dict[int, list[int]]:
    """argparse type: kafka-topics.sh's ``--replica-assignment`` ("1:2,2:3"): partition
    index -> broker ids."""
    out: dict[int, list[int]] = {}
    for index, part in enumerate(text.split(",")):
        try:
            brokers = [int(b.strip()) for b in part.split(":")]
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected broker ids like 1:2,2:3, got {text!r}") from None
        if len(set(brokers)) != len(brokers):
            raise argparse.ArgumentTypeError(
                f"Partition replica lists may not contain duplicate entries: {part}")
        out[index] = brokers
    return out


def run(args: argparse.Namespace) -> int:
    return run_command(args, args.handler, f"topics {args.topics_command}")


def _configs(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise CommandError(f"--config expects KEY=VALUE, got {pair!r}", 2)
        out[key.strip()] = value.strip()
    return out


def topic_pattern(text: str) -> re.Pattern[str]:
    """kafka-topics.sh's ``--topic`` (Kafka's TopicFilter.IncludeList): spaces and
    surrounding quotes dropped, commas as alternatives, the whole name must match."""
    regex = re.sub(r"[\"']+$", "", re.sub(r"^[\"']+", "", text.strip().replace(",", "|")
                                           .replace(" ", "")))
    try:
        return re.compile(regex)
    except re.error:
        raise CommandError(f"{regex} is an invalid regex.", 2) from None


def _selected(admin: Admin, args: argparse.Namespace) -> list[str]:
    """The topics named (positional names) or matched (--topic), as kafka-topics.sh picks
    them; CommandError when --topic matches none, unless --if-exists."""
    if args.names and args.topic is not None:
        raise CommandError("give topic names or --topic, not both", 2)
    if args.topic is None:
        return list(args.names)
    pattern = topic_pattern(args.topic)
    names = admin.list_topics(internal=not args.exclude_internal)
    found = sorted(name for name in names if pattern.fullmatch(name))
    if not found and not getattr(args, "if_exists", False):
        raise CommandError(f"Topic '{args.topic}' does not exist as expected")
    return found


def cmd_create(args: argparse.Namespace) -> int:
    if args.name is not None and args.topic is not None and args.name != args.topic:
        raise CommandError("give the topic once: TOPIC or --topic", 2)
    name = args.name if args.name is not None else args.topic
    if name is None:
        raise CommandError("the topic to create is required: TOPIC or --topic", 2)
    if args.replica_assignment is not None and (args.partitions != -1
                                                or args.replication_factor != -1):
        raise CommandError("--replica-assignment replaces --partitions and "
                           "--replication-factor", 2)
    topic = NewTopic(name, args.partitions, args.replication_factor, _configs(args.config),
                     replica_assignment=args.replica_assignment or {})
    with open_admin(args) as admin:
        error = admin.create_topics([topic], timeout_ms=args.timeout_ms).get(name)
    if isinstance(error, TopicAlreadyExistsError) and args.if_not_exists:
        print(f"Topic {name} already exists.")
        return 0
    if error is not None:
        raise CommandError(f"cannot create topic {name}: {error}")
    print(f"Created topic {name}.")
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    if not args.names and args.topic is None:
        raise CommandError("name the topics to delete: TOPIC... or --topic", 2)
    with open_admin(args) as admin:
        names = _selected(admin, args)
        errors = admin.delete_topics(names, timeout_ms=args.timeout_ms) if names else {}
    failed = 0
    for name in names:
        error = errors.get(name)
        if error is None:
            print(f"Deleted topic {name}.")
        else:
            failed += 1
            print(f"oncelog: cannot delete topic {name}: {error}")
    return 1 if failed else 0


def cmd_list(args: argparse.Namespace) -> int:
    with open_admin(args) as admin:
        if args.topic is not None:
            pattern = topic_pattern(args.topic)
            names = [name for name in admin.list_topics(internal=not args.exclude_internal)
                     if pattern.fullmatch(name)]
        else:
            names = list(admin.list_topics(internal=args.internal and not args.exclude_internal))
    for name in sorted(names):
        print(name)
    return 0


def cmd_describe(args: argparse.Namespace) -> int:
    with open_admin(args) as admin:
        wanted = _selected(admin, args)
        try:
            if wanted:
                described = admin.describe_topics(wanted)
            elif args.topic is not None:
                described = {}
            else:
                described = {
                    name: d for name, d in admin.describe_topics(None).items() if not d.internal
                }
        except KafkaClientError as exc:
            if exc.code is ErrorCode.unknown_topic_or_partition:
                raise CommandError(f"{exc.message}") from None
            raise
        configs = _topic_configs(admin, sorted(described))
        live = set(admin.describe_cluster().brokers)
    if args.topics_with_overrides:
        _print_overrides(described, configs)
        return 0
    header: tuple[str, ...] = ("Topic", "Partition", "Leader", "Replicas", "Isr", "Internal",
                               "CleanupPolicy")
    cleaner = None
    if args.metrics_url is not None:
        cleaner = _cleaner_state(fetch_text(args.metrics_url, args.timeout_ms))
        header += ("DirtyRatio", "LastClean")
    rows = []
    for name, d in sorted(described.items()):
        policy = _value(configs.get(name, {}), "cleanup.policy") or "-"
        min_isr = int(_value(configs.get(name, {}), "min.insync.replicas") or 1)
        for index, leader in sorted(d.leaders.items()):
            replicas, isr = d.replicas.get(index, ()), d.isr.get(index, ())
            if not _wanted_partition(args, leader, replicas, isr, min_isr, live):
                continue
            row: tuple[object, ...] = (
                name, index, leader, node_ids(replicas), node_ids(isr),
                "true" if d.internal else "false", policy,
            )
            if cleaner is not None:
                row += cleaner.get((name, index), ("-", "-"))
            rows.append(row)
    print_table(header, rows)
    return 0


def _wanted_partition(args: argparse.Namespace, leader: int, replicas: tuple[int, ...],
                      isr: tuple[int, ...], min_isr: int, live: set[int]) -> bool:
    """kafka-topics.sh --describe's partition filters: with none given every partition;
    with some, those any of them selects (TopicCommand.DescribeOptions)."""
    filters = (
        (args.under_replicated_partitions, len(isr) < len(replicas)),
        (args.unavailable_partitions, leader < 0 or leader not in live),
        (args.under_min_isr_partitions, leader < 0 or len(isr) < min_isr),
        (args.at_min_isr_partitions, len(isr) == min_isr),
    )
    if not any(given for given, _ in filters):
        return True
    return any(given and selected for given, selected in filters)


def _print_overrides(described: dict[str, TopicDescription],
                     configs: dict[str, dict[str, ConfigEntry]]) -> None:
    """--topics-with-overrides: one line per topic with a config not at its default."""
    rows = []
    for name, d in sorted(described.items()):
        overrides = [f"{k}={e.value}" for k, e in sorted(configs.get(name, {}).items())
                     if not e.is_default]
        if overrides:
            factor = len(d.replicas.get(0, ())) if d.replicas else 0
            rows.append((name, d.num_partitions, factor, ",".join(overrides)))
    print_table(("Topic", "PartitionCount", "ReplicationFactor", "Configs"), rows)


def cmd_alter(args: argparse.Namespace) -> int:
    """kafka-topics.sh --alter: grow each topic to --partitions (CreatePartitions), the new
    partitions placed by the tail of --replica-assignment if given."""
    if not args.names and args.topic is None:
        raise CommandError("name the topics to alter: TOPIC... or --topic", 2)
    if args.partitions is None:
        raise CommandError("--partitions is required: the new partition count", 2)
    with open_admin(args) as admin:
        names = _selected(admin, args)
        if not names:
            return 0
        counts = {name: d.num_partitions for name, d in admin.describe_topics(names).items()}
        wanted = {}
        for name in names:
            placement = None
            if args.replica_assignment is not None:
                placement = [brokers for index, brokers in sorted(args.replica_assignment.items())
                             if index >= counts[name]]
            wanted[name] = NewPartitions(args.partitions, placement)
        errors = admin.create_partitions(wanted, timeout_ms=args.timeout_ms)
    failed = {name: error for name, error in errors.items() if error is not None}
    for name in names:
        if name not in failed:
            print(f"Topic {name} now has {args.partitions} partitions.")
    for name, error in sorted(failed.items()):
        print(f"oncelog: cannot alter topic {name}: {error}", file=sys.stderr)
    return 1 if failed else 0


def cmd_elect_leaders(args: argparse.Namespace) -> int:
    """Kafka's LeaderElectionCommand: either --topic and --partition, or
    --all-topic-partitions; exit 1 when an election failed."""
    single = args.topic is not None and args.partition is not None
    if single == args.all_topic_partitions or (not single and (
            args.topic is not None or args.partition is not None)):
        raise CommandError("give either --topic and --partition, or --all-topic-partitions", 2)
    wanted = [TopicPartition(args.topic, args.partition)] if single else None
    kind = args.election_type.upper()
    with open_admin(args) as admin:
        results = admin.elect_leaders(wanted, election_type=args.election_type,
                                      timeout_ms=args.timeout_ms)
    done = sorted(f"{tp.topic}-{tp.partition}" for tp, e in results.items() if e is None)
    not_needed = sorted(f"{tp.topic}-{tp.partition}" for tp, e in results.items()
                        if e is not None and e.code is ErrorCode.election_not_needed)
    failed = sorted((f"{tp.topic}-{tp.partition}", e) for tp, e in results.items()
                    if e is not None and e.code is not ErrorCode.election_not_needed)
    if done:
        print(f"Successfully completed leader election ({kind}) for partitions "
              f"{', '.join(done)}")
    if not_needed:
        print(f"Valid replica already elected for partitions {', '.join(not_needed)}")
    for name, error in failed:
        print(f"Error completing leader election ({kind}) for partition: {name}: {error}")
    return 1 if failed else 0


def _topic_configs(admin: Admin, topics: list[str]) -> dict[str, dict[str, ConfigEntry]]:
    """Each topic's configs (DescribeConfigs)."""
    if not topics:
        return {}
    resources = [ConfigResource(ConfigResourceType.TOPIC, name) for name in topics]
    return {resource.name: dict(entries)
            for resource, entries in admin.describe_configs(resources).items()}


def _value(entries: dict[str, ConfigEntry], name: str) -> str | None:
    entry = entries.get(name)
    return None if entry is None else entry.value


def _cleaner_state(text: str) -> dict[tuple[str, int], tuple[str, str]]:
    """(topic, partition) -> (dirty ratio, last clean time) from the broker's
    ``oncelog_partition_cleaner_*`` metrics; only compacted partitions have them."""
    ratios: dict[tuple[str, int], str] = {}
    last: dict[tuple[str, int], str] = {}
    for m in parse(text):
        if "topic" not in m.labels or "partition" not in m.labels:
            continue
        key = (m.labels["topic"], int(m.labels["partition"]))
        if m.name == "oncelog_partition_cleaner_dirty_ratio":
            ratios[key] = f"{float(m.value):.2f}"
        elif m.name == "oncelog_partition_cleaner_last_clean_timestamp_ms":
            ms = int(float(m.value))
            last[key] = "never" if ms < 0 else datetime.datetime.fromtimestamp(
                ms / 1000, datetime.UTC).isoformat(timespec="seconds")
    return {key: (ratio, last.get(key, "never")) for key, ratio in ratios.items()}
