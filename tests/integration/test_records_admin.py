"""DeleteRecords, OffsetDelete and the small contract gaps of issue 11, against real brokers.

The differential tests send the same requests to ``oncelog serve`` and to Kafka 4.4 and
compare what comes back; the client tests delete records with each client's admin API and
consume from the beginning, before and after a crash."""

from __future__ import annotations

import asyncio
import datetime
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import confluent_kafka as ck
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.delete_records.v2 import request as dr
from kio.schema.find_coordinator.v4 import request as fc
from kio.schema.join_group.v5 import request as jg
from kio.schema.metadata.v10 import request as md
from kio.schema.offset_commit.v8 import request as oc
from kio.schema.offset_delete.v0 import request as od
from kio.schema.types import GroupId, TopicName
from kio.static.primitive import i8, i32, i32Timedelta, i64
from rawkafka import RawConnection, produce, request_once

from oncelog.client import Admin, TopicPartition
from oncelog.harness.broker import BrokerProcess
from oncelog.records.codec import RecordInput, encode_batch
from tests.support import unique_topic
from tests.support.kafka import KafkaProcess

ZERO_UUID = uuid.UUID(int=0)


def _create(bootstrap: str, topics: list[NewTopic]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics(topics).values():
        future.result(timeout=30)


def _produce_plain(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = ck.Producer({"bootstrap.servers": bootstrap})
    for value in values:
        producer.produce(topic, key=b"k", value=value)
    assert producer.flush(30) == 0


def _delete(bootstrap: str, topic: str, offset: int, partition: int = 0) -> tuple[int, int]:
    response = request_once(bootstrap, dr.DeleteRecordsRequest(
        topics=(dr.DeleteRecordsTopic(name=TopicName(topic), partitions=(
            dr.DeleteRecordsPartition(partition_index=i32(partition), offset=i64(offset)),)),),
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=5)),
    ))
    result = response.topics[0].partitions[0]
    return int(result.error_code), int(result.low_watermark)


def _consume(bootstrap: str, topic: str, isolation: str, expect: int, wait_s: float = 3.0
             ) -> list[tuple[int, bytes]]:
    """Read from the beginning until ``expect`` records came, or ``wait_s`` passed without
    a new one (to show that nothing more comes)."""
    consumer = ck.Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4()}",
        "isolation.level": isolation, "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    })
    consumer.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
    got: list[tuple[int, bytes]] = []
    idle_until = time.monotonic() + wait_s
    try:
        while len(got) < expect or time.monotonic() < idle_until:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                offset = message.offset()
                assert offset is not None
                got.append((offset, bytes(message.value() or b"")))
                idle_until = time.monotonic() + (0.5 if len(got) >= expect else wait_s)
            elif len(got) >= expect and time.monotonic() >= idle_until:
                break
            if time.monotonic() > idle_until + 30:
                break
    finally:
        consumer.close()
    return got


def _find_coordinator(bootstrap: str, group: str) -> None:
    """Until the group's coordinator answers (Kafka creates __consumer_offsets then)."""
    _retry_coordinator(lambda: (int(request_once(bootstrap, fc.FindCoordinatorRequest(
        key_type=i8(0), coordinator_keys=(group,))).coordinators[0].error_code), []),
        group_level=True)


def _scenario_delete_records(bootstrap: str) -> dict[str, Any]:
    """DeleteRecords' answers in every case Kafka distinguishes."""
    _find_coordinator(bootstrap, "any-group")
    topic, compacted, both = unique_topic("dr"), unique_topic("drc"), unique_topic("drcd")
    _create(bootstrap, [
        NewTopic(topic, 1, 1), NewTopic(compacted, 1, 1, config={"cleanup.policy": "compact"}),
        NewTopic(both, 1, 1, config={"cleanup.policy": "compact,delete"}),
    ])
    _produce_plain(bootstrap, topic, [b"a", b"b", b"c", b"d", b"e"])
    _produce_plain(bootstrap, compacted, [b"a", b"b"])
    _produce_plain(bootstrap, both, [b"a", b"b"])
    return {
        "above hw": _delete(bootstrap, topic, 6),
        "negative": _delete(bootstrap, topic, -2),
        "at 2": _delete(bootstrap, topic, 2),
        "below start": _delete(bootstrap, topic, 1),
        "hw (-1)": _delete(bootstrap, topic, -1),
        "compact": _delete(bootstrap, compacted, 1),
        "compact,delete": _delete(bootstrap, both, 1),
        "internal": _delete(bootstrap, "__consumer_offsets", 0),
        "unknown topic": _delete(bootstrap, unique_topic("nosuch"), 0),
        "unknown partition": _delete(bootstrap, topic, 0, partition=5),
    }


