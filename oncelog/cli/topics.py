"""``oncelog topics``: create, delete, list and describe topics (a small kafka-topics.sh)."""

from __future__ import annotations

import argparse

from oncelog.cli.common import (
    CommandError,
    connection_options,
    node_ids,
    open_admin,
    print_table,
    run_command,
)
from oncelog.client import NewTopic
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

    p = commands.add_parser("describe", parents=[conn], help="partitions and leaders")
    p.add_argument("topic", nargs="*", help="topics (default: all but internal ones)")
    p.set_defaults(handler=cmd_describe)


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
    rows = [
        (name, index, leader, node_ids(d.replicas.get(index, ())), node_ids(d.isr.get(index, ())),
         "true" if d.internal else "false")
        for name, d in sorted(described.items())
        for index, leader in d.leaders.items()
    ]
    print_table(("Topic", "Partition", "Leader", "Replicas", "Isr", "Internal"), rows)
    return 0
