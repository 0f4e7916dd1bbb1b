"""``oncelog topics``: create, delete, list and describe topics (a small kafka-topics.sh),
and elect leaders (kafka-leader-election.sh)."""

from __future__ import annotations

import argparse
import datetime

from oncelog.cli.common import (
    CommandError,
    connection_options,
    node_ids,
    open_admin,
    print_table,
    run_command,
)
from oncelog.cli.metrics import fetch_text, parse
from oncelog.client import (
    Admin,
    ConfigResource,
    ConfigResourceType,
    NewTopic,
    TopicPartition,
)
from oncelog.client.errors import KafkaClientError, TopicAlreadyExistsError
from oncelog.errors import ErrorCode


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    conn = connection_options()
    topics = sub.add_parser("topics", help="create, delete, list and describe topics")
    commands = topics.add_subparsers(dest="topics_command", required=True, metavar="COMMAND")

    p = commands.add_parser("create", parents=[conn], help="create a topic")
    p.add_argument("topic", help="name of the topic to create")
    p.add_argument("--partitions", type=int, default=-1,
                   help="partition count (default: the broker's num.partitions)")
    p.add_argument("--replication-factor", type=int, default=-1,
                   help="replicas per partition (default: the broker's "
                        "default.replication.factor)")
    p.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                   help="a topic config (repeatable), e.g. cleanup.policy=compact")
    p.add_argument("--if-not-exists", action="store_true",
                   help="succeed when the topic already exists")
    p.set_defaults(handler=cmd_create)

    p = commands.add_parser("delete", parents=[conn], help="delete topics")
    p.add_argument("topic", nargs="+", help="names of the topics to delete")
    p.set_defaults(handler=cmd_delete)

    p = commands.add_parser("list", parents=[conn], help="list topic names")
    p.add_argument("--internal", action="store_true", help="include internal topics")
    p.set_defaults(handler=cmd_list)

    p = commands.add_parser("describe", parents=[conn],
                            help="partitions, leaders and cleanup policy")
    p.add_argument("topic", nargs="*", help="topics (default: all but internal ones)")
    p.add_argument("--metrics-url", default=None, metavar="URL",
                   help="the broker's metrics endpoint (serve --metrics): adds the log "
                        "cleaner's state of each compacted partition (dirty ratio, last "
                        "clean), which the Kafka protocol does not carry")
    p.set_defaults(handler=cmd_describe)

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


def cmd_create(args: argparse.Namespace) -> int:
    topic = NewTopic(args.topic, args.partitions, args.replication_factor, _configs(args.config))
    with open_admin(args) as admin:
        error = admin.create_topics([topic], timeout_ms=args.timeout_ms).get(args.topic)
    if isinstance(error, TopicAlreadyExistsError) and args.if_not_exists:
        print(f"Topic {args.topic} already exists.")
        return 0
    if error is not None:
        raise CommandError(f"cannot create topic {args.topic}: {error}")
    print(f"Created topic {args.topic}.")
    return 0


def cmd_delete(args: argparse.Namespace) -> int:
    with open_admin(args) as admin:
        errors = admin.delete_topics(args.topic, timeout_ms=args.timeout_ms)
    failed = 0
    for name in args.topic:
        error = errors.get(name)
        if error is None:
            print(f"Deleted topic {name}.")
        else:
            failed += 1
            print(f"oncelog: cannot delete topic {name}: {error}")
    return 1 if failed else 0


def cmd_list(args: argparse.Namespace) -> int:
    with open_admin(args) as admin:
        names = admin.list_topics(internal=args.internal)
    for name in sorted(names):
        print(name)
    return 0


def cmd_describe(args: argparse.Namespace) -> int:
    with open_admin(args) as admin:
        try:
            if args.topic:
                described = admin.describe_topics(args.topic)
            else:
                described = {
                    name: d for name, d in admin.describe_topics(None).items() if not d.internal
                }
        except KafkaClientError as exc:
            if exc.code is ErrorCode.unknown_topic_or_partition:
                raise CommandError(f"{exc.message}") from None
            raise
        policies = _cleanup_policies(admin, sorted(described))
    header: tuple[str, ...] = ("Topic", "Partition", "Leader", "Replicas", "Isr", "Internal",
                               "CleanupPolicy")
    cleaner = None
    if args.metrics_url is not None:
        cleaner = _cleaner_state(fetch_text(args.metrics_url, args.timeout_ms))
        header += ("DirtyRatio", "LastClean")
    rows = []
    for name, d in sorted(described.items()):
        for index, leader in d.leaders.items():
            row: tuple[object, ...] = (
                name, index, leader, node_ids(d.replicas.get(index, ())),
                node_ids(d.isr.get(index, ())), "true" if d.internal else "false",
                policies.get(name, "-"),
            )
            if cleaner is not None:
                row += cleaner.get((name, index), ("-", "-"))
            rows.append(row)
    print_table(header, rows)
    return 0


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


def _cleanup_policies(admin: Admin, topics: list[str]) -> dict[str, str]:
    """Each topic's ``cleanup.policy`` (DescribeConfigs)."""
    if not topics:
        return {}
    resources = [ConfigResource(ConfigResourceType.TOPIC, name) for name in topics]
    described = admin.describe_configs(resources)
    out = {}
    for resource, entries in described.items():
        entry = entries.get("cleanup.policy")
        if entry is not None and entry.value is not None:
            out[resource.name] = entry.value
    return out


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
