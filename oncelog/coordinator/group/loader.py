"""Rebuilding the coordinator's groups from ``__consumer_offsets`` at start-up.

Replay only, no side effects, in log order, one offsets partition at a time:
  - plain records: for each key the last record wins and a tombstone (null value) deletes;
    deleting an offset (or the whole group) also forgets transactional offsets still pending
    for it, as the live coordinator does;
  - offsets in a transactional batch are held as pending for the batch's producer id;
  - a COMMIT marker of that producer applies its pending offsets of every group in the
    partition (each replacing the committed offset unless a plain commit was written after
    it); an ABORT marker drops them;
  - whatever is still pending at the end stays pending: its transaction is still open, and
    the transaction coordinator will finish it (the marker then arrives through
    ``GroupCoordinator.on_txn_marker``).
A group exists after loading if it has a metadata record, an offset or a pending offset.
Loaded groups with members are Stable, their members' sessions counted from now; the others
are Empty. Unreadable records are logged and skipped rather than refusing to start.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

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
from oncelog.coordinator.group.store import OffsetsStore, StoredRecord
from oncelog.errors import ErrorCode, KafkaError
from oncelog.records.control import ControlType

log = logging.getLogger(__name__)

OffsetsByGroup = dict[str, dict[TopicPartition, CommittedOffset]]
ValuesByGroup = dict[str, codec.GroupMetadataValue | None]
# producer id -> group -> partition -> offset
PendingByProducer = dict[int, dict[str, dict[TopicPartition, CommittedOffset]]]


@dataclass
class ReplayState:
    """What the records read so far say (the fold of ``apply``)."""

    offsets: OffsetsByGroup = field(default_factory=dict)
    values: ValuesByGroup = field(default_factory=dict)
    # Transactional offsets of the partition being replayed, waiting for their marker.
    pending: PendingByProducer = field(default_factory=dict)
    # Those of partitions already replayed: their transactions are still open.
    still_open: list[tuple[int, str, dict[TopicPartition, CommittedOffset]]] = field(
        default_factory=list
    )
    # Latest producer epoch seen per producer id (transactional batches and markers).
    producer_epochs: dict[int, int] = field(default_factory=dict)
    records: int = 0

    def apply(self, record: StoredRecord) -> None:
        """Fold one record in; raises KafkaError for an unreadable one."""
        order = self.records
        self.records += 1
        if record.producer_id >= 0 and record.producer_epoch >= 0:
            known = self.producer_epochs.get(record.producer_id, -1)
            self.producer_epochs[record.producer_id] = max(known, record.producer_epoch)
        if record.control is not None:
            self._apply_marker(record.producer_id, record.control == ControlType.COMMIT)
            return
        if record.key is None:
            raise KafkaError(ErrorCode.corrupt_message, "record without a key")
        if record.transactional:
            self._apply_transactional(record.key, record.value, record.producer_id, order)
        else:
            self._apply_plain(record.key, record.value, order)

    def _apply_plain(self, key_bytes: bytes, value_bytes: bytes | None, order: int) -> None:
        key = codec.decode_key(key_bytes)
        if isinstance(key, codec.OffsetCommitKey):
            tp = (key.topic, key.partition)
            if value_bytes is None:
                self.offsets.get(key.group, {}).pop(tp, None)
                for groups in self.pending.values():
                    groups.get(key.group, {}).pop(tp, None)
                return
            self.offsets.setdefault(key.group, {})[tp] = _offset(value_bytes, order)
        elif isinstance(key, codec.GroupMetadataKey):
            if value_bytes is None:
                self.values[key.group] = None
                for groups in self.pending.values():
                    groups.pop(key.group, None)
            else:
                self.values[key.group] = codec.decode_group_value(value_bytes)

    def _apply_transactional(
        self, key_bytes: bytes, value_bytes: bytes | None, producer_id: int, order: int
    ) -> None:
        key = codec.decode_key(key_bytes)
        if not isinstance(key, codec.OffsetCommitKey) or value_bytes is None:
            # TxnOffsetCommit writes offset commits only; anything else is not ours.
            log.warning("skipping a transactional record that is not an offset commit "
                        "(producer id %d)", producer_id)
            return
        tp = (key.topic, key.partition)
        groups = self.pending.setdefault(producer_id, {})
        groups.setdefault(key.group, {})[tp] = _offset(value_bytes, order)

    def _apply_marker(self, producer_id: int, commit: bool) -> None:
        groups = self.pending.pop(producer_id, {})
        if not commit:
            return
        for group_id, pending in groups.items():
            committed = self.offsets.setdefault(group_id, {})
            for tp, co in pending.items():
                current = committed.get(tp)
                if current is None or co.written_after(current):
                    committed[tp] = co

    def end_partition(self) -> None:
        """The partition is replayed: what is pending belongs to open transactions (a marker
        on another partition never ends them)."""
        for producer_id, groups in self.pending.items():
            for group_id, offsets in groups.items():
                if offsets:
                    self.still_open.append((producer_id, group_id, offsets))
        self.pending = {}


def _offset(value_bytes: bytes, order: int) -> CommittedOffset:
    v = codec.decode_offset_value(value_bytes)
    return CommittedOffset(v.offset, v.leader_epoch, v.metadata, v.commit_timestamp,
                           v.expire_timestamp, log_order=order)


@dataclass(frozen=True)
class LoadedGroups:
    groups: dict[str, GroupMetadata]
    records: int
    producer_epochs: dict[int, int]


def load_groups(
    store: OffsetsStore, clock: Clock, partitions: Iterable[int] | None = None
) -> LoadedGroups:
    """Every group of the offsets ``partitions`` (all of them by default), with the
    producer epochs seen."""
    state = ReplayState()
    for partition in range(store.num_partitions) if partitions is None else partitions:
        for record in _records_of(store, partition):
            try:
                state.apply(record)
            except KafkaError as exc:
                log.warning("offsets partition %d: skipping unreadable record: %s",
                            partition, exc)
        state.end_partition()
    pending_groups = {group_id for _, group_id, _ in state.still_open}
    groups: dict[str, GroupMetadata] = {}
    for group_id in set(state.offsets) | set(state.values) | pending_groups:
        value = state.values.get(group_id)
        group_offsets = state.offsets.get(group_id, {})
        if value is None and not group_offsets and group_id not in pending_groups:
            continue
        group = group_from_record(group_id, value, clock)
        group.offsets = group_offsets
        groups[group_id] = group
    pending_count = 0
    for producer_id, group_id, offsets in state.still_open:
        groups[group_id].add_pending_txn_offsets(producer_id, offsets)
        pending_count += len(offsets)
    log.info("loaded %d groups (%d offsets, %d pending in open transactions) from %d records",
             len(groups), sum(len(g.offsets) for g in groups.values()), pending_count,
             state.records)
    return LoadedGroups(groups, state.records, state.producer_epochs)


def _records_of(store: OffsetsStore, partition: int) -> Iterable[StoredRecord]:
    return store.read_records(partition)


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
