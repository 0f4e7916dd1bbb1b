"""Consumer group assignors and the consumer protocol bytes, sans-IO.

The subscription and assignment bytes carried by JoinGroup/SyncGroup follow Java's
``ConsumerProtocol``: an int16 version, then ConsumerProtocolSubscription /
ConsumerProtocolAssignment of that version (kio's schemas). We write version 3 (with owned
partitions and generation, which cooperative rebalancing needs) and read any version, so a
group can mix oncelog, Java, librdkafka and kafka-python members.

``range``: per topic, members sorted by (group instance id, member id); the first
``n % m`` members get one partition more — Java's RangeAssignor.
``cooperative-sticky``: keeps every partition with its current owner where balance allows,
gives partitions nobody may keep to the least-loaded members, and (cooperative rule) leaves
out of this round any partition that moves from one member to another, so its owner revokes
it first; the follow-up rebalance then hands it over.
"""

from __future__ import annotations

import io
import struct
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from kio.serial import entity_reader, entity_writer

from oncelog.client.types import TopicPartition

__all__ = [
    "Assignor",
    "CooperativeStickyAssignor",
    "MemberSubscription",
    "RangeAssignor",
    "decode_assignment",
    "decode_subscription",
    "encode_assignment",
    "encode_subscription",
]

_VERSION = struct.Struct(">h")
_LATEST = 3


def _subscription_cls(version: int) -> Any:
    import importlib

    return importlib.import_module(f"kio.schema.consumer_protocol_subscription.v{version}.data")


def _assignment_cls(version: int) -> Any:
    import importlib

    return importlib.import_module(f"kio.schema.consumer_protocol_assignment.v{version}.data")


@dataclass(frozen=True)
class MemberSubscription:
    member_id: str
    topics: tuple[str, ...]
    owned: tuple[TopicPartition, ...] = ()
    generation: int = -1
    group_instance_id: str | None = None
    user_data: bytes | None = None
    rack_id: str | None = None


def _group_tps(tps: Sequence[TopicPartition]) -> dict[str, list[int]]:
    by_topic: dict[str, list[int]] = defaultdict(list)
    for tp in tps:
        by_topic[tp.topic].append(tp.partition)
    return {t: sorted(ps) for t, ps in sorted(by_topic.items())}


def encode_subscription(
    topics: Sequence[str],
    owned: Sequence[TopicPartition] = (),
    generation: int = -1,
    user_data: bytes | None = None,
    version: int = _LATEST,
) -> bytes:
    mod = _subscription_cls(version)
    fields: dict[str, Any] = {"topics": tuple(sorted(topics)), "user_data": user_data}
    if version >= 1:
        fields["owned_partitions"] = tuple(
            mod.TopicPartition(topic=t, partitions=tuple(ps)) for t, ps in _group_tps(owned).items()
        )
    if version >= 2:
        fields["generation_id"] = generation
    entity = mod.ConsumerProtocolSubscription(**fields)
    out = io.BytesIO()
    out.write(_VERSION.pack(version))
    entity_writer(type(entity))(out, entity)
    return out.getvalue()


def decode_subscription(
    member_id: str, data: bytes, group_instance_id: str | None = None
) -> MemberSubscription:
    (version,) = _VERSION.unpack_from(data, 0)
    if version < 0:
        raise ValueError(f"negative consumer protocol version {version}")
    mod = _subscription_cls(min(version, _LATEST))
    entity, _ = entity_reader(mod.ConsumerProtocolSubscription)(data, 2)
    owned = tuple(
        TopicPartition(tp.topic, int(p))
        for tp in getattr(entity, "owned_partitions", ())
        for p in tp.partitions
    )
    return MemberSubscription(
        member_id=member_id,
        topics=tuple(entity.topics),
        owned=owned,
        generation=int(getattr(entity, "generation_id", -1)),
        group_instance_id=group_instance_id,
        user_data=entity.user_data,
        rack_id=getattr(entity, "rack_id", None),
    )


def encode_assignment(
    partitions: Sequence[TopicPartition], user_data: bytes | None = None, version: int = _LATEST
) -> bytes:
    mod = _assignment_cls(version)
    entity = mod.ConsumerProtocolAssignment(
        assigned_partitions=tuple(
            mod.TopicPartition(topic=t, partitions=tuple(ps))
            for t, ps in _group_tps(partitions).items()
        ),
        user_data=user_data,
    )
    out = io.BytesIO()
    out.write(_VERSION.pack(version))
    entity_writer(type(entity))(out, entity)
    return out.getvalue()


def decode_assignment(data: bytes) -> list[TopicPartition]:
    """The partitions in SyncGroup's assignment bytes (empty bytes: nothing assigned)."""
    if not data:
        return []
    (version,) = _VERSION.unpack_from(data, 0)
    if version < 0:
        raise ValueError(f"negative consumer protocol version {version}")
    mod = _assignment_cls(min(version, _LATEST))
    entity, _ = entity_reader(mod.ConsumerProtocolAssignment)(data, 2)
    return [
        TopicPartition(tp.topic, int(p)) for tp in entity.assigned_partitions for p in tp.partitions
    ]


class Assignor(Protocol):
    name: str
    cooperative: bool

    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Sequence[MemberSubscription]
    ) -> dict[str, list[TopicPartition]]: ...


