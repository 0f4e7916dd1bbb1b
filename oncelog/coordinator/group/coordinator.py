"""The group coordinator's async shell: classic consumer groups and committed offsets, kept
in ``__consumer_offsets`` through an ``OffsetsStore``.

The decisions live elsewhere and are synchronous: ``membership.py`` (JoinGroup, SyncGroup,
Heartbeat, LeaveGroup and the rebalance, ``rebalance.py``) and ``offsets.py`` (OffsetCommit,
TxnOffsetCommit and its markers, OffsetFetch, DeleteGroups, retention), both over the
groups of one ``GroupTable``. This module only wires them and does what needs asyncio: the
futures that hold a JoinGroup or SyncGroup answer until the group is ready (built from the
``AwaitJoin``/``AwaitSync``/``Deliver`` events of each decision), ``run()`` (the single
background loop that calls ``tick()`` at the next deadline), loading, the read-only admin
views and statistics. Tests drive it with a FakeClock and ``tick()``.

Which groups it answers for (Kafka's GroupCoordinator onElection / onResignation): on one
node every ``__consumer_offsets`` partition, loaded at start (``load``). In a cluster
(``start_partitioned``) only the partitions this broker leads: ``begin_loading`` when it
becomes leader (the partition's groups answer COORDINATOR_LOAD_IN_PROGRESS), then
``load_partition`` at the leader epoch (the coordinator epoch); ``unload_partition`` when
it stops leading (its groups are dropped, waiting JoinGroup/SyncGroup calls are answered
NOT_COORDINATOR, their timers stop). Every API first checks the group's partition
(``check``): NOT_COORDINATOR when not owned, COORDINATOR_LOAD_IN_PROGRESS while loading,
answered the way Kafka answers each API (SyncGroup: REBALANCE_IN_PROGRESS, Heartbeat: no
error, while loading).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

from oncelog.clock import Clock
from oncelog.config import BrokerConfig
from oncelog.coordinator.group.loader import load_groups
from oncelog.coordinator.group.membership import (
    AwaitJoin,
    AwaitSync,
    Decision,
    GroupMembership,
)
from oncelog.coordinator.group.metadata import GroupMetadata
from oncelog.coordinator.group.offsets import (
    OFFSETS_RETENTION_CHECK_INTERVAL_MS,
    PRODUCER_ID_EXPIRATION_MS,
    OffsetCommitEntry,
    OffsetManager,
)
from oncelog.coordinator.group.results import (
    CoordinatorStatistics,
    GroupDescription,
    JoinResult,
    ListedGroup,
    MemberDescription,
    SyncResult,
    TopicPartition,
)
from oncelog.coordinator.group.state import GroupState, parse_state
from oncelog.coordinator.group.store import OffsetsStore
from oncelog.coordinator.group.table import GroupTable
from oncelog.coordinator.store_errors import StoreWrite, translate_store_error
from oncelog.errors import ErrorCode, KafkaError

__all__ = [
    "OFFSETS_RETENTION_CHECK_INTERVAL_MS",
    "PRODUCER_ID_EXPIRATION_MS",
    "GroupCoordinator",
    "OffsetCommitEntry",
]

log = logging.getLogger(__name__)

# The background loop never sleeps longer than this, whatever the deadlines.
MAX_SLEEP_MS = 1_000

STABLE = GroupState.STABLE
DEAD = GroupState.DEAD

T = TypeVar("T")
_Key = tuple[str, str]  # group id, member id


class GroupCoordinator:
    def __init__(self, config: BrokerConfig, store: OffsetsStore, clock: Clock) -> None:
        self._clock = clock
        self._table = GroupTable(store, clock)
        self._membership = GroupMembership(config, self._table)
        self._offsets = OffsetManager(config, self._table)
        self._commit_timeout_ms = int(config["offsets.commit.timeout.ms"])
        self._join_waiters: dict[_Key, asyncio.Future[JoinResult]] = {}
        self._sync_waiters: dict[_Key, asyncio.Future[SyncResult]] = {}
        self._wakeup = asyncio.Event()
        self._records_loaded = 0
        # Answered at once, without waiting: the decisions themselves (each checks first
        # that the group's partition is owned here).
        self.start_txn_verification = self._offsets.start_txn_verification
        self.commit_txn_offsets = self._offsets.commit_txn_offsets
        self.fetch_offsets = self._offsets.fetch_offsets
        self.delete_groups = self._offsets.delete_groups
        self.delete_offsets = self._offsets.delete_offsets
        # The broker's callback once a COMMIT/ABORT marker is durably in an offsets partition
        # (a partition not owned here has no pending offsets: nothing happens).
        self.on_txn_marker = self._offsets.on_txn_marker

    def partition_for(self, group_id: str) -> int:
        """The ``__consumer_offsets`` partition of a group (Kafka's formula)."""
        return self._table.partition_for(group_id)

    def check(self, group_id: str) -> ErrorCode:
        """NONE if this coordinator answers for ``group_id``; else NOT_COORDINATOR or
        COORDINATOR_LOAD_IN_PROGRESS (see the module docstring)."""
        return self._table.check(group_id)

    @property
    def loading(self) -> bool:
        """Whether some owned partition is still loading (ListGroups says so)."""
        return bool(self._table.loading)

    # -- partitions: follow the leadership of __consumer_offsets ---------------------------

    def start_partitioned(self) -> None:
        """Cluster mode: own no partition until this broker leads it (``load_partition``);
        the groups of the others answer NOT_COORDINATOR."""
        self._table.partitioned = True

    def begin_loading(self, partition: int) -> None:
        """This broker now leads ``partition``: its groups answer
        COORDINATOR_LOAD_IN_PROGRESS until ``load_partition`` has run."""
        self._table.check_partition(partition)
        self._table.loading.add(partition)

    def owned_partitions(self) -> dict[int, int]:
        """The ``__consumer_offsets`` partitions loaded here, with their coordinator epochs."""
        return dict(self._table.owned)

    def load_partition(self, partition: int, coordinator_epoch: int) -> int:
        """Own ``partition`` at ``coordinator_epoch`` (its leader epoch): replay its groups
        and committed offsets (transactional ones still open stay pending until their
        marker). Groups it held before (an older epoch) are unloaded first. Returns the
        number of groups loaded."""
        table = self._table
        table.check_partition(partition)
        if partition in table.owned:
            self.unload_partition(partition)
        table.loading.add(partition)
        try:
            loaded = load_groups(table.store, self._clock, [partition])
        finally:
            table.loading.discard(partition)
        table.groups.update(loaded.groups)
        self._records_loaded += loaded.records
        self._offsets.add_loaded(loaded)
        table.owned[partition] = coordinator_epoch
        self._wakeup.set()  # loaded members' sessions have deadlines now
        log.info("loaded __consumer_offsets-%d at coordinator epoch %d: %d groups from %d "
                 "records", partition, coordinator_epoch, len(loaded.groups), loaded.records)
        return len(loaded.groups)

    def unload_partition(self, partition: int) -> int:
        """Another broker leads ``partition`` now (Kafka's removeGroupsForPartition and
        onGroupUnloaded): its groups are dropped (so their timers stop), and members
        waiting in JoinGroup/SyncGroup are answered NOT_COORDINATOR, as every later
        request for those groups is. Returns the number of groups dropped."""
        table = self._table
        table.loading.discard(partition)
        epoch = table.owned.pop(partition, None)
        gone = table.groups_of(partition)
        for group in gone:
            table.drop_group(group, f"unloaded: __consumer_offsets-{partition} is led "
                                    "elsewhere now")
        self._offsets.forget_partition(partition)
        table.appended_end.pop(partition, None)
        self._answer_waiters({g.group_id for g in gone}, ErrorCode.not_coordinator)
        log.info("unloaded __consumer_offsets-%d (coordinator epoch %s): %d groups dropped",
                 partition, epoch, len(gone))
        return len(gone)

    # -- offsets: the ISR wait before a commit is answered ----------------------------------

    def commit_offsets(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: Mapping[TopicPartition, OffsetCommitEntry],
    ) -> dict[TopicPartition, ErrorCode]:
        """An OffsetCommit applied at once, without waiting for the in-sync replicas: for a
        store whose appends need no acknowledgement (tests of the decisions). The API
        handler uses ``handle_commit_offsets``."""
        results, pending = self._offsets.prepare_offset_commit(
            group_id, generation_id, member_id, group_instance_id, offsets)
        if pending is not None:
            self._offsets.complete_offset_commit(pending, ErrorCode.none)
        return results

    async def handle_commit_offsets(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        offsets: Mapping[TopicPartition, OffsetCommitEntry],
    ) -> dict[TopicPartition, ErrorCode]:
        """OffsetCommit as Kafka's storeOffsets: checked and appended, its offsets pending
        (invisible to OffsetFetch) until the in-sync replicas of the group's offsets
        partition have them, then committed; reverted, and answered the translated error
        (COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR), if they do not within
        ``offsets.commit.timeout.ms``. On one node the wait returns at once."""
        results, pending = self._offsets.prepare_offset_commit(
            group_id, generation_id, member_id, group_instance_id, offsets)
        if pending is None:
            return results
        code = await self._wait_replicated(group_id, pending.partition, pending.end)
        self._offsets.complete_offset_commit(pending, code)
        if code is ErrorCode.none:
            return results
        return {tp: code if tp in pending.offsets else error for tp, error in results.items()}

    async def wait_offsets_replicated(self, group_id: str) -> ErrorCode:
        """After a successful TxnOffsetCommit, before answering it: wait until the in-sync
        replicas of the group's offsets partition have its records (Kafka's storeOffsets
        appends with acks=-1 and ``offsets.commit.timeout.ms``); the translated error
        (COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR) otherwise. Immediate on one node."""
        partition = self._table.partition_for(group_id)
        end = self._table.appended_end.get(partition)
        if end is None:
            return ErrorCode.none
        return await self._wait_replicated(group_id, partition, end)

    async def _wait_replicated(self, group_id: str, partition: int, end: int) -> ErrorCode:
        code = await self._table.store.wait_for_isr(partition, end, self._commit_timeout_ms)
        if code is ErrorCode.none:
            return code
        answer = translate_store_error(code, StoreWrite.OFFSET_COMMIT)
        log.warning("group %s: offset commit not acknowledged by the in-sync replicas of "
                    "__consumer_offsets-%d: %s; answering %s", group_id, partition,
                    code.name, answer.name)
        return answer

    # -- membership: decisions turned into futures -----------------------------------------

    async def join_group(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str,
        protocols: Sequence[tuple[str, bytes]],
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        client_id: str,
        client_host: str,
        require_known_member_id: bool,
    ) -> JoinResult:
        """Join (or rejoin) a group; waits until the join phase of the rebalance ends.

        ``rebalance_timeout_ms`` < 0 (JoinGroup v0) means "same as the session timeout".
        """
        if (error := self.check(group_id)) is not ErrorCode.none:
            return JoinResult(error, member_id)
        decision = self._membership.join(
            group_id, member_id, group_instance_id, protocol_type, protocols,
            session_timeout_ms, rebalance_timeout_ms, client_id, client_host,
            require_known_member_id,
        )
        return await self._answer(decision)

    async def sync_group(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: Mapping[str, bytes],
    ) -> SyncResult:
        """Followers wait for the leader's assignment; the leader's is stored, then shared.
        While the group's partition loads: REBALANCE_IN_PROGRESS (Kafka: the rebalance's
        state is lost, the member rejoins without looking for the coordinator again)."""
        if (error := self.check(group_id)) is not ErrorCode.none:
            if error is ErrorCode.coordinator_load_in_progress:
                error = ErrorCode.rebalance_in_progress
            return SyncResult(error)
        decision = self._membership.sync(group_id, generation_id, member_id, group_instance_id,
                                         protocol_type, protocol_name, assignments)
        return await self._answer(decision)

    def heartbeat(
        self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None
    ) -> ErrorCode:
        """While the group's partition loads: no error (Kafka answers blindly; the member
        learns of the lost rebalance state at its next JoinGroup/SyncGroup)."""
        error = self.check(group_id)
        if error is ErrorCode.coordinator_load_in_progress:
            return ErrorCode.none
        if error is not ErrorCode.none:
            return error
        return self._membership.heartbeat(group_id, generation_id, member_id,
                                          group_instance_id)

    def leave_group(
        self, group_id: str, members: Sequence[tuple[str, str | None]]
    ) -> list[ErrorCode]:
        """Per leaving (member id, group instance id), an error code.

        Raises KafkaError for errors of the whole request (invalid group id, dead group,
        not the coordinator, loading)."""
        if (error := self.check(group_id)) is not ErrorCode.none:
            raise KafkaError(error, f"group {group_id}")
        decision = self._membership.leave(group_id, members)
        self._apply(decision)
        assert decision.answer is not None
        return decision.answer

    async def _answer(self, decision: Decision[T]) -> T:
        """The decision's answer now, or (it said "wait") the one a later decision (or this
        one's own events) delivers to the waiter it created."""
        waiter = self._apply(decision)
        if decision.answer is not None:
            return decision.answer
        assert waiter is not None, "a decision without an answer must make its caller wait"
        result: T = await waiter
        return result

    def _apply(self, decision: Decision[Any]) -> asyncio.Future[Any] | None:
        """Carry out a decision's events in order (create waiters, answer waiters); returns
        the waiter its Await event created, if any."""
        created: asyncio.Future[Any] | None = None
        for event in decision.events:
            key = (event.group_id, event.member_id)
            if isinstance(event, AwaitJoin):
                _supersede(self._join_waiters.pop(key, None),
                           JoinResult(ErrorCode.rebalance_in_progress, event.member_id))
                created = self._join_waiters[key] = asyncio.get_running_loop().create_future()
            elif isinstance(event, AwaitSync):
                _supersede(self._sync_waiters.pop(key, None),
                           SyncResult(ErrorCode.rebalance_in_progress))
                created = self._sync_waiters[key] = asyncio.get_running_loop().create_future()
            elif isinstance(event.result, JoinResult):
                _supersede(self._join_waiters.pop(key, None), event.result)
            else:
                _supersede(self._sync_waiters.pop(key, None), event.result)
        if decision.reschedule:
            self._wakeup.set()
        return created

    # -- admin views -----------------------------------------------------------------------

    def list_groups(self, states_filter: Iterable[str] = ()) -> list[ListedGroup]:
        wanted = {parse_state(s) for s in states_filter}
        out = []
        for group in self._table.groups.values():
            if group.is_(DEAD) or (wanted and group.state not in wanted):
                continue
            out.append(ListedGroup(group.group_id, group.protocol_type or "", group.state.value))
        return out

    def describe_groups(self, group_ids: Iterable[str]) -> list[GroupDescription]:
        """Unknown groups are described as Dead with GROUP_ID_NOT_FOUND (the handler turns
        that into Kafka's older answer, Dead with no error, for versions before 6)."""
        out = []
        for group_id in group_ids:
            if (error := self.check(group_id)) is not ErrorCode.none:
                out.append(GroupDescription(group_id, error, "", "", "", ()))
                continue
            group = self._table.get(group_id)
            if group is None or group.is_(DEAD):
                out.append(GroupDescription(group_id, ErrorCode.group_id_not_found,
                                            DEAD.value, "", "", ()))
                continue
            out.append(_describe(group))
        return out

    def group(self, group_id: str) -> GroupMetadata | None:
        """The live metadata of a group (for tests and diagnostics; do not mutate)."""
        return self._table.get(group_id)

    def statistics(self) -> CoordinatorStatistics:
        groups = list(self._table.groups.values())
        return CoordinatorStatistics(
            groups=len(groups),
            groups_by_state=dict(Counter(g.state.value for g in groups)),
            members=sum(len(g.members) for g in groups),
            pending_members=sum(len(g.pending_members) for g in groups),
            committed_offsets=sum(len(g.offsets) for g in groups),
            pending_txn_offsets=sum(
                len(p) for g in groups for p in g.pending_txn_offsets.values()
            ),
            waiting_joins=sum(1 for f in self._join_waiters.values() if not f.done()),
            waiting_syncs=sum(1 for f in self._sync_waiters.values() if not f.done()),
            records_loaded=self._records_loaded,
        )

    # -- loading and background work -------------------------------------------------------

    def load(self) -> None:
        """One node: rebuild groups and offsets from every partition of the store (see
        ``loader.load_groups``) and own them all."""
        loaded = load_groups(self._table.store, self._clock)
        self._table.groups = loaded.groups
        self._table.owned = dict.fromkeys(range(self._table.store.num_partitions), 0)
        self._records_loaded = loaded.records
        self._offsets.load(loaded)

    def tick(self) -> int | None:
        """One sweep at the clock's current time: expire sessions and pending members, end
        join phases and sync waits whose time has come, expire old offsets. Returns the next
        monotonic deadline (None if nothing is scheduled)."""
        self._apply(self._membership.sweep())
        self._offsets.maybe_expire(self._clock.monotonic_ms())
        deadline = self._membership.next_deadline()
        cleanup = self._offsets.next_cleanup
        return cleanup if deadline is None else min(deadline, cleanup)

    async def run(self) -> None:
        """The background loop (one per coordinator, run in the broker's TaskGroup): one
        sweep at a time, sleeping until the next deadline or until a request schedules an
        earlier one. Cancelling it is safe; waiting JoinGroup/SyncGroup calls are answered
        with NOT_COORDINATOR so that clients look for the coordinator again."""
        try:
            while True:
                try:
                    deadline = self.tick()
                except Exception:
                    log.exception("group coordinator sweep failed; will retry")
                    deadline = None
                now = self._clock.monotonic_ms()
                sleep_ms = MAX_SLEEP_MS if deadline is None else deadline - now
                sleep_ms = max(0, min(sleep_ms, MAX_SLEEP_MS))
                self._wakeup.clear()
                try:
                    async with asyncio.timeout(sleep_ms / 1000):
                        await self._wakeup.wait()
                except TimeoutError:
                    pass
        finally:
            self.close()

    def close(self) -> None:
        """Answer every waiting JoinGroup/SyncGroup with NOT_COORDINATOR (shutting down)."""
        self._answer_waiters(None, ErrorCode.not_coordinator)

    def _answer_waiters(self, group_ids: set[str] | None, error: ErrorCode) -> None:
        """Answer the waiting JoinGroup/SyncGroup calls of ``group_ids`` (None: of every
        group) with ``error``."""
        for key in [k for k in self._join_waiters if group_ids is None or k[0] in group_ids]:
            _supersede(self._join_waiters.pop(key), JoinResult(error, key[1]))
        for key in [k for k in self._sync_waiters if group_ids is None or k[0] in group_ids]:
            _supersede(self._sync_waiters.pop(key), SyncResult(error))


def _supersede(waiter: asyncio.Future[T] | None, result: T) -> None:
    """Answer a waiter unless there is none or it is already answered (or cancelled)."""
    if waiter is not None and not waiter.done():
        waiter.set_result(result)


def _describe(group: GroupMetadata) -> GroupDescription:
    stable = group.is_(STABLE) and group.protocol_name is not None
    members = tuple(
        MemberDescription(
            member_id=m.member_id,
            group_instance_id=m.group_instance_id,
            client_id=m.client_id,
            client_host=m.client_host,
            metadata=m.metadata_for(group.protocol_name)
            if stable and group.protocol_name is not None else b"",
            assignment=m.assignment if stable else b"",
        )
        for m in group.members.values()
    )
    return GroupDescription(
        group_id=group.group_id,
        error=ErrorCode.none,
        state=group.state.value,
        protocol_type=group.protocol_type or "",
        protocol=(group.protocol_name or "") if stable else "",
        members=members,
    )
