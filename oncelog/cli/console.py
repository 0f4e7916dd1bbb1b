"""``oncelog produce`` and ``oncelog consume``: Kafka's console producer and consumer.

Same options as kafka-console-producer.sh / kafka-console-consumer.sh where they make sense
(``--property parse.key=true``, ``key.separator``, ``parse.headers``, ``print.key``, ...),
plus ``--format json`` (one object per line: key, value, headers, partition, and on output
offset and timestamp) and shorthands (``--header K=V``, ``--print-key``, ...).

- ``produce`` reads lines from stdin (or ``--file``); with ``--transactional-id`` it sends
  them in transactions of ``--commit-every`` records, the last one committed at end of input
  (0: the whole input is one transaction). A failed send exits 1, nothing half-committed.
- ``consume`` reads read_committed unless told otherwise, from the latest offset (or
  ``--from-beginning``, ``--offset``, ``--from-timestamp``), and stops after
  ``--max-messages`` or when nothing arrives for ``--timeout-ms``. Without ``--group`` it
  assigns itself every partition (or ``--partition``) and commits nothing.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

from oncelog.cli.common import (
    CommandError,
    add_bootstrap_option,
    add_hints,
    admin_config,
    command_configs,
    open_admin,
    run_command,
)
from oncelog.client import Admin, Consumer, Message, Producer, TopicPartition
from oncelog.client.errors import KafkaClientError
from oncelog.config import parse_properties

FORMATS = ("text", "json")
COMPRESSIONS = ("none", "gzip", "snappy", "lz4", "zstd")
PRODUCER_PROPERTIES = {
    "parse.key": "false", "key.separator": "\t", "parse.headers": "false",
    "headers.delimiter": "\t", "headers.separator": ",", "headers.key.separator": ":",
    "null.marker": "", "ignore.error": "false",
}
# kafka-console-producer.sh's producer flags, each the producer config it sets.
PRODUCER_FLAGS = {
    "--batch-size": ("batch.size", "bytes of a partition's batch"),
    "--max-partition-memory-bytes": ("batch.size", "the same (deprecated name)"),
    "--max-memory-bytes": ("buffer.memory", "bytes of records waiting to be sent"),
    "--max-block-ms": ("max.block.ms", "how long a send may block"),
    "--message-send-max-retries": ("retries", "retries of a failed send"),
    "--metadata-expiry-ms": ("metadata.max.age.ms", "refresh metadata this often"),
    "--request-timeout-ms": ("request.timeout.ms", "wait this long for a produce answer"),
    "--retry-backoff-ms": ("retry.backoff.ms", "wait this long before a retry"),
    "--socket-buffer-size": ("send.buffer.bytes", "the socket's send buffer"),
    "--timeout": ("linger.ms", "wait this long to fill a batch"),
}
JAVA_CLASS_HINT = ("oncelog reads and prints text or JSON itself: --format json, and "
                   "--property (--reader-property / --formatter-property) print.* or parse.*")
CONSUMER_PROPERTIES = {
    "print.key": "false", "print.value": "true", "print.headers": "false",
    "print.offset": "false", "print.partition": "false", "print.timestamp": "false",
    "key.separator": "\t", "line.separator": "\n", "headers.separator": ",",
    "headers.key.separator": ":", "null.literal": "null",
}


def _property(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value.encode().decode("unicode_escape")


def _properties(pairs: Sequence[tuple[str, str]], known: dict[str, str]) -> dict[str, str]:
    out = dict(known)
    for key, value in pairs:
        if key not in known:
            raise CommandError(f"unknown --property {key}; known: {', '.join(known)}", 2)
        out[key] = value
    return out


def _true(text: str) -> bool:
    return text.strip().lower() == "true"


def _format_and_properties(p: argparse.ArgumentParser, direction: str, whose: str,
                           known: dict[str, str], kafka_name: str) -> None:
    p.add_argument("--format", choices=FORMATS, default="text", help=f"{direction} format")
    p.add_argument("--property", f"--{kafka_name}-property", dest="property", type=_property,
                   action="append", default=[], metavar="KEY=VALUE",
                   help=f"{whose} property, repeatable: "
                        + ", ".join(f"{k} (default {v!r})" for k, v in known.items()))
    p.add_argument(f"--{kafka_name}-config", dest="property_file", type=Path, default=None,
                   metavar="FILE", help=f"a properties file of {whose} properties "
                                        "(--property overrides it)")


def _client_options(p: argparse.ArgumentParser, role: str) -> None:
    """kafka-console-{role}.sh's client configs: --command-property K=V (and its deprecated
    --{role}-property), --{role}.config FILE as --command-config."""
    p.add_argument("--command-property", f"--{role}-property", dest="client_property",
                   type=_property, action="append", default=[], metavar="KEY=VALUE",
                   help=f"a {role} config, repeatable (over --command-config)")
    p.add_argument(f"--{role}.config", dest="command_config", type=Path,
                   default=argparse.SUPPRESS, metavar="FILE",
                   help="the same as --command-config (kafka-console tools' older name)")


def _client_configs(args: argparse.Namespace) -> dict[str, object]:
    """The client configs of --command-config then --command-property."""
    return {**command_configs(args), **dict(args.client_property)}


def _all_properties(args: argparse.Namespace, known: dict[str, str]) -> dict[str, str]:
    """The reader's / formatter's properties: the file's, then --property's."""
    pairs: list[tuple[str, str]] = []
    if args.property_file is not None:
        try:
            pairs += parse_properties(args.property_file.read_text()).items()
        except OSError as exc:
            raise CommandError(f"cannot read {args.property_file}: {exc.strerror}",
                               2) from None
    return _properties(pairs + list(args.property), known)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "produce", help="write lines from stdin to a topic (console producer)",
        description="Write one record per input line to a topic. Text lines are values, or "
        "KEY<key.separator>VALUE with --property parse.key=true; --format json reads "
        '{"key": ..., "value": ..., "headers": {...}, "partition": N} per line.',
    )
    add_bootstrap_option(p)
    p.add_argument("--topic", required=True, help="topic to write to")
    p.add_argument("--file", type=Path, default=None,
                   help="read this file instead of stdin (default: stdin)")
    _format_and_properties(p, "input", "kafka-console-producer.sh reader",
                           PRODUCER_PROPERTIES, "reader")
    _client_options(p, "producer")
    p.add_argument("--header", action="append", default=[], metavar="KEY=VALUE",
                   help="a header added to every record, repeatable (default: none)")
    p.add_argument("--partition", type=int, default=None,
                   help="write every record to this partition (default: by key, or spread)")
    p.add_argument("--acks", "--request-required-acks", choices=("all", "-1", "0", "1"),
                   default=None, help="acknowledgements to wait for (default all)")
    p.add_argument("--compression-type", choices=COMPRESSIONS, default="none",
                   help="compression of the batches")
    p.add_argument("--compression-codec", dest="compression_type", nargs="?", const="gzip",
                   choices=COMPRESSIONS, default=argparse.SUPPRESS,
                   help="the same, as kafka-console-producer.sh takes it (alone: gzip)")
    p.add_argument("--sync", action="store_true",
                   help="send one record at a time, each acknowledged before the next")
    for flag, (config, what) in PRODUCER_FLAGS.items():
        p.add_argument(flag, dest=f"config:{config}", type=int, default=argparse.SUPPRESS,
                       metavar="N", help=f"{what}: the producer's {config}")
    add_hints(p, {"--line-reader": JAVA_CLASS_HINT})
    p.add_argument("--transactional-id", default=None, metavar="ID",
                   help="send in transactions with this transactional id (default: none, "
                        "idempotent only)")
    p.add_argument("--commit-every", type=int, default=0, metavar="N",
                   help="with --transactional-id, commit after every N records and at end of "
                        "input (default 0: the whole input is one transaction)")
    p.add_argument("--timeout-ms", type=int, default=30000, metavar="MS",
                   help="give up on a send or a commit after this long")
    p.set_defaults(handler=cmd_produce, command_name="produce")

    c = sub.add_parser(
        "consume", help="print a topic's records (console consumer)",
        description="Print records, one per line: the value, with the fields --print-* (or "
        "--property print.*=true) ask for before it, tab-separated, or one JSON object per "
        "line. Reads read_committed by default: records of open or aborted transactions are "
        "not shown. 'Processed a total of N messages' goes to stderr at the end.",
    )
    add_bootstrap_option(c)
    c.add_argument("--topic", default=None, help="topic to read")
    c.add_argument("--include", default=None, metavar="REGEX",
                   help="instead of --topic: every topic (not internal) this regular "
                        "expression matches whole, as found at start")
    c.add_argument("--group", default=None,
                   help="consume as this consumer group, committing its offsets (default: no "
                        "group, all partitions assigned, nothing committed)")
    c.add_argument("--partition", type=int, default=None,
                   help="read only this partition (default: all)")
    start = c.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true",
                       help="start at the earliest offset (default: the latest, or the "
                            "group's committed offset)")
    start.add_argument("--offset", default=None,
                       help="start at this offset (needs --partition), or earliest/latest")
    start.add_argument("--from-timestamp", default=None, metavar="MS|ISO",
                       help="start at the first record at or after this time: epoch ms or an "
                            "ISO-8601 date-time (UTC unless it says otherwise)")
    c.add_argument("--max-messages", type=int, default=None, metavar="N",
                   help="stop after N records (default: no limit)")
    c.add_argument("--timeout-ms", type=int, default=None, metavar="MS",
                   help="stop when no record arrived for this long (default: wait forever)")
    c.add_argument("--isolation-level", choices=("read_committed", "read_uncommitted"),
                   default="read_committed",
                   help="read_uncommitted also shows open and aborted transactions' records")
    _format_and_properties(c, "output", "kafka-console-consumer.sh formatter",
                           CONSUMER_PROPERTIES, "formatter")
    _client_options(c, "consumer")
    c.add_argument("--skip-message-on-error", action="store_true",
                   help="accepted for kafka-console-consumer.sh: oncelog prints every "
                        "record (bytes that are not UTF-8 as replacement characters)")
    add_hints(c, {flag: JAVA_CLASS_HINT for flag in (
        "--formatter", "--key-deserializer", "--value-deserializer")})
    for field in ("key", "headers", "offset", "partition", "timestamp"):
        c.add_argument(f"--print-{field}", action="store_true",
                       help=f"print each record's {field} (as --property print.{field}=true)")
    c.set_defaults(handler=cmd_consume, command_name="consume")


def run(args: argparse.Namespace) -> int:
    return run_command(args, args.handler, args.command_name)


# ------------------------------------------------------------------------------ produce

Record = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int | None]


def _text_records(lines: Iterator[str], props: dict[str, str],
                  headers: list[tuple[str, bytes | None]]) -> Iterator[Record]:
    parse_key, parse_headers = _true(props["parse.key"]), _true(props["parse.headers"])
    null, ignore_error = props["null.marker"], _true(props["ignore.error"])

    def field(text: str) -> bytes | None:
        return None if null and text == null else text.encode()

    for number, line in enumerate(lines, start=1):
        line = line.rstrip("\r\n")
        record_headers = list(headers)
        # ignore.error: a missing delimiter or separator leaves the line to the value
        # (and a header without a key separator has no value), as Kafka's LineMessageReader.
        if parse_headers:
            head, sep, rest = line.partition(props["headers.delimiter"])
            if sep:
                line = rest
                for item in filter(None, head.split(props["headers.separator"])):
                    name, has_value, value = item.partition(props["headers.key.separator"])
                    if not has_value and not ignore_error:
                        raise CommandError(f"line {number}: no header key separator "
                                           f"{props['headers.key.separator']!r} in {item!r}")
                    record_headers.append((name, field(value) if has_value else None))
            elif not ignore_error:
                raise CommandError(f"line {number}: no headers delimiter "
                                   f"{props['headers.delimiter']!r}")
        key = None
        if parse_key:
            key_text, sep, rest = line.partition(props["key.separator"])
            if sep:
                key, line = field(key_text), rest
            elif not ignore_error:
                raise CommandError(f"line {number}: no key separator "
                                   f"{props['key.separator']!r} (parse.key=true)")
        yield key, field(line), record_headers, None


def _json_records(lines: Iterator[str],
                  headers: list[tuple[str, bytes | None]]) -> Iterator[Record]:
    def encoded(value: object, what: str, number: int) -> bytes | None:
        if value is None:
            return None
        if isinstance(value, str):
            return value.encode()
        return json.dumps(value).encode()

    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise CommandError(f"line {number}: not JSON: {exc}") from None
        if not isinstance(obj, dict) or "value" not in obj:
            raise CommandError(f'line {number}: expected an object with "value"')
        record_headers = list(headers)
        raw_headers = obj.get("headers") or {}
        pairs = raw_headers.items() if isinstance(raw_headers, dict) else raw_headers
        for name, value in pairs:
            record_headers.append((str(name), encoded(value, "header", number)))
        partition = obj.get("partition")
        if partition is not None and not isinstance(partition, int):
            raise CommandError(f"line {number}: partition must be an integer")
        yield (encoded(obj.get("key"), "key", number), encoded(obj["value"], "value", number),
               record_headers, partition)


def _lines(args: argparse.Namespace) -> Iterator[str]:
    if args.file is None:
        yield from sys.stdin
        return
    try:
        with open(args.file, encoding="utf-8") as handle:
            yield from handle
    except OSError as exc:
        raise CommandError(f"cannot read {args.file}: {exc}") from None


def cmd_produce(args: argparse.Namespace) -> int:
    props = _all_properties(args, PRODUCER_PROPERTIES)
    headers: list[tuple[str, bytes | None]] = []
    for item in args.header:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise CommandError(f"--header expects KEY=VALUE, got {item!r}", 2)
        headers.append((name, value.encode()))
    if args.commit_every < 0:
        raise CommandError("--commit-every must be 0 or more", 2)
    if args.commit_every and args.transactional_id is None:
        raise CommandError("--commit-every needs --transactional-id", 2)
    timeout = max(1, args.timeout_ms)
    producer_config: dict[str, Any] = {
        "bootstrap.servers": args.bootstrap_server, "client.id": "oncelog-console-producer",
        "acks": "all", "compression.type": args.compression_type,
        "delivery.timeout.ms": max(timeout, 1000), "request.timeout.ms": timeout,
        "max.block.ms": timeout, "allow.auto.create.topics": True,
        **_client_configs(args),
    }
    if args.acks is not None:
        producer_config["acks"] = args.acks
    # kafka-console-producer.sh's flags override the configs, as there.
    producer_config.update({key.split(":", 1)[1]: value for key, value in vars(args).items()
                            if key.startswith("config:")})
    if str(producer_config["acks"]) in ("0", "1"):
        producer_config["enable.idempotence"] = False
    if args.transactional_id is not None:
        producer_config["transactional.id"] = args.transactional_id
    records = (_json_records(_lines(args), headers) if args.format == "json"
               else _text_records(_lines(args), props, headers))
    with open_admin(argparse.Namespace(bootstrap_server=args.bootstrap_server,
                                       timeout_ms=args.timeout_ms,
                                       command_config=args.command_config)) as admin:
        if args.topic not in admin.list_topics(internal=True):
            raise CommandError(f"topic {args.topic!r} does not exist")
    producer = Producer(producer_config)
    try:
        sent = _produce(producer, args, records, timeout / 1000)
    finally:
        producer.close(timeout / 1000)
    if args.transactional_id is not None:
        print(f"oncelog: produced {sent} records in committed transactions", file=sys.stderr)
    return 0


def _produce(producer: Producer, args: argparse.Namespace, records: Iterator[Record],
             timeout_s: float) -> int:
    transactional = args.transactional_id is not None
    if transactional:
        producer.init_transactions()
    futures = []
    in_txn = sent = 0
    try:
        for key, value, headers, partition in records:
            if transactional and in_txn == 0:
                producer.begin_transaction()
            target = args.partition if partition is None else partition
            futures.append(producer.send(args.topic, value, key=key, partition=target,
                                         headers=headers))
            if args.sync:
                futures[-1].result(timeout_s)
            in_txn += 1
            sent += 1
            if transactional and in_txn == args.commit_every:
                producer.commit_transaction(timeout_s)
                in_txn = 0
        if transactional and in_txn:
            producer.commit_transaction(timeout_s)
            in_txn = 0
        producer.flush(timeout_s)
        for future in futures:
            future.result(timeout_s)  # raises the first failed send's error
    except BaseException:
        if transactional and in_txn:
            try:
                producer.abort_transaction(timeout_s)
            except KafkaClientError:
                pass  # the original error is the one to report
        raise
    return sent


# ------------------------------------------------------------------------------ consume

def _parse_time(text: str) -> int:
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        when = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise CommandError(f"--from-timestamp expects epoch ms or ISO-8601, got {text!r}",
                           2) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.UTC)
    return int(when.timestamp() * 1000)


def _start_positions(consumer: Consumer, args: argparse.Namespace,
                     partitions: list[TopicPartition]) -> None:
    if args.from_beginning:
        consumer.seek_to_beginning(partitions)
    elif args.offset is not None:
        if args.offset == "earliest":
            consumer.seek_to_beginning(partitions)
        elif args.offset == "latest":
            consumer.seek_to_end(partitions)
        else:  # a number, with --partition (_check_consume_args)
            consumer.seek(partitions[0], int(args.offset))
    elif args.from_timestamp is not None:
        when = _parse_time(args.from_timestamp)
        found = consumer._run(consumer._core.list_offsets(partitions, when))
        ends = consumer.end_offsets(partitions)
        for tp in partitions:
            offset = found.get(tp, -1)
            consumer.seek(tp, offset if offset >= 0 else ends[tp])
    else:
        consumer.seek_to_end(partitions)


def _text(data: bytes | None, null: str) -> str:
    return null if data is None else data.decode("utf-8", errors="replace")


class Formatter:
    def __init__(self, args: argparse.Namespace) -> None:
        props = _all_properties(args, CONSUMER_PROPERTIES)
        self.json = args.format == "json"
        self.props = props
        self.show = {field: getattr(args, f"print_{field}") or _true(props[f"print.{field}"])
                     for field in ("key", "headers", "offset", "partition", "timestamp")}
        self.show_value = _true(props["print.value"])

    def write(self, m: Message, out: TextIO) -> None:
        if self.json:
            print(json.dumps({
                "topic": m.topic, "partition": m.partition, "offset": m.offset,
                "timestamp": m.timestamp, "key": _json_text(m.key), "value": _json_text(m.value),
                "headers": {name: _json_text(value) for name, value in m.headers},
            }), file=out)
            return
        null, sep = self.props["null.literal"], self.props["key.separator"]
        fields = []
        if self.show["timestamp"]:
            kind = "LogAppendTime" if m.timestamp_type == 1 else "CreateTime"
            fields.append(f"{kind}:{m.timestamp}")
        if self.show["partition"]:
            fields.append(f"Partition:{m.partition}")
        if self.show["offset"]:
            fields.append(f"Offset:{m.offset}")
        if self.show["headers"]:
            fields.append(self.props["headers.separator"].join(
                f"{name}{self.props['headers.key.separator']}{_text(value, null)}"
                for name, value in m.headers) or "NO_HEADERS")
        if self.show["key"]:
            fields.append(_text(m.key, null))
        if self.show_value:
            fields.append(_text(m.value, null))
        out.write(sep.join(fields) + self.props["line.separator"])


def _json_text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", errors="replace")


def _check_consume_args(args: argparse.Namespace) -> None:
    """kafka-console-consumer.sh's argument checks (and oncelog's own), made before anything
    is printed or any broker is asked."""
    if (args.topic is None) == (args.include is None):
        raise CommandError("Exactly one of --include/--topic is required.", 2)
    if args.partition is not None and args.topic is None:
        raise CommandError("The topic is required when partition is specified.", 2)
    if args.offset is not None:
        if args.group is not None:
            raise CommandError("--offset cannot be used with --group", 2)
        if args.offset not in ("earliest", "latest"):
            if not args.offset.isdigit():
                raise CommandError(f"The provided offset value '{args.offset}' is incorrect. "
                                   "Valid values are 'earliest', 'latest', or a non-negative "
                                   "long.", 2)
            if args.partition is None:
                raise CommandError("The partition is required when offset is specified.", 2)
    if args.from_timestamp is not None:
        _parse_time(args.from_timestamp)
        if args.group is not None and args.partition is None:
            raise CommandError("--from-timestamp with --group needs --partition", 2)


def cmd_consume(args: argparse.Namespace) -> int:
    extra = _client_configs(args)
    group = args.group if args.group is not None else extra.get("group.id")
    if args.group is not None and extra.get("group.id") not in (None, args.group):
        raise CommandError("The group ids provided in different places (directly using "
                           "'--group', via '--consumer-property', or via '--consumer.config') "
                           f"do not match. Detected group ids: '{args.group}', "
                           f"'{extra['group.id']}'", 2)
    args.group = None if group is None else str(group)
    _check_consume_args(args)
    formatter = Formatter(args)
    conn = argparse.Namespace(bootstrap_server=args.bootstrap_server, timeout_ms=30000,
                              command_config=args.command_config)
    config: dict[str, Any] = {
        **admin_config(conn), "client.id": "oncelog-console-consumer",
        "isolation.level": args.isolation_level,
        "auto.offset.reset": "earliest" if args.from_beginning else "latest",
        **extra,
    }
    with open_admin(conn) as admin:
        counts = _topics_to_read(admin, args)
    if args.partition is not None and not 0 <= args.partition < counts[args.topic]:
        raise CommandError(f"topic {args.topic!r} has no partition {args.partition}")
    if args.group is not None:
        # Commit what was printed, at the end: not records polled but left unprinted.
        config.update({"group.id": args.group, "enable.auto.commit": False})
    consumer = Consumer(config)
    processed = 0
    printed: dict[TopicPartition, int] = {}
    try:
        if args.group is not None and args.partition is None:
            consumer.subscribe(sorted(counts))
        else:
            if args.partition is not None:
                partitions = [TopicPartition(args.topic, args.partition)]
            else:
                partitions = [TopicPartition(topic, p) for topic, count in sorted(counts.items())
                              for p in range(count)]
            consumer.assign(partitions)
            if args.group is None or args.from_beginning or args.from_timestamp:
                _start_positions(consumer, args, partitions)
        processed = _consume_loop(consumer, args, formatter, printed)
    finally:
        try:
            if args.group is not None and printed:
                consumer.commit(printed)
        except KafkaClientError as exc:
            print(f"oncelog: could not commit the group's offsets: {exc}", file=sys.stderr)
        consumer.close()
        print(f"Processed a total of {processed} messages", file=sys.stderr)
    return 0


def _topics_to_read(admin: Admin, args: argparse.Namespace) -> dict[str, int]:
    """Partition count of --topic, or of each topic --include matches."""
    if args.topic is not None:
        try:
            return {args.topic: admin.describe_topics([args.topic])[args.topic].num_partitions}
        except KafkaClientError:
            raise CommandError(f"topic {args.topic!r} does not exist") from None
    try:
        pattern = re.compile(args.include)
    except re.error as exc:
        raise CommandError(f"--include is not a regular expression: {exc}", 2) from None
    found = {name: count for name, count in admin.list_topics().items()
             if pattern.fullmatch(name)}
    if not found:
        raise CommandError(f"no topic matches --include {args.include!r}")
    return found


def _consume_loop(consumer: Consumer, args: argparse.Namespace, formatter: Formatter,
                  printed: dict[TopicPartition, int]) -> int:
    processed = 0
    idle_deadline = (None if args.timeout_ms is None
                     else time.monotonic() + args.timeout_ms / 1000)
    while args.max_messages is None or processed < args.max_messages:
        wait = 1.0 if idle_deadline is None else max(0.0, idle_deadline - time.monotonic())
        messages = consumer.poll(min(wait, 1.0))
        for m in messages:
            formatter.write(m, sys.stdout)
            printed[m.topic_partition] = m.offset + 1
            processed += 1
            if args.max_messages is not None and processed >= args.max_messages:
                break
        if messages or not consumer.assignment():
            # Idle time counts from the last record, and (as a group member) from joining.
            sys.stdout.flush()
            if args.timeout_ms is not None:
                idle_deadline = time.monotonic() + args.timeout_ms / 1000
        elif idle_deadline is not None and time.monotonic() >= idle_deadline:
            break
    return processed
