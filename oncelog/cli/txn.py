"""``oncelog txn``: inspect transactions and recover from stuck ones (Kafka's
kafka-transactions.sh, plus KIP-939's force-terminate).

- ``list``: every transactional id each broker coordinates, with state filters.
- ``describe ID``: one transaction as its coordinator sees it.
- ``find-hanging``: transactions open on partitions that no coordinator will finish (their
  marker was never written): DescribeProducers shows open transactions older than the
  maximum transaction timeout, then ListTransactions/DescribeTransactions say whether the
  coordinator still expects to write that partition's marker.
- ``abort``: write the ABORT marker of one hanging transaction on one partition.
- ``force-terminate ID``: abort a transactional id's transaction, prepared 2PC ones
  included, and fence its producer (InitProducerId without KeepPreparedTxn).

kafka-transactions.sh's forms work too: ``--bootstrap-server B`` before the command,
``describe-producers``, ``forceTerminateTransaction --transactionalId ID``, ``list
--duration-filter MS --transactional-id-pattern REGEX``.

Two-phase-commit transactions (KIP-939) are those the coordinator reports with the timeout
2147483647 ms: they never time out. ``list`` and ``describe`` show them in a
``TwoPhaseCommit`` column.
"""

from __future__ import annotations

import argparse
import re
import time

from oncelog.cli.common import (
    CommandError,
    connection_options,
    open_admin,
    print_table,
    run_command,
)
from oncelog.client import Admin, TopicPartition
from oncelog.client.aio.admin import TransactionDescription
from oncelog.client.errors import KafkaClientError
from oncelog.errors import ErrorCode

LIST_HEADERS = ("TransactionalId", "Coordinator", "ProducerId", "TransactionState",
                "TwoPhaseCommit")
DESCRIBE_HEADERS = (
    "CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
    "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs",
    "TopicPartitions", "TwoPhaseCommit",
)
PRODUCERS_HEADERS = ("ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence",
                     "LastTimestamp", "CurrentTransactionStartOffset")
HANGING_HEADERS = (
    "Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
    "LastTimestamp", "Duration(min)",
)
STATES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit",
          "CompleteAbort", "Dead", "PrepareEpochFence")
DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN = 15


# kafka-transactions.sh takes its connection options before the command
# (`--bootstrap-server B describe --transactional-id T`): so does `oncelog txn`.
KAFKA_LEADING_OPTIONS = True


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    conn = connection_options()
    txn = sub.add_parser(
        "txn", help="inspect and recover transactions",
        description="Inspect transactions and recover from hanging ones.",
    )
    commands = txn.add_subparsers(dest="txn_command", required=True, metavar="COMMAND")

    p = commands.add_parser("list", parents=[conn], help="list transactions")
    p.add_argument("--state", action="append", default=[], choices=STATES,
                   help="only transactions in this state (repeatable)")
    p.add_argument("--producer-id", action="append", type=int, default=[],
                   help="only this producer id (repeatable)")
    p.add_argument("--duration-filter-ms", "--duration-filter", type=int, default=-1,
                   metavar="MS", help="only transactions running longer than this "
                                      "(--duration-filter: kafka-transactions.sh's name)")
    p.add_argument("--transactional-id-pattern", default=None, metavar="REGEX",
                   help="only transactional ids this regular expression matches whole")
    p.set_defaults(handler=cmd_list)

    p = commands.add_parser("describe", parents=[conn],
                            help="describe the transaction of a transactional id")
    _transactional_id_args(p)
    p.set_defaults(handler=cmd_describe)

    p = commands.add_parser("find-hanging", parents=[conn], help="find hanging transactions")
    p.add_argument("--broker-id", type=int, default=None,
                   help="search the partitions this broker leads")
    p.add_argument("--topic", default=None, help="limit the search to this topic")
    p.add_argument("--partition", type=int, default=None, help="and to this partition")
    p.add_argument("--max-transaction-timeout", type=int, metavar="MINUTES",
                   default=DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN,
                   help="only transactions idle longer than this (default "
                        f"{DEFAULT_MAX_TRANSACTION_TIMEOUT_MIN}, i.e. transaction.max.timeout.ms)")
    p.set_defaults(handler=cmd_find_hanging)

    p = commands.add_parser("abort", parents=[conn],
                            help="abort a hanging transaction on one partition")
    p.add_argument("--topic", required=True, help="topic of the hanging transaction")
    p.add_argument("--partition", type=int, required=True,
                   help="partition of the hanging transaction")
    p.add_argument("--start-offset", type=int, default=None,
                   help="first offset of the transaction to abort (finds the rest)")
    p.add_argument("--producer-id", type=int, default=None,
                   help="producer of the transaction (instead of --start-offset)")
    p.add_argument("--producer-epoch", type=int, default=None,
                   help="its epoch (with --producer-id)")
    p.add_argument("--coordinator-epoch", type=int, default=None,
                   help="its coordinator epoch (with --producer-id)")
    p.set_defaults(handler=cmd_abort)

    p = commands.add_parser(
        "producers", parents=[conn], aliases=["describe-producers"],
        help="the active producers of one partition (DescribeProducers)",
    )
    p.add_argument("--topic", required=True, help="topic of the partition")
    p.add_argument("--partition", type=int, required=True, help="the partition")
    p.add_argument("--broker-id", type=int, default=None,
                   help="ask the replica on this broker (default: the partition's leader)")
    p.set_defaults(handler=cmd_producers)

    p = commands.add_parser(
        "force-terminate", parents=[conn], aliases=["forceTerminateTransaction"],
        help="abort a transactional id's transaction, even a prepared 2PC one (KIP-939)",
    )
    _transactional_id_args(p)
    p.add_argument("--transactionalId", dest="transactional_id", default=None,
                   help="the same, as kafka-transactions.sh forceTerminateTransaction takes it")
    p.set_defaults(handler=cmd_force_terminate)


