"""Handlers answer leadership from the cluster view (oncelog.broker.cluster_view): called
directly over a BrokerContext whose ``cluster`` is a FakeClusterView in which this broker
(node 1) leads ``t``-0 and node 2 leads ``t``-1 at leader epoch 5. On one node none of
these answers can happen, so they are checked here."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import uuid
from collections.abc import Awaitable, Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any, TypeVar, cast

import pytest

from oncelog.broker.api import (
    RequestContext,
    admin,
    cluster,
    fetch,
    find_coordinator,
    group,
    list_offsets,
    metadata,
    produce,
    producers,
    records,
    transactions,
)
from oncelog.broker.cluster_view import NO_LEADER, PartitionLeadership
from oncelog.broker.context import BrokerContext, NodeIdentity
from oncelog.broker.partitions import PartitionRegistry, TopicInfo
from oncelog.client.errors import AuthenticationError, BrokerConnectionError, KafkaTimeoutError
from oncelog.clock import FakeClock
from oncelog.config import BrokerConfig
from oncelog.errors import ErrorCode
from oncelog.protocol import versions
from oncelog.protocol.build import make, request_module
from oncelog.protocol.codec import encode_response
from oncelog.records.codec import RecordInput, encode_batch
from tests.support.fake_cluster_view import ME, OTHER, FakeClusterView

T = TypeVar("T")
NOT_LEADER = ErrorCode.not_leader_or_follower


class RecordingAdmin:
    """A TopicAdmin that records what the handlers ask of it."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    async def create_topic(
        self, name: str, partitions: int, configs: Mapping[str, str], *,
        replication_factor: int, assignments: Sequence[tuple[int, Sequence[int]]] | None,
        validate_only: bool,
    ) -> TopicInfo:
        self.calls.append(("create", name, partitions, replication_factor,
                           [(i, tuple(r)) for i, r in assignments or ()], validate_only))
        return TopicInfo(name, uuid.uuid4(), max(partitions, 1), dict(configs))

    async def delete_topic(self, name: str) -> None:
        self.calls.append(("delete", name))

    async def create_partitions(
        self, name: str, count: int, *, assignments: Sequence[Sequence[int]] | None,
        validate_only: bool,
    ) -> None:
        self.calls.append(("grow", name, count,
                           None if assignments is None else [tuple(a) for a in assignments]))


def services(tmp_path: Path) -> tuple[BrokerContext, FakeClusterView]:
    clock = FakeClock()
    config = BrokerConfig()
    registry = PartitionRegistry(tmp_path, config, clock)
    registry.load()
    registry.create_topic("t", 2)
    view = FakeClusterView(admin=RecordingAdmin())
    view.lead("t", 0, ME)
    view.lead("t", 1, OTHER)
    svc = BrokerContext(
        config=config, clock=clock, node=NodeIdentity(ME, "c", "localhost", 9092),
        partitions=registry, groups=cast(Any, SimpleNamespace()),
        transactions=cast(Any, SimpleNamespace(coordinator_epoch=0)),
        producer_ids=cast(Any, SimpleNamespace()), cluster=view,
    )
    return svc, view


async def awaited(pending: Awaitable[T]) -> T:
    return await pending


def call(svc: BrokerContext, api_key: int, version: int, handler: Any, request: Any) -> Any:
    ctx = RequestContext(api_key, version, 1, "test", "127.0.0.1", svc)
    response = asyncio.run(awaited(handler(ctx, request)))
    encode_response(api_key, version, 1, response)  # every field fits the version's schema
    return response


def one_partition_each(response_topics: Any, attr: str = "partitions") -> dict[int, Any]:
    return {int(getattr(p, "partition_index", getattr(p, "index", -1))): p
            for t in response_topics for p in getattr(t, attr)}


