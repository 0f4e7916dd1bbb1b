"""The group API handlers at every version they register: requests are encoded with kio,
decoded as the server decodes them, handled against a real GroupCoordinator, and the
responses encoded and decoded again, so each version's shape is exercised end to end."""

from __future__ import annotations

import asyncio
import io
import struct
from dataclasses import dataclass, field
from typing import Any

import pytest
from kio.index import load_response_schema
from kio.serial import entity_reader, entity_writer

from oncelog.broker.api import HANDLERS, SUPPORTED, RequestContext, load_all
from oncelog.broker.api import group as group_api
from oncelog.broker.context import NodeIdentity
from oncelog.clock import FakeClock
from oncelog.config import BrokerConfig
from oncelog.coordinator.group.coordinator import GroupCoordinator
from oncelog.coordinator.group.store import MemoryOffsetsStore
from oncelog.errors import ErrorCode
from oncelog.protocol import versions
from oncelog.protocol.build import make, request_module
from oncelog.protocol.codec import decode_request, encode_response
from tests.support.fake_cluster_view import FakeClusterView, coordinating

NONE = ErrorCode.none
load_all()  # the group APIs' handlers live in several modules


NODE = NodeIdentity(7, "", "broker.example", 19092)


@dataclass
class FakeTopic:
    partitions: int


@dataclass
class FakePartitions:
    """The topics OffsetCommit checks partitions against (it answers
    UNKNOWN_TOPIC_OR_PARTITION for others)."""

    topics: dict[str, FakeTopic] = field(default_factory=lambda: {"t": FakeTopic(3)})


@dataclass
class FakeBroker:
    groups: GroupCoordinator
    node: NodeIdentity = NODE
    cluster: FakeClusterView = field(
        default_factory=lambda: coordinating(NODE.node_id, NODE.host, NODE.port)
    )
    partitions: FakePartitions = field(default_factory=FakePartitions)
    authorizer: None = None  # no authorizer.class.name: everything allowed


def new_broker(initial_delay_ms: int = 0) -> FakeBroker:
    config = BrokerConfig({"group.initial.rebalance.delay.ms": str(initial_delay_ms)})
    return FakeBroker(GroupCoordinator(config, MemoryOffsetsStore(5), FakeClock()))


def request(api_key: int, version: int, cls_name: str, **fields: Any) -> Any:
    """Build a request, put it on the wire and read it back as the server would."""
    cls = getattr(request_module(api_key, version), cls_name)
    body = make(cls, **fields)
    out = io.BytesIO()
    out.write(struct.pack(">hhi", api_key, version, 99))
    out.write(struct.pack(">h", 3) + b"cli")
    if cls.__flexible__:
        out.write(b"\x00")
    entity_writer(cls)(out, body)
    header, decoded = decode_request(out.getvalue())
    assert header.api_version == version
    return decoded


def nested(api_key: int, version: int, cls_name: str, **fields: Any) -> Any:
    return make(getattr(request_module(api_key, version), cls_name), **fields)


async def call(broker: FakeBroker, api_key: int, version: int, req: Any) -> Any:
    """Run the registered handler, then encode and decode its response."""
    ctx = RequestContext(api_key, version, 99, "cli", "/10.0.0.1", broker)  # type: ignore[arg-type]
    response = await HANDLERS[api_key](ctx, req)
    frame = encode_response(api_key, version, 99, response)
    cls = load_response_schema(api_key, version)
    header_len = 4 + 4 + (1 if cls.__flexible__ and api_key != 18 else 0)
    decoded, used = entity_reader(cls)(frame, header_len)
    assert header_len + used == len(frame)
    return decoded


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(asyncio.wait_for(coro, timeout=5))


def versions_of(api_key: int) -> list[int]:
    low, high = SUPPORTED[api_key]
    return list(range(low, high + 1))