def _transactional_id_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("id", nargs="?", default=None, metavar="ID", help="transactional id")
    p.add_argument("--transactional-id", default=None, help="the same, as Kafka's tool takes it")


def _transactional_id(args: argparse.Namespace) -> str:
    txn_id: str | None = args.id or args.transactional_id
    if not txn_id:
        raise CommandError("a transactional id is required (ID or --transactional-id)", 2)
    return txn_id


def run(args: argparse.Namespace) -> int:
    return run_command(args, args.handler, f"txn {args.txn_command}")


def _yes_no(flag: bool) -> str:
    return "true" if flag else "false"


def _describe_one(admin: Admin, txn_id: str) -> TransactionDescription:
    try:
        return admin.describe_transactions([txn_id])[txn_id]
    except KafkaClientError as exc:
        if exc.code is ErrorCode.transactional_id_not_found:
            raise CommandError(f"transactional id {txn_id!r} is not known to its coordinator",
                               1) from None
        raise


# ------------------------------------------------------------------------------ list

def cmd_list(args: argparse.Namespace) -> int:
    pattern = None
    if args.transactional_id_pattern is not None:
        try:
            pattern = re.compile(args.transactional_id_pattern)
        except re.error as exc:
            raise CommandError(f"--transactional-id-pattern is not a regular expression: "
                               f"{exc}", 2) from None
    with open_admin(args) as admin:
        listings = admin.list_transactions(
            states=args.state, producer_ids=args.producer_id,
            duration_filter_ms=args.duration_filter_ms,
        )
        if pattern is not None:
            listings = [t for t in listings if pattern.fullmatch(t.transactional_id)]
        rows = []
        for t in sorted(listings, key=lambda t: (t.coordinator_id, t.transactional_id)):
            try:
                two_phase = _yes_no(_describe_one(admin, t.transactional_id).two_phase_commit)
            except (CommandError, KafkaClientError):
                two_phase = "unknown"  # expired or moved between the two requests
            rows.append((t.transactional_id, t.coordinator_id, t.producer_id, t.state, two_phase))
    print_table(LIST_HEADERS, rows)
    return 0


# ------------------------------------------------------------------------------ describe

def cmd_describe(args: argparse.Namespace) -> int:
    txn_id = _transactional_id(args)
    with open_admin(args) as admin:
        d = _describe_one(admin, txn_id)
    if d.start_time_ms >= 0:
        start = str(d.start_time_ms)
        duration = str(max(0, int(time.time() * 1000) - d.start_time_ms))
    else:
        start = duration = "None"
    partitions = ",".join(f"{tp.topic}-{tp.partition}" for tp in d.partitions) or "None"
    print_table(DESCRIBE_HEADERS, [(
        d.coordinator_id, d.transactional_id, d.producer_id, d.producer_epoch, d.state,
        d.timeout_ms, start, duration, partitions, _yes_no(d.two_phase_commit),
    )])
    if d.two_phase_commit:
        print(
            f"\n{txn_id!r} is a two-phase-commit (KIP-939) transactional id: its transactions "
            "never time out. Only its owner (commit, abort, or complete after restart) or "
            f"`oncelog txn force-terminate {txn_id}` ends an open one."
        )
    return 0


# ------------------------------------------------------------------------------ find-hanging

def _partitions_to_search(
    admin: Admin, topic: str | None, partition: int | None, broker_id: int | None
) -> list[TopicPartition]:
    try:
        topics = admin.describe_topics([topic] if topic is not None else None)
    except KafkaClientError as exc:
        if exc.code is ErrorCode.unknown_topic_or_partition:
            raise CommandError(f"topic {topic!r} does not exist") from None
        raise
    found = []
    for name, description in sorted(topics.items()):
        for index, leader in description.leaders.items():
            if partition is not None and index != partition:
                continue
            if broker_id is not None and leader != broker_id:
                continue
            found.append(TopicPartition(name, index))
    if partition is not None and not found and broker_id is None:
        raise CommandError(f"partition {topic}-{partition} does not exist")
    return found