def _scenario_open_transaction(bootstrap: str) -> dict[str, Any]:
    """Delete past the first offset of an open transaction: allowed; read_committed sees
    nothing past the new start until the transaction commits, then what follows it."""
    topic = unique_topic("drtxn")
    _create(bootstrap, [NewTopic(topic, 1, 1)])
    _produce_plain(bootstrap, topic, [b"pre"])
    txn = ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{topic}"})
    txn.init_transactions(30)
    txn.begin_transaction()
    txn.produce(topic, value=b"t0")
    txn.produce(topic, value=b"t1")
    assert txn.flush(30) == 0
    _produce_plain(bootstrap, topic, [b"n0", b"n1", b"n2"])
    deleted = _delete(bootstrap, topic, 4)
    before_commit = _consume(bootstrap, topic, "read_committed", expect=0)
    uncommitted = _consume(bootstrap, topic, "read_uncommitted", expect=2)
    txn.commit_transaction(30)
    after_commit = _consume(bootstrap, topic, "read_committed", expect=2)
    return {"deleted": deleted, "before commit": before_commit,
            "read_uncommitted": uncommitted, "after commit": after_commit}


def _scenario_gaps(bootstrap: str) -> dict[str, Any]:
    """Keyless records on a compacted topic; OffsetCommit to unknown topics and partitions;
    Metadata's authorized operations; OffsetDelete's answers."""
    topic, compacted = unique_topic("gap"), unique_topic("gapc")
    _create(bootstrap, [NewTopic(topic, 2, 1),
                        NewTopic(compacted, 1, 1, config={"cleanup.policy": "compact"})])
    conn = RawConnection(bootstrap)
    try:
        _retry_coordinator(lambda: [(0, int(produce(conn, compacted, encode_batch(
            [RecordInput(b"k", b"v")])).error_code))],
                           leader=True)
        keyless = produce(conn, compacted, encode_batch(
            [RecordInput(b"k", b"v"), RecordInput(None, b"v"), RecordInput(None, b"v")]))
        keyless_gzip = produce(conn, compacted, encode_batch(
            [RecordInput(b"k", b"v"), RecordInput(None, b"v")], compression=1))
        keyed = produce(conn, compacted, encode_batch([RecordInput(b"k", b"v")]))
    finally:
        conn.close()
    out: dict[str, Any] = {
        "keyless": _strip_offsets(keyless, compacted),
        "keyless gzip": _strip_offsets(keyless_gzip, compacted),
        "keyed": int(keyed.error_code),
    }
    group = f"g-{topic}"
    _find_coordinator(bootstrap, group)
    commit = oc.OffsetCommitRequest(
        group_id=GroupId(group), generation_id_or_member_epoch=i32(-1), member_id="",
        group_instance_id=None,
        topics=(
            oc.OffsetCommitRequestTopic(name=TopicName(unique_topic("nosuch")), partitions=(
                oc.OffsetCommitRequestPartition(partition_index=i32(0), committed_offset=i64(1),
                                                committed_leader_epoch=i32(-1),
                                                committed_metadata=""),)),
            oc.OffsetCommitRequestTopic(name=TopicName(topic), partitions=tuple(
                oc.OffsetCommitRequestPartition(partition_index=i32(i), committed_offset=i64(1),
                                                committed_leader_epoch=i32(-1),
                                                committed_metadata="")
                for i in (0, 1, 7))),
        ),
    )
    out["offset commit"] = _retry_coordinator(lambda: _partition_errors(
        request_once(bootstrap, commit)))
    metadata = request_once(bootstrap, md.MetadataRequest(
        topics=(md.MetadataRequestTopic(name=TopicName(topic), topic_id=ZERO_UUID),),
        allow_auto_topic_creation=False, include_cluster_authorized_operations=True,
        include_topic_authorized_operations=True))
    not_asked = request_once(bootstrap, md.MetadataRequest(
        topics=(md.MetadataRequestTopic(name=TopicName(topic), topic_id=ZERO_UUID),),
        allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False))
    out["authorized"] = (metadata.cluster_authorized_operations,
                         metadata.topics[0].topic_authorized_operations,
                         not_asked.cluster_authorized_operations,
                         not_asked.topics[0].topic_authorized_operations)

    def offset_delete(group_id: str) -> Any:
        response = request_once(bootstrap, od.OffsetDeleteRequest(
            group_id=GroupId(group_id), topics=(
            od.OffsetDeleteRequestTopic(name=TopicName(topic), partitions=(
                od.OffsetDeleteRequestPartition(partition_index=i32(0)),
                od.OffsetDeleteRequestPartition(partition_index=i32(9)))),
            od.OffsetDeleteRequestTopic(name=TopicName(unique_topic("nosuch")), partitions=(
                od.OffsetDeleteRequestPartition(partition_index=i32(0)),)),
        )))
        return int(response.error_code), _partition_errors(response)

    out["offset delete unknown group"] = _retry_coordinator(
        lambda: offset_delete(f"unknown-{group}"), group_level=True)
    out["offset delete"] = offset_delete(group)
    return out