def _member_order(member: MemberSubscription) -> tuple[int, str, str]:
    # Java sorts static members (with an instance id) by that id, before dynamic ones.
    if member.group_instance_id is not None:
        return (0, member.group_instance_id, member.member_id)
    return (1, "", member.member_id)


@dataclass
class RangeAssignor:
    name: str = "range"
    cooperative: bool = False

    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Sequence[MemberSubscription]
    ) -> dict[str, list[TopicPartition]]:
        result: dict[str, list[TopicPartition]] = {m.member_id: [] for m in members}
        for topic in sorted(partitions_per_topic):
            count = partitions_per_topic[topic]
            consumers = sorted((m for m in members if topic in m.topics), key=_member_order)
            if not consumers or count <= 0:
                continue
            per, extra = divmod(count, len(consumers))
            for i, member in enumerate(consumers):
                start = per * i + min(i, extra)
                length = per + (1 if i < extra else 0)
                result[member.member_id].extend(
                    TopicPartition(topic, p) for p in range(start, start + length)
                )
        return result


@dataclass
class CooperativeStickyAssignor:
    name: str = "cooperative-sticky"
    cooperative: bool = True
    _last: dict[str, list[TopicPartition]] = field(default_factory=dict, repr=False)

    def assign(
        self, partitions_per_topic: Mapping[str, int], members: Sequence[MemberSubscription]
    ) -> dict[str, list[TopicPartition]]:
        ordered = sorted(members, key=_member_order)
        subscribed = {m.member_id: set(m.topics) for m in ordered}
        all_tps = [
            TopicPartition(t, p)
            for t in sorted(partitions_per_topic)
            if any(t in s for s in subscribed.values())
            for p in range(partitions_per_topic[t])
        ]
        valid = set(all_tps)

        # 1. Current owners. A partition claimed by two members goes to the one with the
        # higher generation; on a tie nobody keeps it.
        claims: dict[TopicPartition, list[MemberSubscription]] = defaultdict(list)
        for m in ordered:
            for tp in m.owned:
                if tp in valid and tp.topic in subscribed[m.member_id]:
                    claims[tp].append(m)
        current: dict[str, list[TopicPartition]] = {m.member_id: [] for m in ordered}
        owner_before: dict[TopicPartition, str] = {}
        for tp, claimants in claims.items():
            best = max(c.generation for c in claimants)
            top = [c for c in claimants if c.generation == best]
            if len(top) == 1:
                current[top[0].member_id].append(tp)
                owner_before[tp] = top[0].member_id

        # 2. Balance: cap each member at its quota; surplus partitions become free.
        assignment = {mid: sorted(tps) for mid, tps in current.items()}
        free = [tp for tp in all_tps if tp not in owner_before]
        # Quota per member, computed over the members that can take each partition. For the
        # usual case (everyone subscribes to the same topics) this is floor/ceil of P/M.
        quotas = self._quotas(all_tps, subscribed, ordered, assignment)
        for m in ordered:
            mine = assignment[m.member_id]
            quota = quotas[m.member_id]
            if len(mine) > quota:
                free.extend(mine[quota:])
                del mine[quota:]

        # 3. Hand out free partitions to the least-loaded eligible member.
        for tp in sorted(free):
            eligible = [m for m in ordered if tp.topic in subscribed[m.member_id]]
            if not eligible:
                continue
            under = [m for m in eligible if len(assignment[m.member_id]) < quotas[m.member_id]]
            pool = under or eligible
            target = min(pool, key=lambda m: (len(assignment[m.member_id]), _member_order(m)))
            assignment[target.member_id].append(tp)

        # 4. Cooperative: a partition changing hands is withheld for one round.
        for mid, tps in assignment.items():
            assignment[mid] = sorted(tp for tp in tps if owner_before.get(tp) in (None, mid))
        return assignment

    @staticmethod
    def _quotas(
        all_tps: Sequence[TopicPartition],
        subscribed: Mapping[str, set[str]],
        ordered: Sequence[MemberSubscription],
        current: Mapping[str, Sequence[TopicPartition]],
    ) -> dict[str, int]:
        if ordered and all(
            subscribed[m.member_id] == subscribed[ordered[0].member_id] for m in ordered
        ):
            # Same subscriptions everywhere: floor(P/M) each, and the P % M one-larger shares
            # go to the members that own the most already (so fewer partitions move).
            base, extra = divmod(len(all_tps), len(ordered))
            by_load = sorted(ordered, key=lambda m: (-len(current[m.member_id]), _member_order(m)))
            return {m.member_id: base + (1 if i < extra else 0) for i, m in enumerate(by_load)}
        # Otherwise a greedy simulation: each partition to the eligible member with the
        # fewest so far; the resulting counts are the target.
        counts = {m.member_id: 0 for m in ordered}
        for tp in all_tps:
            eligible = [m for m in ordered if tp.topic in subscribed[m.member_id]]
            if eligible:
                target = min(eligible, key=lambda m: (counts[m.member_id], _member_order(m)))
                counts[target.member_id] += 1
        return counts


ASSIGNORS: dict[str, type[RangeAssignor] | type[CooperativeStickyAssignor]] = {
    "range": RangeAssignor,
    "cooperative-sticky": CooperativeStickyAssignor,
}
