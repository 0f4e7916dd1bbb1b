"""A differential scenario runner: the same raw request sequence against two brokers.

A scenario is data: a list of ``Step``s (an operation name and its arguments). ``run`` sends
them to one broker over one raw connection (tests/integration/rawkafka.py) and returns what a
client can observe, as ``(label, value)`` observations with everything that legitimately
differs between two brokers normalised away: producer ids become the names of the producers
that got them, topic and transactional ids are the scenario's symbolic names, timestamps are
dropped. ``compare`` lines two runs up and lists every observation that differs.

Names in a scenario: ``topic`` names a topic the scenario created with ``create_topic``;
``txn`` names a transactional id (also the name of the producer id/epoch it holds); an
idempotent producer is ``init`` with ``txn=None`` and a ``name``.
"""

from __future__ import annotations

import datetime
import io
import struct
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kio.schema.add_offsets_to_txn.v3.request import AddOffsetsToTxnRequest
from kio.schema.add_partitions_to_txn.v3.request import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnTopic,
)
from kio.schema.create_topics.v5.request import CreatableTopic, CreateTopicsRequest
from kio.schema.describe_producers.v0.request import DescribeProducersRequest, TopicRequest
from kio.schema.describe_transactions.v0.request import DescribeTransactionsRequest
from kio.schema.end_txn.v3.request import EndTxnRequest
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v11.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest as InitV4
from kio.schema.init_producer_id.v6.request import InitProducerIdRequest as InitV6
from kio.schema.list_offsets.v5.request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from kio.schema.list_transactions.v1.request import ListTransactionsRequest
from kio.schema.types import BrokerId, GroupId, ProducerId, TopicName, TransactionalId
from kio.serial import entity_writer
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64
from rawkafka import RawConnection, produce

from oncelog.records.codec import RecordInput, encode_batch

Observation = tuple[str, Any]

# Answers a coordinator gives while it is still getting ready (Kafka creates
# __transaction_state / __consumer_offsets on the first FindCoordinator).
_NOT_READY = {
    ErrorCode.coordinator_not_available,
    ErrorCode.coordinator_load_in_progress,
    ErrorCode.not_coordinator,
}


@dataclass(frozen=True)
class Step:
    op: str
    args: Mapping[str, Any] = field(default_factory=dict)
    observe: bool = True
    """False: a set-up step; its outcome is asserted to succeed, not compared."""


def step(op: str, *, observe: bool = True, **args: Any) -> Step:
    return Step(op, args, observe)


def setup(op: str, **args: Any) -> Step:
    return Step(op, args, observe=False)


@dataclass(frozen=True)
class Difference:
    scenario: str
    label: str
    oncelog: Any
    kafka: Any

    def key(self) -> tuple[str, str]:
        return (self.scenario, self.label)


@dataclass
class Producer:
    pid: int
    epoch: int
    seq: dict[tuple[str, int], int] = field(default_factory=dict)