def _strip_offsets(response: Any, topic: str) -> tuple[Any, ...]:
    """A produce answer's error, message and record errors, with the topic named T."""
    return (int(response.error_code), (response.error_message or "").replace(topic, "T"),
            tuple((int(e.batch_index), (e.batch_index_error_message or "").replace(topic, "T"))
                  for e in response.record_errors))


def _partition_errors(response: Any) -> list[tuple[int, int]]:
    return sorted((int(p.partition_index), int(p.error_code))
                  for t in response.topics for p in t.partitions)


COORDINATOR_LOADING = {14, 15, 16}  # COORDINATOR_LOAD_IN_PROGRESS / NOT_AVAILABLE, NOT_COORDINATOR
NOT_READY = {3, 6}  # a new topic's partition without its leader yet (Kafka)


def _retry_coordinator(call: Callable[[], Any], group_level: bool = False,
                       leader: bool = False) -> Any:
    """Kafka's group coordinator (and a new topic's leader) needs a moment after start;
    retry those errors."""
    deadline = time.monotonic() + 30
    waiting_for = NOT_READY if leader else COORDINATOR_LOADING
    while True:
        result = call()
        codes = {result[0]} if group_level else {code for _, code in result}
        if not codes & waiting_for or time.monotonic() > deadline:
            return result
        time.sleep(0.2)


def test_delete_records_answers_as_kafka(kafka_broker: KafkaProcess, broker: BrokerProcess
                                         ) -> None:
    ours = _scenario_delete_records(broker.bootstrap)
    assert ours == _scenario_delete_records(kafka_broker.bootstrap)
    assert ours["at 2"] == (0, 2) and ours["hw (-1)"] == (0, 5)
    assert ours["above hw"] == (1, -1)  # OFFSET_OUT_OF_RANGE
    ours_txn = _scenario_open_transaction(broker.bootstrap)
    assert ours_txn == _scenario_open_transaction(kafka_broker.bootstrap)
    assert ours_txn["before commit"] == []
    assert ours_txn["after commit"] == [(4, b"n1"), (5, b"n2")]


def test_contract_gaps_answer_as_kafka(kafka_broker: KafkaProcess, broker: BrokerProcess
                                       ) -> None:
    ours = _scenario_gaps(broker.bootstrap)
    assert ours == _scenario_gaps(kafka_broker.bootstrap)
    assert ours["keyless"][0] == 87  # INVALID_RECORD
    assert ours["offset commit"] == [(0, 0), (0, 3), (1, 0), (7, 3)]
    assert ours["authorized"] == (8096, 3576, -(2**31), -(2**31))
    assert ours["offset delete unknown group"] == (69, [])  # GROUP_ID_NOT_FOUND


def _offset_delete(bootstrap: str, group: str, partitions: list[tuple[str, int]]
                   ) -> tuple[int, list[tuple[str, int, int]]]:
    by_topic: dict[str, list[int]] = {}
    for topic, index in partitions:
        by_topic.setdefault(topic, []).append(index)
    response = request_once(bootstrap, od.OffsetDeleteRequest(
        group_id=GroupId(group), topics=tuple(
            od.OffsetDeleteRequestTopic(name=TopicName(topic), partitions=tuple(
                od.OffsetDeleteRequestPartition(partition_index=i32(i)) for i in indexes))
            for topic, indexes in by_topic.items())))
    names = {topic: f"T{i}" for i, topic in enumerate(by_topic)}  # the same on both brokers
    return int(response.error_code), sorted(
        (names[str(t.name)], int(p.partition_index), int(p.error_code))
        for t in response.topics for p in t.partitions)


