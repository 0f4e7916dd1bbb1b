"""Rebuilding the coordinator's groups from ``__consumer_offsets`` at start-up.

Replay only, no side effects: for each key the last record wins and a tombstone (null value)
deletes. A group exists after loading if it has a metadata record or at least one offset.
Loaded groups with members are Stable, their members' sessions counted from now; the others
are Empty. Unreadable records are logged and skipped rather than refusing to start.

Transactional offset commits (next step) will add: records carrying a producer id are held
as that producer's pending offsets and applied on its COMMIT marker or dropped on ABORT,
in log order; that needs the store to report producer ids and control records as well.
"""

from __future__ import annotations

import logging

from oncelog.clock import Clock
from oncelog.coordinator.group import codec
from oncelog.coordinator.group.metadata import (
    CommittedOffset,
    GroupMetadata,
    MemberMetadata,
    Protocols,
)
from oncelog.coordinator.group.results import TopicPartition
from oncelog.coordinator.group.state import GroupState
from oncelog.coordinator.group.store import OffsetsStore
from oncelog.errors import KafkaError

log = logging.getLogger(__name__)

OffsetsByGroup = dict[str, dict[TopicPartition, CommittedOffset]]
ValuesByGroup = dict[str, codec.GroupMetadataValue | None]


def load_groups(store: OffsetsStore, clock: Clock) -> tuple[dict[str, GroupMetadata], int]:
    """Every group of every offsets partition, and the number of records read."""
    offsets: OffsetsByGroup = {}
    values: ValuesByGroup = {}
    count = 0
    for partition in range(store.num_partitions):
        for key_bytes, value_bytes in store.read(partition):
            count += 1
            try:
                apply_record(key_bytes, value_bytes, offsets, values)
            except KafkaError as exc:
                log.warning("offsets partition %d: skipping unreadable record: %s",
                            partition, exc)
    groups: dict[str, GroupMetadata] = {}
    for group_id in set(offsets) | set(values):
        value = values.get(group_id)
        group_offsets = offsets.get(group_id, {})
        if value is None and not group_offsets:
            continue
        group = group_from_record(group_id, value, clock)
        group.offsets = group_offsets
        groups[group_id] = group
    log.info("loaded %d groups (%d offsets) from %d records", len(groups),
             sum(len(g.offsets) for g in groups.values()), count)
    return groups, count


def apply_record(
    key_bytes: bytes,
    value_bytes: bytes | None,
    offsets: OffsetsByGroup,
    values: ValuesByGroup,
) -> None:
    """Fold one record into the replay state (last write wins, tombstones delete)."""
    key = codec.decode_key(key_bytes)
    if isinstance(key, codec.OffsetCommitKey):
        tp = (key.topic, key.partition)
        if value_bytes is None:
            offsets.get(key.group, {}).pop(tp, None)
            return
        v = codec.decode_offset_value(value_bytes)
        offsets.setdefault(key.group, {})[tp] = CommittedOffset(
            v.offset, v.leader_epoch, v.metadata, v.commit_timestamp, v.expire_timestamp
        )
    elif isinstance(key, codec.GroupMetadataKey):
        values[key.group] = None if value_bytes is None else codec.decode_group_value(value_bytes)


def group_from_record(
    group_id: str, value: codec.GroupMetadataValue | None, clock: Clock
) -> GroupMetadata:
    if value is None:  # offsets only (a standalone group, or one deleted and reused)
        return GroupMetadata(group_id, state_timestamp=clock.now_ms())
    group = GroupMetadata(
        group_id,
        state=GroupState.STABLE if value.members else GroupState.EMPTY,
        state_timestamp=value.current_state_timestamp,
        generation_id=value.generation,
        protocol_type=value.protocol_type or None,
        protocol_name=value.protocol if value.members else None,
    )
    now = clock.monotonic_ms()
    for rec in value.members:
        # Only the selected protocol's metadata is stored; a member that rejoins with its
        # full list therefore triggers a rebalance, as in Kafka.
        protocols: Protocols = ((value.protocol, rec.subscription),) if value.protocol else ()
        group.add_member(
            MemberMetadata(
                member_id=rec.member_id,
                group_instance_id=rec.group_instance_id,
                client_id=rec.client_id,
                client_host=rec.client_host,
                rebalance_timeout_ms=rec.rebalance_timeout_ms,
                session_timeout_ms=rec.session_timeout_ms,
                protocol_type=value.protocol_type,
                protocols=protocols,
                assignment=rec.assignment,
                heartbeat_deadline=now + rec.session_timeout_ms,
            )
        )
    if value.members:
        group.protocol_type = value.protocol_type or None
        if value.leader in group.members:
            group.leader_id = value.leader
    return group