# -- Produce ---------------------------------------------------------------------------------
def produce_request(version: int) -> Any:
    mod = request_module(versions.PRODUCE, version)
    data = encode_batch([RecordInput(key=b"k", value=b"v")])
    return make(
        mod.ProduceRequest, transactional_id=None, acks=1,
        timeout=datetime.timedelta(seconds=1),
        topic_data=(make(mod.TopicProduceData, name="t", partition_data=tuple(
            make(mod.PartitionProduceData, index=i, records=data) for i in (0, 1, 9)
        )),),
    )


@pytest.mark.parametrize("version", [10, 12])
def test_produce_to_a_partition_led_elsewhere_names_its_leader(
    tmp_path: Path, version: int
) -> None:
    svc, _ = services(tmp_path)
    response = call(svc, versions.PRODUCE, version, produce.handle_produce,
                    produce_request(version))
    answers = one_partition_each(response.responses, "partition_responses")
    assert answers[0].error_code == ErrorCode.none
    assert answers[1].error_code == NOT_LEADER
    assert answers[9].error_code == ErrorCode.unknown_topic_or_partition
    # KIP-951: the current leader and epoch, and where it is, only for NOT_LEADER_OR_FOLLOWER.
    assert (answers[1].current_leader.leader_id, answers[1].current_leader.leader_epoch) == (
        OTHER, 5)
    assert (answers[0].current_leader.leader_id, answers[9].current_leader.leader_id) == (
        -1, -1)
    assert [(e.node_id, e.host, e.port, e.rack) for e in response.node_endpoints] == [
        (OTHER, "broker2.example", 9092, "rack2")]
    assert svc.partitions.get("t", 1).high_watermark == 0


def test_produce_v9_answers_not_leader_without_kip951_fields(tmp_path: Path) -> None:
    svc, _ = services(tmp_path)
    response = call(svc, versions.PRODUCE, 9, produce.handle_produce, produce_request(9))
    assert one_partition_each(response.responses, "partition_responses")[1].error_code == (
        NOT_LEADER)


# -- Fetch, ListOffsets, DeleteRecords, DescribeProducers, WriteTxnMarkers -----------------
def test_fetch_from_a_partition_led_elsewhere(tmp_path: Path) -> None:
    svc, _ = services(tmp_path)
    mod = request_module(versions.FETCH, 12)
    request = make(
        mod.FetchRequest, replica_id=-1, max_wait=datetime.timedelta(0), min_bytes=0,
        max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1, rack_id="",
        forgotten_topics_data=(),
        topics=(make(mod.FetchTopic, topic="t", partitions=tuple(
            make(mod.FetchPartition, partition=i, current_leader_epoch=-1, fetch_offset=0,
                 log_start_offset=-1, partition_max_bytes=1 << 20, last_fetched_epoch=-1)
            for i in (0, 1, 9)
        )),),
    )
    response = call(svc, versions.FETCH, 12, fetch.handle_fetch, request)
    answers = one_partition_each(response.responses)
    assert [answers[i].error_code for i in (0, 1, 9)] == [
        ErrorCode.none, NOT_LEADER, ErrorCode.unknown_topic_or_partition]
    # Kafka fills current_leader in Fetch only from v16 (with node_endpoints).
    assert answers[1].current_leader.leader_id == -1


def test_list_offsets_refuses_followers_and_answers_the_leader_epoch(tmp_path: Path) -> None:
    """Followers refuse; the leader answers with the epoch of the offset it found (Kafka's
    ListOffsets: for LATEST the log's latest epoch, here the engine's 0 -- the view's
    epoch is what clients are told in Metadata, the log's what wrote the data)."""
    svc, _ = services(tmp_path)
    mod = request_module(versions.LIST_OFFSETS, 8)
    request = make(mod.ListOffsetsRequest, replica_id=-1, isolation_level=0, topics=(
        make(mod.ListOffsetsTopic, name="t", partitions=tuple(
            make(mod.ListOffsetsPartition, partition_index=i, current_leader_epoch=-1,
                 timestamp=-1)
            for i in (0, 1)
        )),
    ))
    response = call(svc, versions.LIST_OFFSETS, 8, list_offsets.handle_list_offsets, request)
    answers = one_partition_each(response.topics)
    assert (answers[0].error_code, answers[0].offset, answers[0].leader_epoch) == (
        ErrorCode.none, 0, 0)
    assert (answers[1].error_code, answers[1].leader_epoch) == (NOT_LEADER, -1)