def _scenario_offset_delete_active(bootstrap: str) -> dict[str, Any]:
    """OffsetDelete on groups with an active member: a consumer group whose member
    subscribes to one of two topics with committed offsets, and a group of another protocol
    type (a member joined, rebalance not finished)."""
    subscribed, other = unique_topic("ods"), unique_topic("odo")
    _create(bootstrap, [NewTopic(subscribed, 1, 1), NewTopic(other, 2, 1)])
    group = f"g-{subscribed}"
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                            "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([subscribed])
        deadline = time.monotonic() + 30
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(0.2)
        assert consumer.assignment(), "the consumer got no assignment"
        consumer.commit(offsets=[ck.TopicPartition(subscribed, 0, 3),
                                 ck.TopicPartition(other, 0, 2),
                                 ck.TopicPartition(other, 1, 5)], asynchronous=False)
        out: dict[str, Any] = {
            "consumer group": _retry_coordinator(
                lambda: _offset_delete(bootstrap, group,
                                       [(subscribed, 0), (other, 0), (other, 1)]),
                group_level=True),
        }
        committed = consumer.committed([ck.TopicPartition(subscribed, 0),
                                        ck.TopicPartition(other, 0),
                                        ck.TopicPartition(other, 1)], timeout=30)
        out["committed after"] = [(c.partition, c.offset) for c in committed]
    finally:
        consumer.close()
    out["consumer group, member gone"] = _offset_delete(bootstrap, group, [(subscribed, 0)])

    connect_group = f"c-{subscribed}"
    _find_coordinator(bootstrap, connect_group)
    conn = RawConnection(bootstrap)
    try:
        member = ""
        for _ in range(2):  # the first join answers MEMBER_ID_REQUIRED with the member id
            joined = conn.request(jg.JoinGroupRequest(
                group_id=GroupId(connect_group),
                session_timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
                rebalance_timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)),
                member_id=member, group_instance_id=None, protocol_type="connect",
                protocols=(jg.JoinGroupRequestProtocol(name="default", metadata=b"x"),)))
            member = joined.member_id
        out["connect join"] = int(joined.error_code)
        out["connect group"] = _offset_delete(bootstrap, connect_group, [(other, 0)])
    finally:
        conn.close()
    return out


def test_offset_delete_with_active_members_answers_as_kafka(
    kafka_broker: KafkaProcess, broker: BrokerProcess
) -> None:
    ours = _scenario_offset_delete_active(broker.bootstrap)
    assert ours == _scenario_offset_delete_active(kafka_broker.bootstrap)
    assert ours["consumer group"][0] == 0
    # GROUP_SUBSCRIBED_TO_TOPIC for the subscribed topic; the other's offsets go
    assert ours["consumer group"][1] == [("T0", 0, 86), ("T1", 0, 0), ("T1", 1, 0)]
    assert ours["committed after"] == [(0, 3), (0, ck.OFFSET_INVALID), (1, ck.OFFSET_INVALID)]
    assert ours["connect group"] == (68, [])  # NON_EMPTY_GROUP


# ---------------------------------------------------------------------------------------
# Clients' admin APIs, then consume from the beginning, also after kill -9


def _delete_confluent(bootstrap: str, topic: str, offset: int) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.delete_records([ck.TopicPartition(topic, 0, offset)])
    (future,) = futures.values()
    return int(future.result(timeout=30).low_watermark)


def _delete_kafka_python(bootstrap: str, topic: str, offset: int) -> int:
    from kafka import TopicPartition as KTP
    from kafka.admin import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        result = admin.delete_records({KTP(topic, 0): offset})
    finally:
        admin.close()
    return int(result[KTP(topic, 0)]["low_watermark"])


def _delete_aiokafka(bootstrap: str, topic: str, offset: int) -> int:
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.admin.records_to_delete import RecordsToDelete
    from aiokafka.structs import TopicPartition as ATP

    async def run() -> int:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            result = await admin.delete_records({ATP(topic, 0): RecordsToDelete(offset)})
        finally:
            await admin.close()
        return int(result[ATP(topic, 0)])

    return asyncio.run(run())


def _delete_oncelog(bootstrap: str, topic: str, offset: int) -> int:
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        return admin.delete_records({TopicPartition(topic, 0): offset})[TopicPartition(topic, 0)]


CLIENTS: dict[str, Callable[[str, str, int], int]] = {
    "confluent-kafka": _delete_confluent,
    "kafka-python": _delete_kafka_python,
    "aiokafka": _delete_aiokafka,
    "oncelog.client": _delete_oncelog,
}