def test_registered_ranges() -> None:
    assert group_api.handle_join_group is HANDLERS[versions.JOIN_GROUP]
    expected = {
        versions.FIND_COORDINATOR: (0, 6),
        versions.JOIN_GROUP: (0, 9),
        versions.SYNC_GROUP: (0, 5),
        versions.HEARTBEAT: (0, 4),
        versions.LEAVE_GROUP: (0, 5),
        versions.OFFSET_COMMIT: (2, 9),
        versions.OFFSET_FETCH: (1, 9),
        versions.LIST_GROUPS: (0, 5),
        versions.DESCRIBE_GROUPS: (0, 6),
        versions.DELETE_GROUPS: (0, 2),
    }
    for key, span in expected.items():
        assert SUPPORTED[key] == span
    # Every client's highest version for these APIs is inside the range.
    aiokafka = {11: 5, 14: 3, 12: 1, 13: 1, 8: 3, 9: 3, 10: 1, 16: 2, 15: 3, 42: 1}
    kafka_python_caps = {11: 7, 14: 5, 8: 8, 9: 8}
    for key, v in [*aiokafka.items(), *kafka_python_caps.items()]:
        low, high = SUPPORTED[key]
        assert low <= v <= high


@pytest.mark.parametrize("version", range(0, 7))
def test_find_coordinator(version: int) -> None:
    async def scenario() -> None:
        broker = new_broker()
        key = versions.FIND_COORDINATOR
        if version >= 4:
            req = request(key, version, "FindCoordinatorRequest", key_type=1,
                          coordinator_keys=("g1", "txn-1"))
            resp = await call(broker, key, version, req)
            assert [c.key for c in resp.coordinators] == ["g1", "txn-1"]
            assert {(c.node_id, c.host, c.port, c.error_code) for c in resp.coordinators} == {
                (7, "broker.example", 19092, NONE)
            }
            bad = request(key, version, "FindCoordinatorRequest", key_type=2,
                          coordinator_keys=("s",))
            [c] = (await call(broker, key, version, bad)).coordinators
            assert c.error_code == ErrorCode.invalid_request
        else:
            req = request(key, version, "FindCoordinatorRequest", key="g1", key_type=1)
            resp = await call(broker, key, version, req)
            assert (resp.node_id, resp.host, resp.port, resp.error_code) == (
                7, "broker.example", 19092, NONE,
            )

    run(scenario())


def join_request(version: int, member_id: str, instance: str | None = None) -> Any:
    key = versions.JOIN_GROUP
    protocol = nested(key, version, "JoinGroupRequestProtocol", name="range", metadata=b"sub")
    return request(
        key, version, "JoinGroupRequest",
        group_id="g", session_timeout=10_000, rebalance_timeout=30_000, member_id=member_id,
        group_instance_id=instance, protocol_type="consumer", protocols=(protocol,),
        reason=None,
    )


@pytest.mark.parametrize("version", range(0, 10))
def test_membership_flow_at_every_join_version(version: int) -> None:
    async def scenario() -> None:
        broker = new_broker(initial_delay_ms=0)
        join = await call(broker, versions.JOIN_GROUP, version, join_request(version, ""))
        if version >= 4:  # KIP-394
            assert join.error_code == ErrorCode.member_id_required
            assert join.member_id.startswith("cli-")
            join = await call(broker, versions.JOIN_GROUP, version,
                              join_request(version, join.member_id))
        assert join.error_code == NONE
        assert join.generation_id == 1 and join.leader == join.member_id
        assert join.protocol_name == "range"
        assert [(m.member_id, m.metadata) for m in join.members] == [(join.member_id, b"sub")]
        member = broker.groups.group("g").members[join.member_id]  # type: ignore[union-attr]
        assert member.client_id == "cli" and member.client_host == "/10.0.0.1"
        assert member.rebalance_timeout_ms == (30_000 if version >= 1 else 10_000)

        sv = min(version, 5)
        assignment = nested(versions.SYNC_GROUP, sv, "SyncGroupRequestAssignment",
                            member_id=join.member_id, assignment=b"mine")
        sync = await call(broker, versions.SYNC_GROUP, sv, request(
            versions.SYNC_GROUP, sv, "SyncGroupRequest", group_id="g", generation_id=1,
            member_id=join.member_id, group_instance_id=None, protocol_type="consumer",
            protocol_name="range", assignments=(assignment,),
        ))
        assert sync.error_code == NONE and sync.assignment == b"mine"

        hv = min(version, 4)
        beat = await call(broker, versions.HEARTBEAT, hv, request(
            versions.HEARTBEAT, hv, "HeartbeatRequest", group_id="g", generation_id=1,
            member_id=join.member_id, group_instance_id=None,
        ))
        assert beat.error_code == NONE
        stale = await call(broker, versions.HEARTBEAT, hv, request(
            versions.HEARTBEAT, hv, "HeartbeatRequest", group_id="g", generation_id=0,
            member_id=join.member_id, group_instance_id=None,
        ))
        assert stale.error_code == ErrorCode.illegal_generation

        lv = min(version, 5)
        if lv >= 3:
            identity = nested(versions.LEAVE_GROUP, lv, "MemberIdentity",
                              member_id=join.member_id, group_instance_id=None, reason=None)
            leave_req = request(versions.LEAVE_GROUP, lv, "LeaveGroupRequest", group_id="g",
                                members=(identity,))
        else:
            leave_req = request(versions.LEAVE_GROUP, lv, "LeaveGroupRequest", group_id="g",
                                member_id=join.member_id)
        leave = await call(broker, versions.LEAVE_GROUP, lv, leave_req)
        assert leave.error_code == NONE
        if lv >= 3:
            assert [(m.member_id, m.error_code) for m in leave.members] == [
                (join.member_id, NONE)
            ]
        # Leaving again: the member is gone.
        again = await call(broker, versions.LEAVE_GROUP, lv, leave_req)
        errors = [m.error_code for m in again.members] if lv >= 3 else [again.error_code]
        assert errors == [ErrorCode.unknown_member_id]

    run(scenario())