def test_delete_records_and_describe_producers_refuse_followers(tmp_path: Path) -> None:
    svc, _ = services(tmp_path)
    mod = request_module(versions.DELETE_RECORDS, 2)
    request = make(mod.DeleteRecordsRequest, timeout=datetime.timedelta(seconds=1), topics=(
        make(mod.DeleteRecordsTopic, name="t", partitions=tuple(
            make(mod.DeleteRecordsPartition, partition_index=i, offset=0) for i in (0, 1))),
    ))
    response = call(svc, versions.DELETE_RECORDS, 2, records.handle_delete_records, request)
    answers = one_partition_each(response.topics)
    assert [answers[i].error_code for i in (0, 1)] == [ErrorCode.none, NOT_LEADER]

    mod = request_module(versions.DESCRIBE_PRODUCERS, 0)
    request = make(mod.DescribeProducersRequest, topics=(
        make(mod.TopicRequest, name="t", partition_indexes=(0, 1)),))
    response = call(svc, versions.DESCRIBE_PRODUCERS, 0,
                    producers.handle_describe_producers, request)
    answers = one_partition_each(response.topics)
    assert [answers[i].error_code for i in (0, 1)] == [ErrorCode.none, NOT_LEADER]


def test_write_txn_markers_refuse_followers(tmp_path: Path) -> None:
    svc, _ = services(tmp_path)
    mod = request_module(versions.WRITE_TXN_MARKERS, 1)
    request = make(mod.WriteTxnMarkersRequest, markers=(
        make(mod.WritableTxnMarker, producer_id=4, producer_epoch=0, transaction_result=False,
             coordinator_epoch=0,
             topics=(make(mod.WritableTxnMarkerTopic, name="t", partition_indexes=(1, 9)),)),
    ))
    response = call(svc, versions.WRITE_TXN_MARKERS, 1,
                    transactions.handle_write_txn_markers, request)
    [marker] = response.markers
    assert [p.error_code for p in marker.topics[0].partitions] == [
        NOT_LEADER, ErrorCode.unknown_topic_or_partition]


# -- Metadata, DescribeCluster, DescribeTopicPartitions, ElectLeaders ----------------------
def test_metadata_answers_brokers_controller_and_leaders_from_the_view(tmp_path: Path) -> None:
    svc, view = services(tmp_path)
    view.partitions[("t", 1)] = PartitionLeadership(NO_LEADER, 7, (OTHER, ME), (), (OTHER,))
    mod = request_module(versions.METADATA, 12)
    request = make(mod.MetadataRequest, allow_auto_topic_creation=False,
                   include_topic_authorized_operations=False,
                   topics=(make(mod.MetadataRequestTopic, topic_id=None, name="t"),))
    response = call(svc, versions.METADATA, 12, metadata.handle_metadata, request)
    assert [(b.node_id, b.host, b.port, b.rack) for b in response.brokers] == [
        (ME, "broker1.example", 9091, "rack1"), (OTHER, "broker2.example", 9092, "rack2")]
    assert response.controller_id == OTHER
    answers = one_partition_each(response.topics)
    assert (answers[0].error_code, answers[0].leader_id, answers[0].leader_epoch,
            tuple(answers[0].replica_nodes), tuple(answers[0].isr_nodes)) == (
        ErrorCode.none, ME, 5, (ME, OTHER), (ME, OTHER))
    assert (answers[1].error_code, answers[1].leader_id, answers[1].leader_epoch,
            tuple(answers[1].offline_replicas)) == (
        ErrorCode.leader_not_available, NO_LEADER, 7, (OTHER,))


