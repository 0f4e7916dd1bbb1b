"""Assignors and the consumer-protocol bytes (Java's ConsumerProtocol layout)."""

from __future__ import annotations

import struct

import pytest
from kafka.protocol.old.consumer_protocol import (
    ConsumerProtocolMemberAssignment_v0,
    ConsumerProtocolMemberMetadata_v0,
)

from oncelog.client.assignors import (
    CooperativeStickyAssignor,
    MemberSubscription,
    RangeAssignor,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from oncelog.client.types import TopicPartition as TP


def member(
    mid: str, topics: tuple[str, ...] = ("t",), owned: tuple[TP, ...] = (), generation: int = 1
) -> MemberSubscription:
    return MemberSubscription(mid, topics, owned, generation)


# ------------------------------------------------------------------ protocol bytes


def test_subscription_v3_round_trip() -> None:
    data = encode_subscription(["b", "a"], owned=[TP("a", 1), TP("a", 0), TP("b", 2)], generation=7)
    assert struct.unpack_from(">h", data)[0] == 3
    sub = decode_subscription("m1", data, "instance-1")
    assert sub.topics == ("a", "b")
    assert sorted(sub.owned) == [TP("a", 0), TP("a", 1), TP("b", 2)]
    assert sub.generation == 7
    assert sub.group_instance_id == "instance-1"


def test_subscription_v0_header_is_version_topics_userdata() -> None:
    data = encode_subscription(["orders"], version=0)
    assert data == struct.pack(">hih", 0, 1, 6) + b"orders" + struct.pack(">i", -1)


def test_subscription_readable_by_kafka_python_and_back() -> None:
    ours = encode_subscription(["x", "y"], owned=[TP("x", 0)], generation=3)
    theirs = ConsumerProtocolMemberMetadata_v0.decode(ours)  # reads the v0 prefix of v3
    assert list(theirs.topics) == ["x", "y"]
    encoded = ConsumerProtocolMemberMetadata_v0(0, ["z"], b"ud").encode()
    sub = decode_subscription("m", encoded)
    assert sub.topics == ("z",) and sub.user_data == b"ud" and sub.owned == ()


def test_newer_version_than_known_is_read_as_latest() -> None:
    data = bytearray(encode_subscription(["t"], owned=[TP("t", 0)], generation=2))
    struct.pack_into(">h", data, 0, 9)
    assert decode_subscription("m", bytes(data)).owned == (TP("t", 0),)


def test_assignment_round_trip_and_kafka_python_interop() -> None:
    parts = [TP("a", 2), TP("a", 0), TP("b", 1)]
    data = encode_assignment(parts)
    assert sorted(decode_assignment(data)) == sorted(parts)
    theirs = ConsumerProtocolMemberAssignment_v0.decode(data)
    assert sorted(theirs.partitions()) == sorted((tp.topic, tp.partition) for tp in parts)
    from_them = ConsumerProtocolMemberAssignment_v0(0, [("c", [3, 4])], b"").encode()
    assert decode_assignment(from_them) == [TP("c", 3), TP("c", 4)]


def test_empty_assignment_bytes_mean_nothing_assigned() -> None:
    assert decode_assignment(b"") == []


def test_negative_version_is_rejected() -> None:
    with pytest.raises(ValueError):
        decode_subscription("m", struct.pack(">h", -1))


# ------------------------------------------------------------------ range


def test_range_matches_java_layout() -> None:
    # Java's RangeAssignorTest.testTwoConsumersOneTopicThreePartitions: c1 gets 0,1; c2 gets 2.
    result = RangeAssignor().assign({"t": 3}, [member("consumer2"), member("consumer1")])
    assert result == {"consumer1": [TP("t", 0), TP("t", 1)], "consumer2": [TP("t", 2)]}


def test_range_per_topic_and_only_subscribers() -> None:
    members = [member("a", ("t1", "t2")), member("b", ("t1",))]
    result = RangeAssignor().assign({"t1": 4, "t2": 2}, members)
    assert result["a"] == [TP("t1", 0), TP("t1", 1), TP("t2", 0), TP("t2", 1)]
    assert result["b"] == [TP("t1", 2), TP("t1", 3)]


def test_range_more_members_than_partitions() -> None:
    result = RangeAssignor().assign({"t": 1}, [member("a"), member("b")])
    assert result == {"a": [TP("t", 0)], "b": []}


def test_range_static_members_sort_by_instance_id() -> None:
    m1 = MemberSubscription("zzz", ("t",), group_instance_id="i-1")
    m2 = MemberSubscription("aaa", ("t",), group_instance_id="i-2")
    result = RangeAssignor().assign({"t": 2}, [m2, m1])
    assert result == {"zzz": [TP("t", 0)], "aaa": [TP("t", 1)]}


# ------------------------------------------------------------------ cooperative-sticky


def _all(result: dict[str, list[TP]]) -> list[TP]:
    return sorted(tp for tps in result.values() for tp in tps)


def test_sticky_first_assignment_is_balanced_and_complete() -> None:
    result = CooperativeStickyAssignor().assign({"t": 5}, [member("a"), member("b")])
    assert _all(result) == [TP("t", p) for p in range(5)]
    assert sorted(len(v) for v in result.values()) == [2, 3]


def test_sticky_keeps_owned_partitions() -> None:
    owned_a = (TP("t", 0), TP("t", 2))
    owned_b = (TP("t", 1), TP("t", 3))
    result = CooperativeStickyAssignor().assign(
        {"t": 4}, [member("a", owned=owned_a), member("b", owned=owned_b)]
    )
    assert result == {"a": list(owned_a), "b": list(owned_b)}


def test_cooperative_new_member_gets_partitions_only_after_revocation() -> None:
    owned_a = tuple(TP("t", p) for p in range(4))
    assignor = CooperativeStickyAssignor()
    # Round 1: b joins. a must give up 2 partitions, but they are withheld this round.
    first = assignor.assign({"t": 4}, [member("a", owned=owned_a), member("b")])
    assert len(first["a"]) == 2 and first["b"] == []
    # Round 2: a now owns only its two; the other two go to b.
    second = assignor.assign(
        {"t": 4}, [member("a", owned=tuple(first["a"]), generation=2), member("b", generation=2)]
    )
    assert second["a"] == first["a"]
    assert sorted(second["b"]) == sorted(set(owned_a) - set(first["a"]))


def test_sticky_member_leaving_spreads_its_partitions() -> None:
    owned_a = (TP("t", 0), TP("t", 1))
    result = CooperativeStickyAssignor().assign({"t": 6}, [member("a", owned=owned_a), member("c")])
    assert set(owned_a) <= set(result["a"])
    assert _all(result) == [TP("t", p) for p in range(6)]
    assert sorted(len(v) for v in result.values()) == [3, 3]


def test_sticky_conflicting_claims_higher_generation_wins() -> None:
    tp = TP("t", 0)
    result = CooperativeStickyAssignor().assign(
        {"t": 2},
        [member("old", owned=(tp,), generation=1), member("new", owned=(tp,), generation=2)],
    )
    assert tp in result["new"] and tp not in result["old"]


def test_sticky_drops_partitions_of_unsubscribed_topics() -> None:
    owned = (TP("gone", 0), TP("t", 0))
    result = CooperativeStickyAssignor().assign({"t": 2}, [member("a", topics=("t",), owned=owned)])
    assert result == {"a": [TP("t", 0), TP("t", 1)]}


def test_sticky_unequal_subscriptions() -> None:
    members = [member("a", ("t1", "t2")), member("b", ("t2",))]
    result = CooperativeStickyAssignor().assign({"t1": 2, "t2": 2}, members)
    assert _all(result) == [TP("t1", 0), TP("t1", 1), TP("t2", 0), TP("t2", 1)]
    assert all(tp.topic == "t2" for tp in result["b"])
    assert len(result["b"]) >= 1