def cmd_find_hanging(args: argparse.Namespace) -> int:
    if args.topic is None and args.broker_id is None:
        raise CommandError("find-hanging needs --topic or --broker-id to limit the search", 2)
    if args.partition is not None and args.topic is None:
        raise CommandError("--partition needs --topic", 2)
    max_timeout_ms = max(0, args.max_transaction_timeout) * 60_000
    with open_admin(args) as admin:
        partitions = _partitions_to_search(admin, args.topic, args.partition, args.broker_id)
        now = int(time.time() * 1000)
        hanging = admin.find_hanging_transactions(
            partitions, max_timeout_ms=max_timeout_ms, now_ms=now
        )
    print_table(HANGING_HEADERS, [
        (h.partition.topic, h.partition.partition, h.producer.producer_id,
         h.producer.producer_epoch, h.producer.coordinator_epoch,
         h.producer.current_txn_start_offset, h.producer.last_timestamp,
         h.idle_ms(now) // 60_000)
        for h in hanging
    ])
    return 0


# ------------------------------------------------------------------------------ abort

def cmd_abort(args: argparse.Namespace) -> int:
    tp = TopicPartition(args.topic, args.partition)
    if args.start_offset is None and args.producer_id is None:
        raise CommandError(
            "say which transaction to abort: --start-offset, or --producer-id with "
            "--producer-epoch and --coordinator-epoch", 2,
        )
    with open_admin(args) as admin:
        if args.start_offset is None:
            if args.producer_epoch is None:
                raise CommandError("missing --producer-epoch", 2)
            if args.coordinator_epoch is None:
                raise CommandError("missing --coordinator-epoch", 2)
            producer_id, producer_epoch = args.producer_id, args.producer_epoch
            coordinator_epoch = args.coordinator_epoch
        else:
            producer_id, producer_epoch, coordinator_epoch = _by_start_offset(
                admin, tp, args.start_offset
            )
        # A producer that hung before its first marker shows coordinator epoch -1; 0 is
        # at most any epoch a coordinator has used.
        coordinator_epoch = max(0, coordinator_epoch)
        try:
            admin.abort_transaction(tp, producer_id, producer_epoch, coordinator_epoch)
        except KafkaClientError as exc:
            raise CommandError(
                f"failed to abort the transaction of producer {producer_id} (epoch "
                f"{producer_epoch}, coordinator epoch {coordinator_epoch}) on "
                f"{tp.topic}-{tp.partition}: {exc}"
            ) from None
    print(f"Aborted the transaction of producer {producer_id} (epoch {producer_epoch}) on "
          f"{tp.topic}-{tp.partition}: ABORT marker written.")
    return 0


def _by_start_offset(admin: Admin, tp: TopicPartition, start_offset: int) -> tuple[int, int, int]:
    try:
        producers = admin.describe_producers([tp])[tp]
    except KafkaClientError as exc:
        raise CommandError(
            f"failed to read the producer state of {tp.topic}-{tp.partition}: {exc}"
        ) from None
    for p in producers:
        if p.current_txn_start_offset == start_offset:
            return p.producer_id, p.producer_epoch, p.coordinator_epoch
    raise CommandError(
        f"no open transaction starts at offset {start_offset} on {tp.topic}-{tp.partition}"
    )


# ------------------------------------------------------------------------------ producers

def cmd_producers(args: argparse.Namespace) -> int:
    """kafka-transactions.sh describe-producers: each producer the partition remembers; an
    open transaction shows where it starts (-1: none)."""
    tp = TopicPartition(args.topic, args.partition)
    with open_admin(args) as admin:
        _partitions_to_search(admin, args.topic, args.partition, None)
        producers = admin.describe_producers([tp], broker_id=args.broker_id)[tp]
    print_table(PRODUCERS_HEADERS, [
        (p.producer_id, p.producer_epoch, p.coordinator_epoch, p.last_sequence,
         p.last_timestamp, p.current_txn_start_offset)
        for p in sorted(producers, key=lambda p: p.producer_id)
    ])
    return 0


# ------------------------------------------------------------------------------ force-terminate

def cmd_force_terminate(args: argparse.Namespace) -> int:
    txn_id = _transactional_id(args)
    with open_admin(args) as admin:
        before = _describe_one(admin, txn_id)
        admin.force_terminate_transaction(txn_id)
    kind = "two-phase-commit " if before.two_phase_commit else ""
    print(f"Force-terminated {kind}transactional id {txn_id!r}: its transaction (was "
          f"{before.state}, producer {before.producer_id} epoch {before.producer_epoch}) is "
          "aborted and that producer is fenced.")
    return 0