def test_describe_cluster_and_topic_partitions_from_the_view(tmp_path: Path) -> None:
    svc, _ = services(tmp_path)
    mod = request_module(versions.DESCRIBE_CLUSTER, 1)
    response = call(svc, versions.DESCRIBE_CLUSTER, 1, cluster.handle_describe_cluster,
                    make(mod.DescribeClusterRequest, include_cluster_authorized_operations=False,
                         endpoint_type=1))
    assert response.controller_id == OTHER
    assert [(b.broker_id, b.rack) for b in response.brokers] == [(ME, "rack1"),
                                                                 (OTHER, "rack2")]
    mod = request_module(versions.DESCRIBE_TOPIC_PARTITIONS, 0)
    request = make(mod.DescribeTopicPartitionsRequest, topics=(make(mod.TopicRequest, name="t"),),
                   response_partition_limit=10, cursor=None)
    response = call(svc, versions.DESCRIBE_TOPIC_PARTITIONS, 0,
                    cluster.handle_describe_topic_partitions, request)
    answers = one_partition_each(response.topics)
    assert [(answers[i].leader_id, answers[i].leader_epoch) for i in (0, 1)] == [
        (ME, 5), (OTHER, 5)]


def test_elect_leaders_needs_an_election_when_the_preferred_replica_does_not_lead(
    tmp_path: Path,
) -> None:
    svc, _ = services(tmp_path)  # replicas (1, 2): node 1 is preferred
    mod = request_module(versions.ELECT_LEADERS, 2)
    request = make(mod.ElectLeadersRequest, election_type=0,
                   timeout=datetime.timedelta(seconds=1),
                   topic_partitions=(make(mod.TopicPartitions, topic="t", partitions=(0, 1)),))
    response = call(svc, versions.ELECT_LEADERS, 2, cluster.handle_elect_leaders, request)
    [result] = response.replica_election_results
    assert [p.error_code for p in result.partition_result] == [
        ErrorCode.election_not_needed, ErrorCode.preferred_leader_not_available]


# -- FindCoordinator -------------------------------------------------------------------------
def test_find_coordinator_names_the_leader_of_the_coordinator_partition(
    tmp_path: Path,
) -> None:
    svc, view = services(tmp_path)
    view.coordinator_leader = OTHER
    mod = request_module(versions.FIND_COORDINATOR, 6)
    request = make(mod.FindCoordinatorRequest, key_type=1, coordinator_keys=("a", "b"))
    response = call(svc, versions.FIND_COORDINATOR, 6, find_coordinator.handle_find_coordinator,
                    request)
    assert {(c.node_id, c.host, c.port, c.error_code) for c in response.coordinators} == {
        (OTHER, "broker2.example", 9092, ErrorCode.none)}
    view.coordinator_leader = NO_LEADER  # the coordinator partition has no live leader
    mod = request_module(versions.FIND_COORDINATOR, 3)
    response = call(svc, versions.FIND_COORDINATOR, 3, find_coordinator.handle_find_coordinator,
                    make(mod.FindCoordinatorRequest, key="g", key_type=0))
    assert (response.node_id, response.error_code) == (-1, ErrorCode.coordinator_not_available)