def test_join_errors_keep_older_versions_encodable() -> None:
    async def scenario() -> None:
        broker = new_broker()
        for version in range(0, 10):
            req = join_request(version, "no-such-member")
            resp = await call(broker, versions.JOIN_GROUP, version, req)
            assert resp.error_code == ErrorCode.unknown_member_id
            assert resp.protocol_name == ("" if version < 7 else None)

    run(scenario())


def commit_request(version: int, group: str, offset: int) -> Any:
    key = versions.OFFSET_COMMIT
    part = nested(key, version, "OffsetCommitRequestPartition", partition_index=0,
                  committed_offset=offset, committed_leader_epoch=3, committed_metadata="m")
    part1 = nested(key, version, "OffsetCommitRequestPartition", partition_index=1,
                   committed_offset=offset + 1, committed_leader_epoch=-1,
                   committed_metadata=None)
    topic = nested(key, version, "OffsetCommitRequestTopic", name="t", partitions=(part, part1))
    return request(key, version, "OffsetCommitRequest", group_id=group,
                   generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
                   retention_time=-1, topics=(topic,))


def fetch_request(version: int, group: str, partitions: tuple[int, ...] | None) -> Any:
    key = versions.OFFSET_FETCH
    if version >= 8:
        topics = None if partitions is None else (
            nested(key, version, "OffsetFetchRequestTopics", name="t",
                   partition_indexes=partitions),
        )
        g = nested(key, version, "OffsetFetchRequestGroup", group_id=group, member_id=None,
                   member_epoch=-1, topics=topics)
        return request(key, version, "OffsetFetchRequest", groups=(g,), require_stable=True)
    topics = None if partitions is None else (
        nested(key, version, "OffsetFetchRequestTopic", name="t", partition_indexes=partitions),
    )
    return request(key, version, "OffsetFetchRequest", group_id=group, topics=topics,
                   require_stable=False)