class Session:
    """One scenario's run against one broker."""

    def __init__(self, conn: RawConnection, run_id: str, deadline_s: float = 30.0) -> None:
        self.conn = conn
        self.run_id = run_id
        self.producers: dict[str, Producer] = {}
        self.deadline_s = deadline_s

    # --- names -----------------------------------------------------------------------
    def topic(self, name: str) -> str:
        return f"diff-{name}-{self.run_id}"

    def txn_id(self, name: str) -> str:
        return f"diff-{name}-{self.run_id}"

    def group(self, name: str) -> str:
        return f"diff-{name}-{self.run_id}"

    def pid_name(self, pid: int) -> str:
        for name, producer in self.producers.items():
            if producer.pid == pid:
                return name
        return "<unknown producer id>" if pid >= 0 else str(pid)

    # --- plumbing ----------------------------------------------------------------------
    def _until_ready(self, send: Callable[[], Any], code_of: Callable[[Any], ErrorCode]) -> Any:
        deadline = time.monotonic() + self.deadline_s
        while True:
            response = send()
            if code_of(response) not in _NOT_READY or time.monotonic() > deadline:
                return response
            time.sleep(0.1)  # polling a coordinator that is loading, not synchronising

    def _find_coordinator(self, key: str, key_type: int) -> None:
        self._until_ready(
            lambda: self.conn.request(FindCoordinatorRequest(key=key, key_type=i8(key_type))),
            lambda r: r.error_code,
        )

    # --- operations: each returns the observation's value ----------------------------------
    def create_topic(self, topic: str, partitions: int = 1) -> Any:
        resp = self.conn.request(
            CreateTopicsRequest(
                topics=(
                    CreatableTopic(
                        name=TopicName(self.topic(topic)), num_partitions=i32(partitions),
                        replication_factor=i16(1), assignments=(), configs=(),
                    ),
                ),
                timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)),
                validate_only=False,
            )
        )
        code = resp.topics[0].error_code
        if code == ErrorCode.none:
            # Kafka's partitions lead only once the controller's metadata reached the broker
            # (NOT_LEADER_OR_FOLLOWER until then): wait, as a client refreshing metadata would.
            deadline = time.monotonic() + self.deadline_s
            for partition in range(partitions):
                while self._latest(topic, partition, 0)[0] != "none":
                    if time.monotonic() > deadline:
                        raise AssertionError(f"{topic}-{partition} never became available")
                    time.sleep(0.05)  # polling metadata propagation, not synchronising
        return code.name

    def init(
        self,
        txn: str | None,
        name: str | None = None,
        timeout_ms: int = 60000,
        enable_2pc: bool | None = None,
        keep_prepared: bool = False,
        as_producer: str | None = None,
        epoch_delta: int = 0,
    ) -> Any:
        """InitProducerId (v4, or v6 when ``enable_2pc`` is given); ``as_producer``: send that
        producer's id and epoch (+ ``epoch_delta``) as the current ones."""
        name = name or txn
        assert name is not None
        pid, epoch = -1, -1
        if as_producer is not None:
            current = self.producers[as_producer]
            pid, epoch = current.pid, current.epoch + epoch_delta
        txn_id = None if txn is None else TransactionalId(self.txn_id(txn))
        if txn_id is not None:
            self._find_coordinator(str(txn_id), 1)
        timeout = i32Timedelta.parse(datetime.timedelta(milliseconds=timeout_ms))
        common: dict[str, Any] = dict(
            transactional_id=txn_id, transaction_timeout=timeout,
            producer_id=ProducerId(pid), producer_epoch=i16(epoch),
        )
        request: Any = (
            InitV4(**common) if enable_2pc is None
            else InitV6(**common, enable2_pc=enable_2pc, keep_prepared_txn=keep_prepared)
        )
        resp = self._until_ready(lambda: self.conn.request(request), lambda r: r.error_code)
        if resp.error_code == ErrorCode.none:
            self.producers[name] = Producer(int(resp.producer_id), int(resp.producer_epoch))
            return {"error": "none", "producer": self.pid_name(int(resp.producer_id)),
                    "epoch": int(resp.producer_epoch)}
        return {"error": resp.error_code.name}

    def _ids(self, txn: str, producer: str | None, epoch_delta: int) -> tuple[int, int]:
        current = self.producers[producer or txn]
        return current.pid, current.epoch + epoch_delta

    def add_partitions(
        self, txn: str, topic: str, partition: int = 0, producer: str | None = None,
        epoch_delta: int = 0,
    ) -> Any:
        pid, epoch = self._ids(txn, producer, epoch_delta)
        resp = self.conn.request(
            AddPartitionsToTxnRequest(
                v3_and_below_transactional_id=TransactionalId(self.txn_id(txn)),
                v3_and_below_producer_id=ProducerId(pid),
                v3_and_below_producer_epoch=i16(epoch),
                v3_and_below_topics=(
                    AddPartitionsToTxnTopic(
                        name=TopicName(self.topic(topic)), partitions=(i32(partition),)
                    ),
                ),
            )
        )
        result = resp.results_by_topic_v3_and_below[0].results_by_partition[0]
        return result.partition_error_code.name

    def add_offsets(
        self, txn: str, group: str, producer: str | None = None, epoch_delta: int = 0
    ) -> Any:
        pid, epoch = self._ids(txn, producer, epoch_delta)
        self._find_coordinator(self.group(group), 0)
        resp = self.conn.request(
            AddOffsetsToTxnRequest(
                transactional_id=TransactionalId(self.txn_id(txn)), producer_id=ProducerId(pid),
                producer_epoch=i16(epoch), group_id=GroupId(self.group(group)),
            )
        )
        return resp.error_code.name

    def end_txn(
        self, txn: str, commit: bool, producer: str | None = None, epoch_delta: int = 0
    ) -> Any:
        pid, epoch = self._ids(txn, producer, epoch_delta)
        resp = self.conn.request(
            EndTxnRequest(
                transactional_id=TransactionalId(self.txn_id(txn)), producer_id=ProducerId(pid),
                producer_epoch=i16(epoch), committed=commit,
            )
        )
        return resp.error_code.name

    def produce(
        self, topic: str, producer: str | None = None, partition: int = 0, n: int = 1,
        txn: str | None = None, epoch_delta: int = 0, seq_delta: int = 0,
        seq: int | None = None,
    ) -> Any:
        """One batch of ``n`` records; with ``producer``, at that producer's next sequence
        for the partition (+ ``seq_delta``, or exactly ``seq``); with ``txn``, a
        transactional batch under that transactional id (``producer`` defaults to it)."""
        pid = epoch = base_seq = -1
        txn_id = None if txn is None else self.txn_id(txn)
        transactional = txn is not None
        producer = producer or txn
        if producer is not None:
            current = self.producers[producer]
            key = (topic, partition)
            pid, epoch = current.pid, current.epoch + epoch_delta
            base_seq = current.seq.get(key, 0) + seq_delta if seq is None else seq
        batch = encode_batch(
            [RecordInput(key=b"k", value=f"v{i}".encode()) for i in range(n)],
            producer_id=pid, producer_epoch=epoch, base_sequence=base_seq,
            transactional=transactional,
        )
        resp = produce(self.conn, self.topic(topic), batch, txn_id, index=partition)
        if producer is not None and resp.error_code == ErrorCode.none:
            self.producers[producer].seq[(topic, partition)] = base_seq + n
        return {"error": resp.error_code.name,
                "base_offset": int(resp.base_offset) if resp.error_code == ErrorCode.none
                else None}

    def _latest(self, topic: str, partition: int, isolation: int) -> list[Any]:
        resp = self.conn.request(
            ListOffsetsRequest(
                replica_id=BrokerId(-1), isolation_level=i8(isolation),
                topics=(
                    ListOffsetsTopic(
                        name=TopicName(self.topic(topic)),
                        partitions=(
                            ListOffsetsPartition(partition_index=i32(partition),
                                                 timestamp=i64(-1)),
                        ),
                    ),
                ),
            )
        )
        part = resp.topics[0].partitions[0]
        return [part.error_code.name, int(part.offset)]

    def offsets(self, topic: str, partition: int = 0) -> Any:
        """High watermark and last stable offset: ListOffsets latest per isolation level."""
        return {"hw": self._latest(topic, partition, 0), "lso": self._latest(topic, partition, 1)}

    def fetch(self, topic: str, partition: int = 0, read_committed: bool = True) -> Any:
        """A Fetch from offset 0: error, high watermark, LSO and the aborted transactions."""
        resp = self.conn.request(
            FetchRequest(
                max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=0)),
                min_bytes=i32(0), isolation_level=i8(1 if read_committed else 0),
                topics=(
                    FetchTopic(
                        topic=TopicName(self.topic(topic)),
                        partitions=(
                            FetchPartition(partition=i32(partition), fetch_offset=i64(0),
                                           partition_max_bytes=i32(1 << 20)),
                        ),
                    ),
                ),
                forgotten_topics_data=(),
            )
        )
        part = resp.responses[0].partitions[0]
        aborted = None if part.aborted_transactions is None else sorted(
            [self.pid_name(int(a.producer_id)), int(a.first_offset)]
            for a in part.aborted_transactions
        )
        return {"error": part.error_code.name, "hw": int(part.high_watermark),
                "lso": int(part.last_stable_offset), "aborted": aborted or None}

    def settle(self, txns: Sequence[str]) -> Any:
        """Wait until none of the transactions is still writing its markers (Kafka answers
        EndTxn v3 before the markers are written; DescribeTransactions shows Prepare*)."""
        deadline = time.monotonic() + self.deadline_s
        while True:
            states = [d.get("state") for d in self.describe_transactions(txns)]
            if not any(str(s).startswith("Prepare") for s in states):
                return states
            if time.monotonic() > deadline:
                raise AssertionError(f"transactions {txns} still completing: {states}")
            time.sleep(0.05)  # polling the coordinator's state, not synchronising

    def describe_transactions(self, txns: Sequence[str]) -> Any:
        request = DescribeTransactionsRequest(
            transactional_ids=tuple(TransactionalId(self.txn_id(t)) for t in txns)
        )
        out = []
        for state in _describe_transactions(self.conn, request):
            entry: dict[str, Any] = {"error": ErrorCode(state["error"]).name}
            if state["error"] == 0:
                entry.update(
                    state=state["state"],
                    timeout_ms=state["timeout_ms"],
                    producer=self.pid_name(state["producer_id"]),
                    epoch=state["epoch"],
                    started=state["start_ms"] > 0,
                    topics=sorted(
                        [topic.replace(f"-{self.run_id}", ""), sorted(partitions)]
                        for topic, partitions in state["topics"]
                    ),
                )
            out.append(entry)
        return out

    def list_transactions(self, states: Sequence[str] = ()) -> Any:
        resp = self.conn.request(
            ListTransactionsRequest(state_filters=tuple(states), producer_id_filters=())
        )
        mine = sorted(
            [t.transactional_id.replace(f"-{self.run_id}", ""), self.pid_name(int(t.producer_id)),
             t.transaction_state]
            for t in resp.transaction_states if t.transactional_id.endswith(self.run_id)
        )
        return {"error": resp.error_code.name, "transactions": mine,
                "unknown_state_filters": sorted(resp.unknown_state_filters)}

    def describe_producers(self, topic: str, partition: int = 0) -> Any:
        resp = self.conn.request(
            DescribeProducersRequest(
                topics=(TopicRequest(name=TopicName(self.topic(topic)),
                                     partition_indexes=(i32(partition),)),)
            )
        )
        part = resp.topics[0].partitions[0]
        return {
            "error": part.error_code.name,
            "producers": sorted(
                [self.pid_name(int(p.producer_id)), int(p.producer_epoch), int(p.last_sequence),
                 int(p.current_txn_start_offset)]
                for p in part.active_producers
            ),
        }