# -- CreateTopics, DeleteTopics, CreatePartitions through TopicAdmin ---------------------------
def test_topic_administration_goes_through_the_views_admin(tmp_path: Path) -> None:
    svc, view = services(tmp_path)
    recorded = cast(RecordingAdmin, view.admin)
    mod = request_module(versions.CREATE_TOPICS, 7)
    request = make(mod.CreateTopicsRequest, timeout=datetime.timedelta(seconds=1),
                   validate_only=False, topics=(
                       make(mod.CreatableTopic, name="n", num_partitions=3,
                            replication_factor=2, assignments=(), configs=()),
                       make(mod.CreatableTopic, name="m", num_partitions=-1,
                            replication_factor=-1, configs=(), assignments=(
                                make(mod.CreatableReplicaAssignment, partition_index=0,
                                     broker_ids=(OTHER, ME)),)),
                   ))
    call(svc, versions.CREATE_TOPICS, 7, admin.handle_create_topics, request)
    mod = request_module(versions.DELETE_TOPICS, 6)
    call(svc, versions.DELETE_TOPICS, 6, admin.handle_delete_topics,
         make(mod.DeleteTopicsRequest, timeout=datetime.timedelta(seconds=1), topics=(
             make(mod.DeleteTopicState, name="t", topic_id=uuid.UUID(int=0)),)))
    mod = request_module(versions.CREATE_PARTITIONS, 3)
    call(svc, versions.CREATE_PARTITIONS, 3, admin.handle_create_partitions,
         make(mod.CreatePartitionsRequest, timeout=datetime.timedelta(seconds=1),
              validate_only=False, topics=(
                  make(mod.CreatePartitionsTopic, name="t", count=3, assignments=(
                      make(mod.CreatePartitionsAssignment, broker_ids=(OTHER,)),)),)))
    assert recorded.calls == [
        ("create", "n", 3, 2, [], False),
        ("create", "m", -1, -1, [(0, (OTHER, ME))], False),
        ("delete", "t"),
        ("grow", "t", 3, [(OTHER,)]),
    ]
    assert "t" in svc.partitions.topics  # the registry was not asked directly


# -- coordinator APIs: NOT_COORDINATOR when the key's coordinator partition is led elsewhere --
def test_group_and_transaction_apis_answer_not_coordinator(tmp_path: Path) -> None:
    svc, view = services(tmp_path)
    view.coordinator_leader = OTHER
    def request(api_key: int, version: int, cls: str, **fields: Any) -> Any:
        return make(getattr(request_module(api_key, version), cls), **fields)

    ms = datetime.timedelta(seconds=10)
    answers = [
        call(svc, versions.JOIN_GROUP, 9, group.handle_join_group, request(
            versions.JOIN_GROUP, 9, "JoinGroupRequest", group_id="g", session_timeout=ms,
            rebalance_timeout=ms, member_id="", group_instance_id=None,
            protocol_type="consumer", protocols=(), reason=None)).error_code,
        call(svc, versions.SYNC_GROUP, 5, group.handle_sync_group, request(
            versions.SYNC_GROUP, 5, "SyncGroupRequest", group_id="g", generation_id=1,
            member_id="m", group_instance_id=None, protocol_type=None, protocol_name=None,
            assignments=())).error_code,
        call(svc, versions.HEARTBEAT, 4, group.handle_heartbeat, request(
            versions.HEARTBEAT, 4, "HeartbeatRequest", group_id="g", generation_id=1,
            member_id="m", group_instance_id=None)).error_code,
        call(svc, versions.INIT_PRODUCER_ID, 5, producers.handle_init_producer_id, request(
            versions.INIT_PRODUCER_ID, 5, "InitProducerIdRequest", transactional_id="tx",
            transaction_timeout=ms, producer_id=-1, producer_epoch=-1)).error_code,
        call(svc, versions.ADD_OFFSETS_TO_TXN, 4, transactions.handle_add_offsets_to_txn,
             request(versions.ADD_OFFSETS_TO_TXN, 4, "AddOffsetsToTxnRequest",
                     transactional_id="tx", producer_id=4, producer_epoch=0,
                     group_id="g")).error_code,
        call(svc, versions.END_TXN, 4, transactions.handle_end_txn, request(
            versions.END_TXN, 4, "EndTxnRequest", transactional_id="tx", producer_id=4,
            producer_epoch=0, committed=True)).error_code,
    ]
    assert answers == [ErrorCode.not_coordinator] * len(answers)
    mod = request_module(versions.ADD_PARTITIONS_TO_TXN, 3)
    response = call(
        svc, versions.ADD_PARTITIONS_TO_TXN, 3, transactions.handle_add_partitions_to_txn,
        make(mod.AddPartitionsToTxnRequest, v3_and_below_transactional_id="tx",
             v3_and_below_producer_id=4, v3_and_below_producer_epoch=0,
             v3_and_below_topics=(make(mod.AddPartitionsToTxnTopic, name="t",
                                       partitions=(0,)),)))
    [topic] = response.results_by_topic_v3_and_below
    assert [p.partition_error_code for p in topic.results_by_partition] == [
        ErrorCode.not_coordinator]