@pytest.mark.parametrize("version", range(2, 10))
def test_offset_commit_then_fetch_at_every_version(version: int) -> None:
    async def scenario() -> None:
        broker = new_broker()
        group = f"g{version}"
        resp = await call(broker, versions.OFFSET_COMMIT, version,
                          commit_request(version, group, 100))
        [topic] = resp.topics
        assert topic.name == "t"
        assert [(p.partition_index, p.error_code) for p in topic.partitions] == [
            (0, NONE), (1, NONE)
        ]
        epoch = 3 if version >= 6 else -1
        assert broker.groups.fetch_offsets(group, [("t", 0)])[("t", 0)] == (
            100, epoch, "m", NONE
        )
        for fv in range(1, 10):
            wanted: tuple[int, ...] | None = (0, 1, 2)
            if fv >= 2:
                wanted = None if fv % 2 else (0, 1, 2)
            fetched = await call(broker, versions.OFFSET_FETCH, fv,
                                 fetch_request(fv, group, wanted))
            if fv >= 8:
                [g] = fetched.groups
                assert g.group_id == group and g.error_code == NONE
                topics = g.topics
            else:
                topics = fetched.topics
            [t] = topics
            got = {p.partition_index: (p.committed_offset, p.metadata, p.error_code)
                   for p in t.partitions}
            assert got[0] == (100, "m", NONE)
            assert got[1] == (101, "", NONE)
            if wanted is not None:
                assert got[2] == (-1, "", NONE)
            if fv >= 5:
                leader_epochs = {p.partition_index: p.committed_leader_epoch
                                 for p in t.partitions}
                assert leader_epochs[0] == epoch

    run(scenario())


@pytest.mark.parametrize("version", range(0, 6))
def test_list_groups(version: int) -> None:
    async def scenario() -> None:
        broker = new_broker()
        broker.groups.commit_offsets("simple", -1, "", None, {("t", 0): (1, -1, "")})
        req = request(versions.LIST_GROUPS, version, "ListGroupsRequest",
                      states_filter=("Empty",), types_filter=("classic",))
        resp = await call(broker, versions.LIST_GROUPS, version, req)
        assert resp.error_code == NONE
        assert [g.group_id for g in resp.groups] == ["simple"]
        if version >= 4:
            assert resp.groups[0].group_state == "Empty"
        if version >= 4:
            none = await call(broker, versions.LIST_GROUPS, version, request(
                versions.LIST_GROUPS, version, "ListGroupsRequest",
                states_filter=("Stable",), types_filter=()))
            assert none.groups == ()
        if version >= 5:
            consumer_only = await call(broker, versions.LIST_GROUPS, version, request(
                versions.LIST_GROUPS, version, "ListGroupsRequest",
                states_filter=(), types_filter=("consumer",)))
            assert consumer_only.groups == ()

    run(scenario())


@pytest.mark.parametrize("version", range(0, 7))
def test_describe_groups(version: int) -> None:
    async def scenario() -> None:
        broker = new_broker()
        result = await broker.groups.join_group("g", "", None, "consumer", [("range", b"s")],
                                                10_000, 30_000, "cid", "/h", False)
        await broker.groups.sync_group("g", 1, result.member_id, None, None, None,
                                       {result.member_id: b"asg"})
        req = request(versions.DESCRIBE_GROUPS, version, "DescribeGroupsRequest",
                      groups=("g", "missing"), include_authorized_operations=False)
        resp = await call(broker, versions.DESCRIBE_GROUPS, version, req)
        g, missing = resp.groups
        assert (g.error_code, g.group_state, g.protocol_type, g.protocol_data) == (
            NONE, "Stable", "consumer", "range"
        )
        [m] = g.members
        assert (m.member_id, m.client_id, m.client_host) == (result.member_id, "cid", "/h")
        assert (m.member_metadata, m.member_assignment) == (b"s", b"asg")
        assert missing.group_state == "Dead"
        if version >= 6:
            assert missing.error_code == ErrorCode.group_id_not_found
        else:
            assert missing.error_code == NONE

    run(scenario())


@pytest.mark.parametrize("version", range(0, 3))
def test_delete_groups(version: int) -> None:
    async def scenario() -> None:
        broker = new_broker()
        broker.groups.commit_offsets("simple", -1, "", None, {("t", 0): (1, -1, "")})
        await broker.groups.join_group("busy", "", None, "consumer", [("range", b"")],
                                       10_000, 30_000, "cid", "/h", False)
        req = request(versions.DELETE_GROUPS, version, "DeleteGroupsRequest",
                      groups_names=("simple", "busy", "nope"))
        resp = await call(broker, versions.DELETE_GROUPS, version, req)
        assert {(r.group_id, r.error_code) for r in resp.results} == {
            ("simple", NONE),
            ("busy", ErrorCode.non_empty_group),
            ("nope", ErrorCode.group_id_not_found),
        }

    run(scenario())