def test_delete_records_with_each_client_survives_kill(broker: BrokerProcess) -> None:
    topics = {name: unique_topic(f"drcli-{name.split('-')[0].split('.')[0]}") for name in CLIENTS}
    _create(broker.bootstrap, [NewTopic(t, 1, 1) for t in topics.values()])
    values = [b"v%d" % i for i in range(6)]
    for topic in topics.values():
        _produce_plain(broker.bootstrap, topic, values)
    for name, delete in CLIENTS.items():
        assert delete(broker.bootstrap, topics[name], 4) == 4, name
    expected = [(4, b"v4"), (5, b"v5")]
    for topic in topics.values():
        assert _consume(broker.bootstrap, topic, "read_uncommitted", 2, 1.0) == expected
    broker.restart(kill=True)
    for topic in topics.values():
        assert _consume(broker.bootstrap, topic, "read_uncommitted", 2, 1.0) == expected


def test_consumer_below_new_start_resets(broker: BrokerProcess) -> None:
    """A committed position below the new log start is out of range: the consumer resets
    per auto.offset.reset (earliest: the new start)."""
    topic = unique_topic("drreset")
    _create(broker.bootstrap, [NewTopic(topic, 1, 1)])
    _produce_plain(broker.bootstrap, topic, [b"v%d" % i for i in range(5)])
    group = f"g-{topic}"
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        admin.delete_records({TopicPartition(topic, 0): 3})
    consumer = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                            "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.commit(offsets=[ck.TopicPartition(topic, 0, 1)], asynchronous=False)
    consumer.subscribe([topic])
    got: list[int] = []
    deadline = time.monotonic() + 30
    while len(got) < 2 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            offset = message.offset()
            assert offset is not None
            got.append(offset)
    consumer.close()
    assert got == [3, 4]


def test_offset_delete_with_oncelog_admin(broker: BrokerProcess) -> None:
    topic, other = unique_topic("od"), unique_topic("od2")
    _create(broker.bootstrap, [NewTopic(topic, 1, 1), NewTopic(other, 1, 1)])
    group = f"g-{topic}"
    consumer = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group,
                            "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.commit(offsets=[ck.TopicPartition(topic, 0, 3), ck.TopicPartition(other, 0, 2)],
                    asynchronous=False)
    _produce_plain(broker.bootstrap, topic, [b"x"])
    consumer.subscribe([topic])
    deadline = time.monotonic() + 30
    while not consumer.assignment() and time.monotonic() < deadline:
        consumer.poll(0.2)
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        answer = admin.delete_consumer_group_offsets(
            group, [TopicPartition(topic, 0), TopicPartition(other, 0)])
        assert answer[TopicPartition(other, 0)] is None
        error = answer[TopicPartition(topic, 0)]
        assert error is not None and error.code is not None
        assert error.code.name == "group_subscribed_to_topic"
    consumer.close()
    broker.restart(kill=True)
    probe = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    committed = probe.committed([ck.TopicPartition(topic, 0), ck.TopicPartition(other, 0)],
                                timeout=30)
    probe.close()
    assert [(c.topic, c.offset) for c in committed] == [(topic, 3), (other, ck.OFFSET_INVALID)]


def test_cli_records_delete(broker: BrokerProcess, tmp_path: Path) -> None:
    topic = unique_topic("drcli")
    _create(broker.bootstrap, [NewTopic(topic, 2, 1)])
    _produce_plain(broker.bootstrap, topic, [b"a", b"b", b"c"])
    offsets = tmp_path / "offsets.json"
    offsets.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "offset": -1},
        {"topic": topic, "partition": 1, "offset": 99},
    ]}))
    cli = [sys.executable, "-m", "oncelog.cli.main", "records", "delete",
           "--bootstrap-server", broker.bootstrap]
    run = subprocess.run([*cli, "--offset-json-file", str(offsets)], capture_output=True,
                         text=True, timeout=60)
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        high = admin.delete_records({TopicPartition(topic, 0): -1})[TopicPartition(topic, 0)]
    assert run.returncode == 1, run.stderr
    assert f"partition: {topic}-0\tlow_watermark: {high}" in run.stdout
    assert f"partition: {topic}-1\terror:" in run.stdout
    simple = subprocess.run([*cli, "--topic", topic, "--partition", "1", "--offset", "0"],
                            capture_output=True, text=True, timeout=60)
    assert simple.returncode == 0, simple.stderr
    assert f"partition: {topic}-1\tlow_watermark: 0" in simple.stdout


