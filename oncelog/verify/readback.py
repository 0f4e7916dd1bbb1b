"""The verify worker's ``setup`` (create the two topics) and ``final`` (the final read).

The final read is a fresh read_committed consumer without a group, assigned every partition
of both topics from the beginning, reading until each partition's position reaches its high
watermark (asked with read_uncommitted, so that a transaction still open keeps the read
going until it ends) or the deadline passes (``FinalRead.complete`` false). The group's
committed offsets come from ``Consumer.committed``. Both use oncelog.client.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from dataclasses import asdict

from oncelog.client import Admin, Consumer, NewTopic, TopicPartition
from oncelog.client.errors import KafkaClientError, TopicAlreadyExistsError
from oncelog.verify.clients import command_configs
from oncelog.verify.history import FinalRead, tp_key

log = logging.getLogger("oncelog.verify.readback")

SETUP_DEADLINE_S = 60.0


def _config(args: argparse.Namespace) -> dict[str, object]:
    return {"bootstrap.servers": args.bootstrap, "request.timeout.ms": 5000,
            "default.api.timeout.ms": 10000, "socket.connection.setup.timeout.ms": 3000,
            "allow.auto.create.topics": False, **command_configs(args.command_config)}


def _partitions(args: argparse.Namespace) -> list[TopicPartition]:
    return [TopicPartition(t, p) for t in (args.input, args.output)
            for p in range(args.partitions)]


def setup(args: argparse.Namespace) -> int:
    config = {} if args.min_insync_replicas is None else {
        "min.insync.replicas": str(args.min_insync_replicas)}
    deadline = time.monotonic() + SETUP_DEADLINE_S
    admin = Admin(_config(args))
    try:
        while True:
            try:
                errors = admin.create_topics(
                    [NewTopic(t, args.partitions, args.replication_factor, config)
                     for t in (args.input, args.output)])
                for error in errors.values():
                    if error is not None and not isinstance(error, TopicAlreadyExistsError):
                        raise error
                # Every partition has a leader that answers.
                admin.list_offsets(_partitions(args))
                log.info("topics %s and %s ready", args.input, args.output)
                return 0
            except KafkaClientError as exc:
                if time.monotonic() > deadline:
                    log.error("cannot create the topics: %s", exc)
                    return 1
                log.info("topic set-up failed, retrying: %s", exc)
                time.sleep(0.5)  # retry backoff
    finally:
        admin.close()


def final(args: argparse.Namespace) -> int:
    deadline = time.monotonic() + args.deadline_s
    tps = _partitions(args)
    reads: dict[str, list[tuple[int, str]]] = {tp_key(*tp): [] for tp in tps}
    complete = False
    consumer = Consumer({**_config(args), "isolation.level": "read_committed",
                         "auto.offset.reset": "earliest", "fetch.max.wait.ms": 100})
    ends = Consumer({**_config(args), "isolation.level": "read_uncommitted"})
    committed: dict[str, int] = {}
    committed_error: str | None = None
    try:
        consumer.assign(tps)
        consumer.seek_to_beginning(tps)
        high: dict[TopicPartition, int] = {}
        while time.monotonic() < deadline:
            try:
                if not high or all(consumer.position(tp) >= high[tp] for tp in tps):
                    fresh = ends.end_offsets(tps)
                    if high and fresh == high:
                        complete = True
                        break
                    high = fresh
                for m in consumer.poll(0.5):
                    reads[tp_key(m.topic, m.partition)].append(
                        (m.offset, (m.value or b"").decode()))
            except KafkaClientError as exc:
                log.info("final read: %s, retrying", exc)
                time.sleep(0.5)  # retry backoff
        committed, committed_error = _committed(args, deadline)
    finally:
        consumer.close(2.0)
        ends.close(2.0)
    result = FinalRead(reads, complete, committed, time.time() - args.started_at,
                       committed_error)
    with open(args.out, "w") as out:
        out.write(json.dumps({"type": "final", **asdict(result)}, separators=(",", ":")) + "\n")
    log.info("final read %s: %d records", "complete" if complete else "INCOMPLETE",
             sum(map(len, reads.values())))
    return 0


def _committed(args: argparse.Namespace, deadline: float) -> tuple[dict[str, int], str | None]:
    """The group's committed offsets, or why they could not be read."""
    inputs = [TopicPartition(args.input, p) for p in range(args.partitions)]
    group = Consumer({**_config(args), "group.id": args.group,
                      "enable.auto.commit": False})
    try:
        while True:
            try:
                found = group.committed(inputs)
                return ({tp_key(*tp): oam.offset for tp, oam in found.items()
                         if oam is not None}, None)
            except KafkaClientError as exc:
                if time.monotonic() > deadline + 30:
                    log.error("cannot read the group's committed offsets: %s", exc)
                    return {}, str(exc)
                time.sleep(0.5)  # retry backoff
    finally:
        group.close(2.0)
