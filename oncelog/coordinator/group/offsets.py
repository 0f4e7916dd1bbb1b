"""Committed offsets of consumer groups: OffsetCommit, TxnOffsetCommit, OffsetFetch,
DeleteGroups, and offset retention (Kafka's GroupMetadataManager, offsets half).

Durability follows "decide, append, then apply": a commit changes the in-memory offsets
only after the store's append has returned.

Offsets committed inside a transaction (TxnOffsetCommit, KIP-98/KIP-447) are appended as a
transactional batch of the producer and kept as that producer's pending offsets of the
group; OffsetFetch does not see them (with require_stable it answers UNSTABLE_OFFSET_COMMIT
for their partitions). The broker calls ``on_txn_marker`` once the transaction's COMMIT or
ABORT marker is durably in the offsets partition: COMMIT applies them, ABORT drops them.
Whether the producer's transaction holds the offsets partition is checked by the API
handler with the transaction coordinator before ``commit_txn_offsets`` is called, between
``start_txn_verification`` (which takes the offsets partition's KIP-890 verification guard)
and the append, which presents that guard: a COMMIT/ABORT marker written to the partition
meanwhile makes the append fail with INVALID_TXN_STATE instead of opening a transaction no
marker would end. This manager itself fences epochs older than the newest it has seen for a
producer id, as the offsets partition's producer state does in Kafka.

Synchronous and sans-IO apart from the store's append; time comes from the table's clock.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from oncelog.config import BrokerConfig
from oncelog.coordinator.group.loader import LoadedGroups
from oncelog.coordinator.group.metadata import CommittedOffset, GroupMetadata, MemberMetadata
from oncelog.coordinator.group.results import (
    NO_LEADER_EPOCH,
    NO_OFFSET,
    UNKNOWN_MEMBER_ID,
    OffsetFetchEntry,
    TopicPartition,
)
from oncelog.coordinator.group.state import GroupState
from oncelog.coordinator.group.table import GroupTable
from oncelog.coordinator.store_errors import StoreWrite, translate_store_error
from oncelog.errors import ErrorCode, KafkaError
from oncelog.storage.verification import SENTINEL, VerificationGuard

log = logging.getLogger(__name__)

# The protocol type of groups whose members subscribe to topics (KIP-496's check).
CONSUMER_PROTOCOL_TYPE = "consumer"
# Kafka's offsets.retention.check.interval.ms default.
OFFSETS_RETENTION_CHECK_INTERVAL_MS = 600_000
# Kafka's producer.id.expiration.ms default (how long an idle producer's epoch is remembered).
PRODUCER_ID_EXPIRATION_MS = 86_400_000

EMPTY = GroupState.EMPTY
COMPLETING = GroupState.COMPLETING_REBALANCE
DEAD = GroupState.DEAD

OffsetCommitEntry = tuple[int, int, str | None]  # offset, leader epoch, metadata


@dataclass(frozen=True, slots=True)
class PendingOffsetCommit:
    """An OffsetCommit appended to ``partition`` up to ``end``, its offsets prepared in the
    group (invisible to OffsetFetch) until the in-sync replicas have them."""

    group: GroupMetadata
    partition: int
    end: int
    offsets: dict[TopicPartition, CommittedOffset]


class OffsetManager:
    def __init__(self, config: BrokerConfig, table: GroupTable) -> None:
        self._table = table
        self._clock = table.clock
        self._max_metadata_bytes = int(config["offset.metadata.max.bytes"])
        self._retention_ms = int(config["offsets.retention.minutes"]) * 60_000
        self._retention_check_ms = _optional_int(
            config, "offsets.retention.check.interval.ms", OFFSETS_RETENTION_CHECK_INTERVAL_MS
        )
        self._producer_expiration_ms = _optional_int(
            config, "producer.id.expiration.ms", PRODUCER_ID_EXPIRATION_MS
        )
        self.next_cleanup = self._clock.monotonic_ms() + self._retention_check_ms
        # Order of the records this coordinator appended (continues the replay's order).
        self._log_order = 0
        # Newest epoch seen per producer id, and when (wall ms): older epochs are fenced.
        self._producer_epochs: dict[int, tuple[int, int]] = {}
        # (offsets partition, producer id) -> groups holding that producer's pending offsets.
        self._txn_groups: dict[tuple[int, int], set[str]] = {}

    def load(self, loaded: LoadedGroups) -> None:
        """Take over the offsets side of a replay of every partition (the table holds the
        loaded groups)."""
        self._log_order = 0
        self._producer_epochs = {}
        self._txn_groups = {}
        self.add_loaded(loaded)

    def add_loaded(self, loaded: LoadedGroups) -> None:
        """Take over the offsets side of a replay of some partitions, whose groups the
        table now holds: their pending transactional offsets wait for markers here, the
        producer epochs seen are merged, and later commits are ordered after every replayed
        record (``log_order`` only compares records of one group, so of one partition)."""
        self._log_order = max(self._log_order, loaded.records)
        now_wall = self._clock.now_ms()
        for pid, epoch in loaded.producer_epochs.items():
            known = self._producer_epochs.get(pid)
            if known is None or known[0] < epoch:
                self._producer_epochs[pid] = (epoch, now_wall)
        for group_id in loaded.groups:
            group = self._table.groups[group_id]
            partition = self._table.partition_for(group_id)
            for producer_id in group.pending_txn_offsets:
                self._txn_groups.setdefault((partition, producer_id), set()).add(group_id)

    def forget_partition(self, partition: int) -> None:
        """The partition was unloaded: no marker for it completes anything here now."""
        for key in [k for k in self._txn_groups if k[0] == partition]:
            del self._txn_groups[key]

    # -- OffsetCommit ----------------------------------------------------------------------

    def prepare_offset_commit(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: Mapping[TopicPartition, OffsetCommitEntry],
    ) -> tuple[dict[TopicPartition, ErrorCode], PendingOffsetCommit | None]:
        """Check and append an OffsetCommit; its offsets stay prepared (invisible to
        OffsetFetch) until ``complete_offset_commit`` (Kafka's storeOffsets: prepared
        before the acks=-1 append, applied in its callback). Generation -1 with no member
        is a standalone ("simple consumer") commit, allowed while the group has no
        members."""

        def every(code: ErrorCode) -> dict[TopicPartition, ErrorCode]:
            return {tp: code for tp in offsets}

        if (error := self._table.check(group_id)) is not ErrorCode.none:
            return every(error), None
        group, created, error = self._group_to_commit_to(group_id, generation_id)
        if group is None:
            return every(error), None
        member: MemberMetadata | None = None
        if not (generation_id < 0 and group.is_(EMPTY)):
            if group.static_member_fenced(member_id, group_instance_id):
                return every(ErrorCode.fenced_instance_id), None
            member = group.members.get(member_id)
            if member is None:
                return every(ErrorCode.unknown_member_id), None
            if generation_id != group.generation_id:
                return every(ErrorCode.illegal_generation), None
            if group.is_(COMPLETING):
                return every(ErrorCode.rebalance_in_progress), None
            self._table.touch(member)

        results: dict[TopicPartition, ErrorCode] = {}
        accepted = self._accept_offsets(offsets, results)
        if not accepted:
            return results, None
        records = [self._table.offset_record(group_id, tp, co) for tp, co in accepted.items()]
        try:
            end = self._table.append(group_id, records)
        except KafkaError as exc:
            error = translate_store_error(exc.code, StoreWrite.OFFSET_COMMIT)
            log.warning("group %s: offset commit failed: %s", group_id, exc)
            results.update({tp: error for tp in accepted})
            return results, None
        self._log_order += 1
        if created:
            self._table.groups[group_id] = group
        group.prepare_offset_commit(accepted)
        results.update({tp: ErrorCode.none for tp in accepted})
        return results, PendingOffsetCommit(group, self._table.partition_for(group_id), end,
                                            accepted)

    def complete_offset_commit(self, pending: PendingOffsetCommit, error: ErrorCode) -> None:
        """The in-sync replicas have ``pending`` (``error`` NONE: its offsets become the
        committed ones) or will not (they are dropped). Nothing for a group gone meanwhile."""
        group = pending.group
        if group.is_(DEAD) or self._table.get(group.group_id) is not group:
            return
        group.complete_offset_commit(pending.offsets, error is ErrorCode.none)
        if error is not ErrorCode.none:
            log.warning("group %s: offset commit of %s not acknowledged by the in-sync "
                        "replicas of __consumer_offsets-%d (%s): reverted", group.group_id,
                        ", ".join(f"{t}-{p}" for t, p in pending.offsets), pending.partition,
                        error.name)

    # -- TxnOffsetCommit and markers -------------------------------------------------------

    def start_txn_verification(
        self, group_id: str, producer_id: int, producer_epoch: int
    ) -> tuple[ErrorCode, VerificationGuard]:
        """Before the transaction coordinator is asked whether the producer's transaction
        holds the group's offsets partition: NONE and the partition's verification guard
        for the append (Kafka's GroupCoordinator.handleTxnCommitOffsets: the group's status
        first, then ``maybeStartTransactionVerificationForPartition``), or the error every
        partition of the request gets."""
        if (error := self._table.check(group_id)) is not ErrorCode.none:
            return error, SENTINEL
        if producer_id < 0 or producer_epoch < 0:
            return ErrorCode.invalid_producer_id_mapping, SENTINEL
        partition = self._table.partition_for(group_id)
        try:
            guard = self._table.store.maybe_start_transaction_verification(
                partition, producer_id, producer_epoch)
        except KafkaError as exc:
            log.info("group %s: TxnOffsetCommit of producer id %d epoch %d refused by "
                     "__consumer_offsets-%d: %s", group_id, producer_id, producer_epoch,
                     partition, exc)
            return translate_store_error(exc.code, StoreWrite.OFFSET_COMMIT), SENTINEL
        return ErrorCode.none, guard

    def commit_txn_offsets(
        self,
        transactional_id: str,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: Mapping[TopicPartition, OffsetCommitEntry],
        verification_guard: VerificationGuard = SENTINEL,
    ) -> dict[TopicPartition, ErrorCode]:
        """Commit offsets inside the producer's transaction: appended durably as a
        transactional batch (presenting ``verification_guard``, from
        ``start_txn_verification``), then held as pending until ``on_txn_marker``.

        KIP-447: a request naming a generation, member or instance (TxnOffsetCommit v3+) is
        checked against the group like an OffsetCommit (FENCED_INSTANCE_ID,
        UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION); one without (v0-2, or a producer committing
        for a standalone group) is accepted whatever the group's state. The caller has
        already checked with the transaction coordinator that the transaction holds the
        group's offsets partition."""

        def every(code: ErrorCode) -> dict[TopicPartition, ErrorCode]:
            return {tp: code for tp in offsets}

        if not group_id:
            return every(ErrorCode.invalid_group_id)
        if (error := self._table.check(group_id)) is not ErrorCode.none:
            return every(error)
        if producer_id < 0 or producer_epoch < 0:
            return every(ErrorCode.invalid_producer_id_mapping)
        known = self._producer_epochs.get(producer_id)
        if known is not None and producer_epoch < known[0]:
            log.info("group %s: TxnOffsetCommit of %r fenced: producer id %d epoch %d < %d",
                     group_id, transactional_id, producer_id, producer_epoch, known[0])
            return every(ErrorCode.invalid_producer_epoch)
        group, created, error = self._group_to_commit_to(group_id, generation_id)
        if group is None:
            return every(error)
        error = _check_txn_commit_member(group, generation_id, member_id, group_instance_id)
        if error is not ErrorCode.none:
            return every(error)

        results: dict[TopicPartition, ErrorCode] = {}
        accepted = self._accept_offsets(offsets, results)
        if not accepted:
            return results
        partition = self._table.partition_for(group_id)
        records = [self._table.offset_record(group_id, tp, co) for tp, co in accepted.items()]
        try:
            self._table.appended(partition, self._table.store.append_transactional(
                partition, records, producer_id, producer_epoch, verification_guard
            ))
        except KafkaError as exc:
            error = translate_store_error(exc.code, StoreWrite.OFFSET_COMMIT)
            log.warning("group %s: transactional offset commit of %r failed: %s",
                        group_id, transactional_id, exc)
            results.update({tp: error for tp in accepted})
            return results
        self._log_order += 1
        self._see_producer(producer_id, producer_epoch)
        if created:
            self._table.groups[group_id] = group
        group.add_pending_txn_offsets(producer_id, accepted)
        self._txn_groups.setdefault((partition, producer_id), set()).add(group_id)
        log.debug("group %s: %d offsets pending in the transaction of %r (producer id %d)",
                  group_id, len(accepted), transactional_id, producer_id)
        results.update({tp: ErrorCode.none for tp in accepted})
        return results

    def _group_to_commit_to(
        self, group_id: str, generation_id: int
    ) -> tuple[GroupMetadata | None, bool, ErrorCode]:
        """The group a commit goes to, and whether it is new (a standalone commit to an
        unknown group creates it, added to the table only once the append succeeds); or
        None and the error for every partition."""
        group = self._table.get(group_id)
        if group is None:
            if generation_id >= 0:
                return None, False, ErrorCode.illegal_generation
            return self._table.new_group(group_id), True, ErrorCode.none
        if group.is_(DEAD):
            return None, False, ErrorCode.coordinator_not_available
        return group, False, ErrorCode.none

    def _accept_offsets(
        self,
        offsets: Mapping[TopicPartition, OffsetCommitEntry],
        results: dict[TopicPartition, ErrorCode],
    ) -> dict[TopicPartition, CommittedOffset]:
        """The offsets to write (stamped now, in the next log order); the refused ones get
        their error in ``results``."""
        now_wall = self._clock.now_ms()
        accepted: dict[TopicPartition, CommittedOffset] = {}
        for tp, (offset, leader_epoch, metadata) in offsets.items():
            text = metadata or ""
            if len(text.encode("utf-8")) > self._max_metadata_bytes:
                results[tp] = ErrorCode.offset_metadata_too_large
                continue
            accepted[tp] = CommittedOffset(offset, leader_epoch, text, now_wall,
                                           log_order=self._log_order)
        return accepted

    def on_txn_marker(
        self,
        offsets_partition: int,
        producer_id: int,
        commit: bool,
        producer_epoch: int = -1,
    ) -> None:
        """A COMMIT (or ABORT) marker of ``producer_id`` is durably in ``offsets_partition``:
        its pending offsets of every group of that partition become the committed offsets
        (or are dropped). Markers of producers without pending offsets change nothing but
        the producer's newest epoch (when given)."""
        if producer_epoch >= 0:
            self._see_producer(producer_id, producer_epoch)
        self._log_order += 1
        group_ids = self._txn_groups.pop((offsets_partition, producer_id), set())
        for group_id in sorted(group_ids):
            group = self._table.get(group_id)
            if group is None or group.is_(DEAD):
                continue
            count = group.complete_txn_offsets(producer_id, commit)
            if count:
                log.info("group %s: %s %d transactional offsets of producer id %d",
                         group_id, "committed" if commit else "aborted", count, producer_id)

    def _see_producer(self, producer_id: int, producer_epoch: int) -> None:
        known = self._producer_epochs.get(producer_id)
        epoch = producer_epoch if known is None else max(known[0], producer_epoch)
        self._producer_epochs[producer_id] = (epoch, self._clock.now_ms())

    # -- OffsetFetch -----------------------------------------------------------------------

    def fetch_offsets(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition] | None,
        require_stable: bool = False,
    ) -> dict[TopicPartition, OffsetFetchEntry]:
        """Committed offsets; ``None`` asks for every partition the group has committed.
        A partition with no commit answers offset -1, epoch -1, metadata "", no error.
        Raises KafkaError (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS) for the group."""
        if (error := self._table.check(group_id)) is not ErrorCode.none:
            raise KafkaError(error, f"group {group_id}")
        group = self._table.get(group_id)
        if group is None or group.is_(DEAD):
            if partitions is None:
                return {}
            return {tp: _no_offset() for tp in partitions}
        wanted = list(group.offsets) if partitions is None else list(partitions)
        result: dict[TopicPartition, OffsetFetchEntry] = {}
        for tp in wanted:
            if require_stable and group.has_pending_txn_offsets(tp):
                result[tp] = OffsetFetchEntry(NO_OFFSET, NO_LEADER_EPOCH, "",
                                              ErrorCode.unstable_offset_commit)
                continue
            committed = group.offsets.get(tp)
            if committed is None:
                result[tp] = _no_offset()
            else:
                result[tp] = OffsetFetchEntry(committed.offset, committed.leader_epoch,
                                              committed.metadata, ErrorCode.none)
        return result

    # -- DeleteGroups ----------------------------------------------------------------------

    def delete_groups(self, group_ids: Iterable[str]) -> dict[str, ErrorCode]:
        """Delete groups without members: tombstones for their offsets and metadata."""
        results: dict[str, ErrorCode] = {}
        for group_id in group_ids:
            if (error := self._table.check(group_id)) is not ErrorCode.none:
                results[group_id] = error
                continue
            group = self._table.get(group_id)
            if group is None or group.is_(DEAD):
                results[group_id] = ErrorCode.group_id_not_found
                continue
            if not group.is_(EMPTY) or group.members:
                results[group_id] = ErrorCode.non_empty_group
                continue
            try:
                self._table.append(group_id, self._table.tombstones(group, list(group.offsets),
                                                                    True))
            except KafkaError as exc:
                results[group_id] = translate_store_error(exc.code, StoreWrite.GROUP_METADATA)
                continue
            self._table.drop_group(group, "deleted")
            results[group_id] = ErrorCode.none
        return results

    # -- OffsetDelete (KIP-496) -------------------------------------------------------------

    def delete_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition]
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        """Delete committed offsets of a group (OffsetDelete): the group-level error and one
        per partition. Kafka's rules: an unknown or dead group is GROUP_ID_NOT_FOUND; a group
        with members that is not a consumer group is NON_EMPTY_GROUP; a consumer group with
        members keeps the offsets of the topics its members subscribe to
        (GROUP_SUBSCRIBED_TO_TOPIC) and loses the others. Tombstones go to the offsets
        partition before the offsets leave memory."""
        if (error := self._table.check(group_id)) is not ErrorCode.none:
            return error, {}
        wanted = list(dict.fromkeys(partitions))
        group = self._table.get(group_id)
        if group is None or group.is_(DEAD):
            return ErrorCode.group_id_not_found, {}
        subscribed: set[str] = set()
        if not group.is_(EMPTY):
            if group.protocol_type != CONSUMER_PROTOCOL_TYPE:
                return ErrorCode.non_empty_group, {}
            subscribed = _subscribed_topics(group)
        results = {
            tp: ErrorCode.group_subscribed_to_topic if tp[0] in subscribed else ErrorCode.none
            for tp in wanted
        }
        doomed = [tp for tp in wanted if tp[0] not in subscribed and tp in group.offsets]
        if doomed:
            try:
                self._table.append(group_id, self._table.tombstones(group, doomed, False))
            except KafkaError as exc:
                error = translate_store_error(exc.code, StoreWrite.OFFSET_COMMIT)
                log.warning("group %s: offset delete failed: %s", group_id, exc)
                return error, {}
            self._log_order += 1
            for tp in doomed:
                del group.offsets[tp]
            log.info("group %s: deleted the committed offsets of %s", group_id,
                     ", ".join(f"{t}-{p}" for t, p in doomed))
        return ErrorCode.none, results

    # -- retention -------------------------------------------------------------------------

    def maybe_expire(self, now: int) -> None:
        """At each ``offsets.retention.check.interval.ms`` (monotonic ``now``): expire old
        offsets and forget idle producers."""
        if now >= self.next_cleanup:
            self.next_cleanup = now + self._retention_check_ms
            self._expire_offsets()
            self._expire_producers()

    def _expire_offsets(self) -> None:
        """Kafka's offset retention: offsets of a group without members expire
        ``offsets.retention.minutes`` after the group became empty (consumer groups) or after
        the commit (standalone groups); an empty group without offsets is then removed."""
        now_wall = self._clock.now_ms()
        for group in list(self._table.groups.values()):
            if not group.is_(EMPTY) or group.members or group.pending_members:
                continue
            # An offset a transaction is about to replace stays until that transaction ends.
            expired = [
                tp for tp, co in group.offsets.items()
                if self._expires_at(group, co) <= now_wall
                and not group.has_pending_txn_offsets(tp)
            ]
            remove_group = (len(expired) == len(group.offsets) and not group.pending_txn_offsets
                            and not group.pending_offset_commits)
            if not expired and not remove_group:
                continue
            try:
                self._table.append(group.group_id,
                                   self._table.tombstones(group, expired, remove_group))
            except KafkaError as exc:
                log.warning("group %s: offset expiry failed: %s", group.group_id, exc)
                continue
            for tp in expired:
                del group.offsets[tp]
            log.info("group %s: expired %d offsets", group.group_id, len(expired))
            if remove_group:
                self._table.drop_group(group, "removed: empty and without offsets")

    def _expire_producers(self) -> None:
        """Forget the epochs of producers idle for ``producer.id.expiration.ms`` that hold
        no pending offsets (Kafka expires producer state of a partition the same way)."""
        cutoff = self._clock.now_ms() - self._producer_expiration_ms
        busy = {pid for _, pid in self._txn_groups}
        for pid, (_, seen) in list(self._producer_epochs.items()):
            if seen <= cutoff and pid not in busy:
                del self._producer_epochs[pid]

    def _expires_at(self, group: GroupMetadata, co: CommittedOffset) -> int:
        if co.expire_timestamp >= 0:
            return co.expire_timestamp
        if group.protocol_type and group.state_timestamp >= 0:
            return group.state_timestamp + self._retention_ms
        return co.commit_timestamp + self._retention_ms


