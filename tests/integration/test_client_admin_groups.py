"""oncelog.client.Admin's consumer-group and offset lookups on a real broker:
list/describe/delete_consumer_groups, list_consumer_group_offsets and list_offsets
(earliest, latest, by timestamp; read_uncommitted and read_committed)."""

from __future__ import annotations

import time

from oncelog.client import (
    Admin,
    Consumer,
    OffsetAndMetadata,
    OffsetSpec,
    Producer,
    TopicPartition,
)
from oncelog.errors import ErrorCode
from oncelog.harness.broker import BrokerProcess
from tests.support.names import unique_group, unique_topic


def setup_topic(bootstrap: str, partitions: int, timestamps: list[int]) -> str:
    """A topic whose partition 0 holds one record per timestamp."""
    topic = unique_topic("admgrp")
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topic(topic, partitions)
    with Producer({"bootstrap.servers": bootstrap}) as producer:
        for ts in timestamps:
            producer.send(topic, b"v", partition=0, timestamp=ts)
        assert producer.flush(30) == 0
    return topic


def test_groups_listed_described_offsets_and_deleted(shared_broker: BrokerProcess) -> None:
    bootstrap = shared_broker.bootstrap
    topic = setup_topic(bootstrap, 2, [1000, 2000, 3000])
    group = unique_group("admgrp")
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    config = {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
              "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
              "heartbeat.interval.ms": 200}
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        with Consumer(config) as consumer:
            consumer.subscribe([topic])
            deadline = time.monotonic() + 30
            while len(consumer.assignment()) < 2:
                assert time.monotonic() < deadline, "no assignment"
                consumer.poll(0.2)
            consumer.commit({tp0: OffsetAndMetadata(2, "meta")})

            listed = {g.group_id: g for g in admin.list_consumer_groups()}
            assert listed[group].state == "Stable"
            assert listed[group].protocol_type == "consumer"
            assert not listed[group].is_simple_consumer_group

            described = admin.describe_consumer_groups([group])[group]
            assert (described.state, described.protocol_type) == ("Stable", "consumer")
            [member] = described.members
            assert sorted(member.assignment) == [tp0, tp1]
            assert member.member_id

            assert admin.list_consumer_group_offsets(group) == {tp0: OffsetAndMetadata(2, "meta")}
            assert admin.list_consumer_group_offsets(group, [tp1]) == {}

            refused = admin.delete_consumer_groups([group])[group]
            assert refused is not None and refused.code == ErrorCode.non_empty_group

        assert admin.describe_consumer_groups([group])[group].state == "Empty"
        assert admin.delete_consumer_groups([group]) == {group: None}
        assert group not in {g.group_id for g in admin.list_consumer_groups()}
        gone = admin.describe_consumer_groups([group])[group]
        assert (gone.state, gone.members) == ("Dead", ())
        assert admin.list_consumer_group_offsets(group) == {}
        again = admin.delete_consumer_groups([group])[group]
        assert again is not None and again.code == ErrorCode.group_id_not_found


def test_list_offsets_by_spec_and_isolation(shared_broker: BrokerProcess) -> None:
    bootstrap = shared_broker.bootstrap
    topic = setup_topic(bootstrap, 1, [1000, 2000, 3000])
    tp = TopicPartition(topic, 0)
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        assert admin.list_offsets([tp], OffsetSpec.earliest()) == {tp: 0}
        assert admin.list_offsets([tp]) == {tp: 3}
        assert admin.list_offsets([tp], OffsetSpec.for_timestamp(1500)) == {tp: 1}
        assert admin.list_offsets([tp], OffsetSpec.for_timestamp(9000)) == {tp: -1}
        with Producer({"bootstrap.servers": bootstrap,
                       "transactional.id": unique_group("admtxn")}) as producer:
            producer.init_transactions()
            producer.begin_transaction()
            producer.send(topic, b"open", partition=0)
            assert producer.flush(30) == 0
            assert admin.list_offsets([tp], OffsetSpec.latest()) == {tp: 4}
            assert admin.list_offsets(
                [tp], OffsetSpec.latest(), isolation_level="read_committed"
            ) == {tp: 3}
            producer.abort_transaction()
        assert admin.list_offsets([tp], isolation_level="read_committed") == {tp: 5}