def test_add_partitions_to_txn_accepts_partitions_this_broker_does_not_hold(
    tmp_path: Path,
) -> None:
    """The coordinator adds a partition the view knows (led by another broker, no replica
    here), as Kafka checks its metadata cache; one the view does not know is refused."""
    svc, view = services(tmp_path)
    view.lead("elsewhere", 0, OTHER)
    added: list[list[tuple[str, int]]] = []

    async def handle_add_partitions(
        transactional_id: str, producer_id: int, producer_epoch: int,
        partitions: list[tuple[str, int]], *, verify_only: bool,
    ) -> dict[tuple[str, int], ErrorCode]:
        added.append(partitions)
        return dict.fromkeys(partitions, ErrorCode.none)

    svc = dataclasses.replace(svc, transactions=cast(Any, SimpleNamespace(
        coordinator_epoch=0, handle_add_partitions=handle_add_partitions)))
    mod = request_module(versions.ADD_PARTITIONS_TO_TXN, 3)

    def add(topic: str) -> list[int]:
        response = call(
            svc, versions.ADD_PARTITIONS_TO_TXN, 3, transactions.handle_add_partitions_to_txn,
            make(mod.AddPartitionsToTxnRequest, v3_and_below_transactional_id="tx",
                 v3_and_below_producer_id=4, v3_and_below_producer_epoch=0,
                 v3_and_below_topics=(make(mod.AddPartitionsToTxnTopic, name=topic,
                                           partitions=(0,)),)))
        [result] = response.results_by_topic_v3_and_below
        return [p.partition_error_code for p in result.results_by_partition]

    assert svc.partitions.find("elsewhere", 0) is None
    assert add("elsewhere") == [ErrorCode.none]
    assert added == [[("elsewhere", 0)]]
    assert add("nowhere") == [ErrorCode.unknown_topic_or_partition]
    assert added == [[("elsewhere", 0)]]


# -- ElectLeaders forwarded to a controller that does not answer ------------------------------
class _UnreachableController:
    """Cluster elections on a broker that is not the controller, whose forward fails."""

    def __init__(self, failure: Exception) -> None:
        self.failure = failure

    async def elect(self, *_: Any) -> None:
        return None  # not the controller

    async def forward(self, *_: Any) -> Any:
        raise self.failure


@pytest.mark.parametrize(("failure", "code"), [
    (AuthenticationError("login refused"), ErrorCode.unknown_server_error),
    (BrokerConnectionError("connection refused"), ErrorCode.request_timed_out),
    (KafkaTimeoutError("no answer"), ErrorCode.request_timed_out),
    (LookupError("no live controller"), ErrorCode.request_timed_out),
])
def test_elect_leaders_answers_as_kafkas_forwarding_when_the_controller_fails(
    tmp_path: Path, failure: Exception, code: ErrorCode,
) -> None:
    """Kafka's ForwardingManager: a refused login is UNKNOWN_SERVER_ERROR, a controller not
    reached in time REQUEST_TIMED_OUT; at the top and for every partition asked."""
    svc = dataclasses.replace(services(tmp_path)[0],
                              elections=cast(Any, _UnreachableController(failure)))
    mod = request_module(versions.ELECT_LEADERS, 2)
    request = make(mod.ElectLeadersRequest, election_type=0, timeout=datetime.timedelta(
        seconds=1), topic_partitions=(make(mod.TopicPartitions, topic="t", partitions=(0, 1)),))
    response = call(svc, versions.ELECT_LEADERS, 2, cluster.handle_elect_leaders, request)
    assert response.error_code == code
    assert [(r.topic, p.partition_id, p.error_code) for r in response.replica_election_results
            for p in r.partition_result] == [("t", 0, code), ("t", 1, code)]