class _Reader:
    """Just enough of the flexible wire format to read DescribeTransactions v0, whose
    transaction_start_time is -1 for a transaction that has not started (kio refuses to
    decode a negative timestamp)."""

    def __init__(self, data: bytes, pos: int) -> None:
        self.data, self.pos = data, pos

    def fixed(self, fmt: str) -> int:
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return int(value)

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            byte = self.data[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7

    def string(self) -> str:
        n = self.uvarint() - 1
        text = self.data[self.pos:self.pos + n].decode()
        self.pos += n
        return text

    def tagged(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.pos += self.uvarint()


def _describe_transactions(conn: RawConnection, request: Any) -> list[dict[str, Any]]:
    body = io.BytesIO()
    entity_writer(type(request))(body, request)
    conn.send_frame(conn.header(65, 0, True) + body.getvalue())
    frame = conn.recv_frame()
    assert frame is not None, "broker closed the connection"
    r = _Reader(frame, 4)
    r.tagged()  # response header v1
    r.fixed(">i")  # throttle time
    states = []
    for _ in range(r.uvarint() - 1):
        state: dict[str, Any] = {"error": r.fixed(">h"), "id": r.string(), "state": r.string(),
                                 "timeout_ms": r.fixed(">i"), "start_ms": r.fixed(">q"),
                                 "producer_id": r.fixed(">q"), "epoch": r.fixed(">h")}
        topics = []
        for _ in range(r.uvarint() - 1):
            name = r.string()
            partitions = [r.fixed(">i") for _ in range(r.uvarint() - 1)]
            r.tagged()
            topics.append((name, partitions))
        r.tagged()
        state["topics"] = topics
        states.append(state)
    return states


OPS = {
    "create_topic", "init", "add_partitions", "add_offsets", "end_txn", "produce", "offsets",
    "fetch", "settle", "describe_transactions", "list_transactions", "describe_producers",
}


def _succeeded(value: Any) -> bool:
    if isinstance(value, str):
        return value == "none"
    if isinstance(value, dict) and "error" in value:
        return bool(value["error"] == "none")
    return True


def new_run_id() -> str:
    """A suffix for a scenario's names; the same for both brokers, so that names hash alike
    (e.g. a group's __consumer_offsets partition)."""
    return uuid.uuid4().hex[:8]


def run(bootstrap: str, steps: Sequence[Step], run_id: str) -> list[Observation]:
    """Every step in order over one connection; the observations of the observed steps."""
    conn = RawConnection(bootstrap, timeout=30.0)
    session = Session(conn, run_id)
    observations: list[Observation] = []
    try:
        for index, s in enumerate(steps):
            if s.op not in OPS:
                raise ValueError(f"unknown operation {s.op!r}")
            value = getattr(session, s.op)(**s.args)
            label = f"{index}:{s.op}({', '.join(f'{k}={v}' for k, v in s.args.items())})"
            if s.observe:
                observations.append((label, value))
            elif not _succeeded(value):
                raise AssertionError(f"set-up step {label} failed: {value}")
    finally:
        conn.close()
    return observations


def compare(
    scenario: str, oncelog: Sequence[Observation], kafka: Sequence[Observation]
) -> list[Difference]:
    assert [label for label, _ in oncelog] == [label for label, _ in kafka]
    return [
        Difference(scenario, label, ours, theirs)
        for (label, ours), (_, theirs) in zip(oncelog, kafka, strict=True)
        if ours != theirs
    ]