def _check_txn_commit_member(
    group: GroupMetadata, generation_id: int, member_id: str, group_instance_id: str | None
) -> ErrorCode:
    """KIP-447's checks of a TxnOffsetCommit against the group (Kafka's
    validateOffsetCommit for transactional commits)."""
    if generation_id < 0 and group.is_(EMPTY):
        return ErrorCode.none
    if generation_id >= 0 or member_id != UNKNOWN_MEMBER_ID or group_instance_id is not None:
        if group.static_member_fenced(member_id, group_instance_id):
            return ErrorCode.fenced_instance_id
        if member_id not in group.members:
            return ErrorCode.unknown_member_id
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation
    # No identity (TxnOffsetCommit v0-2): accepted even while the group has members.
    return ErrorCode.none


def _subscribed_topics(group: GroupMetadata) -> set[str]:
    """The topics the members of a consumer group subscribe to, read from each member's
    metadata for the group's protocol (ConsumerProtocolSubscription: int16 version, then an
    array of topic names). A member whose metadata cannot be read counts as subscribing to
    nothing."""
    topics: set[str] = set()
    if group.protocol_name is None:
        return topics
    for member in group.members.values():
        try:
            topics.update(_subscription_topics(member.metadata_for(group.protocol_name)))
        except (struct.error, UnicodeDecodeError, ValueError, KeyError):
            log.warning("group %s: member %s has unreadable subscription metadata",
                        group.group_id, member.member_id)
    return topics


def _subscription_topics(data: bytes) -> list[str]:
    """The topic names of a ConsumerProtocolSubscription (every version starts with them,
    in the non-flexible encoding)."""
    (count,) = struct.unpack_from(">i", data, 2)
    pos, names = 6, []
    for _ in range(max(count, 0)):
        (size,) = struct.unpack_from(">h", data, pos)
        pos += 2
        if size < 0 or pos + size > len(data):
            raise ValueError("truncated topic name")
        names.append(data[pos:pos + size].decode("utf-8"))
        pos += size
    return names


def _optional_int(config: BrokerConfig, name: str, default: int) -> int:
    """A setting that this broker's configuration may not define (yet)."""
    try:
        return int(config[name])
    except KeyError:
        return default


def _no_offset() -> OffsetFetchEntry:
    return OffsetFetchEntry(NO_OFFSET, NO_LEADER_EPOCH, "", ErrorCode.none)
