"""Classic consumer group membership: JoinGroup, SyncGroup, Heartbeat, LeaveGroup.

``GroupMember.run()`` is a task that keeps the member in the group: it finds the group
coordinator, joins (the leader runs the assignor over every member's subscription), syncs,
then heartbeats every ``heartbeat.interval.ms`` until the coordinator asks for a rebalance,
and joins again. The consumer learns the outcome through two callbacks:
``on_revoke(partitions)`` before partitions are given up (so their offsets can be committed)
and ``on_assign(partitions)`` once the new assignment is known. An unexpected exception (a
bug, an undecodable assignment) or an authorization refusal (GROUP_AUTHORIZATION_FAILED, as
Kafka's consumer throws it from poll) goes to ``on_error`` (the consumer's poll raises it
once) and the member rejoins after a backoff; only a FatalError ends the task.

Rebalance protocol: when every configured assignor is cooperative, the member keeps its
partitions while rejoining and revokes only those the new assignment no longer holds, then
rejoins once more so they can move (KIP-429). Otherwise (e.g. with ``range``) it is eager:
everything is revoked before joining.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from oncelog.client.aio.client import COORDINATOR_GROUP, KafkaClient
from oncelog.client.assignors import (
    ASSIGNORS,
    Assignor,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from oncelog.client.errors import (
    FatalError,
    KafkaClientError,
    RetriableError,
    error_for,
    unexpected_error,
)
from oncelog.client.types import ConsumerGroupMetadata, TopicPartition
from oncelog.client.wire import nested, request
from oncelog.errors import ErrorCode
from oncelog.protocol import versions as api

logger = logging.getLogger(__name__)

__all__ = ["GroupMember"]

PartitionsCallback = Callable[[list[TopicPartition]], Awaitable[None]]
LostCallback = Callable[[list[TopicPartition]], None]
ErrorCallback = Callable[[KafkaClientError], None]

_REJOIN = frozenset(
    {ErrorCode.rebalance_in_progress, ErrorCode.illegal_generation, ErrorCode.unknown_member_id}
)
# Refusals the application must hear of (poll raises them); the member keeps trying, so an
# ACL granted meanwhile lets it in.
_AUTHORIZATION = frozenset({ErrorCode.group_authorization_failed,
                            ErrorCode.topic_authorization_failed})
_COORDINATOR_MOVED = frozenset(
    {
        ErrorCode.not_coordinator,
        ErrorCode.coordinator_not_available,
        ErrorCode.network_exception,
        ErrorCode.request_timed_out,
    }
)


class _Rejoin(Exception):
    pass


class GroupMember:
    def __init__(
        self,
        client: KafkaClient,
        group_id: str,
        *,
        topics: Sequence[str],
        on_assign: PartitionsCallback,
        on_revoke: PartitionsCallback,
        on_error: ErrorCallback,
        on_lost: LostCallback | None = None,
    ) -> None:
        cfg = client.config
        self.client = client
        self.group_id = group_id
        self.topics = sorted(set(topics))
        self.group_instance_id: str | None = cfg["group.instance.id"]
        self.session_timeout_ms: int = cfg["session.timeout.ms"]
        self.rebalance_timeout_ms: int = cfg["max.poll.interval.ms"]
        self.heartbeat_interval_ms: int = cfg["heartbeat.interval.ms"]
        self.assignors: list[Assignor] = [
            ASSIGNORS[name]() for name in cfg["partition.assignment.strategy"]
        ]
        self.cooperative = all(a.cooperative for a in self.assignors)
        self.member_id = ""
        self.generation = -1
        self.protocol: str | None = None
        self.assignment: list[TopicPartition] = []
        self._on_assign = on_assign
        self._on_revoke = on_revoke
        self._on_error = on_error
        self._on_lost = on_lost
        # The identity of the last generation this member completed (its group metadata for
        # TxnOffsetCommit), kept after the membership is lost until a new generation starts.
        self._identity: tuple[str, int] = ("", -1)
        self._coordinator: int | None = None
        self._rejoin_needed = asyncio.Event()
        self._rejoin_needed.set()
        self.joined = asyncio.Event()  # set while the member has a current assignment
        self._stopping = False

    def metadata(self) -> ConsumerGroupMetadata:
        """The group metadata a transactional producer commits offsets with: the last
        generation this member completed. After the coordinator dropped the member it is
        still that (stale) generation, so the coordinator refuses the offsets of records
        read in it (UNKNOWN_MEMBER_ID / ILLEGAL_GENERATION, abortable) rather than taking
        them as a commit without a member (generation -1), which it must accept (KIP-447)."""
        member_id, generation = self._identity
        return ConsumerGroupMetadata(self.group_id, generation, member_id, self.group_instance_id)

    def _lose_membership(self, member_id: str) -> None:
        """The coordinator no longer knows this member or its generation: what it owned is
        lost, dropped at once without a revoke callback or a commit (Kafka's onJoinPrepare
        after the heartbeat reset the generation: onPartitionsLost), so the consumer returns
        no more records of partitions another member may own by now."""
        self.member_id, self.generation = member_id, -1
        lost, self.assignment = self.assignment, []
        self.joined.clear()
        if lost:
            logger.info("group %s: membership lost; partitions %s lost", self.group_id,
                        [str(tp) for tp in lost])
            if self._on_lost is not None:
                self._on_lost(lost)

    def request_rejoin(self) -> None:
        self._rejoin_needed.set()
        self.joined.clear()

    def update_topics(self, topics: Sequence[str]) -> None:
        wanted = sorted(set(topics))
        if wanted != self.topics:
            self.topics = wanted
            self.request_rejoin()

    # ---------------------------------------------------------------- main loop

    async def run(self) -> None:
        attempt = 0
        while not self._stopping:
            try:
                if self._rejoin_needed.is_set():
                    await self._join_and_sync()
                    attempt = 0
                await self._heartbeat_until_rejoin()
            except asyncio.CancelledError:
                raise
            except FatalError:
                raise
            except (_Rejoin, KafkaClientError) as exc:
                if isinstance(exc, KafkaClientError) and exc.code in _COORDINATOR_MOVED | {
                    ErrorCode.coordinator_load_in_progress
                }:
                    # The coordinator moved (or its broker is gone): find it again and go on
                    # in the same generation, as Kafka's AbstractCoordinator does
                    # (markCoordinatorUnknown, no rejoin). The new coordinator loaded the
                    # group from __consumer_offsets; if it does not know this member, the
                    # next heartbeat says so and the member rejoins then. A join that was
                    # under way is still wanted (the flag stays set) and is sent again.
                    self._forget_coordinator()
                    logger.info(
                        "group %s member %s generation %d: %s; finding the coordinator again",
                        self.group_id, self.member_id or "-", self.generation, exc,
                    )  # fmt: skip
                else:
                    logger.info(
                        "group %s member %s: %s; rejoining",
                        self.group_id, self.member_id or "-", exc,
                    )  # fmt: skip
                    if isinstance(exc, KafkaClientError) and exc.code in _AUTHORIZATION:
                        self._on_error(exc)  # poll raises it, as Kafka's consumer does
                    self.request_rejoin()
                await asyncio.sleep(self.client.backoff_s(attempt))
                attempt += 1
            except Exception as exc:  # a bug or an unexpected response: reported, then rejoin
                logger.exception(
                    "group %s member %s failed; rejoining", self.group_id, self.member_id or "-"
                )
                self._on_error(unexpected_error(f"consumer group {self.group_id}", exc))
                self.request_rejoin()
                await asyncio.sleep(self.client.backoff_s(attempt))
                attempt += 1

    def _forget_coordinator(self) -> None:
        self.client.invalidate_coordinator(COORDINATOR_GROUP, self.group_id)
        self._coordinator = None

    async def _coordinator_node(self) -> int:
        if self._coordinator is None:
            self._coordinator = await self.client.find_coordinator(COORDINATOR_GROUP, self.group_id)
        return self._coordinator

    async def _call(self, api_key: int, build: Callable[[int], Any]) -> Any:
        node = await self._coordinator_node()
        try:
            return await self.client.call(node, api_key, build)
        except RetriableError:
            self._forget_coordinator()
            raise

    async def _join_and_sync(self) -> None:
        self.joined.clear()
        if not self.cooperative and self.assignment:
            revoked, self.assignment = self.assignment, []
            await self._on_revoke(revoked)
        response = await self._join()
        assignment_bytes = await self._sync(response)
        new = decode_assignment(assignment_bytes)
        old = set(self.assignment)
        revoked = [tp for tp in self.assignment if tp not in set(new)]
        self._rejoin_needed.clear()
        if revoked:
            await self._on_revoke(revoked)
        self.assignment = sorted(new)
        self._identity = (self.member_id, self.generation)
        added = [tp for tp in self.assignment if tp not in old]
        logger.info(
            "group %s member %s generation %d: assigned %s",
            self.group_id,
            self.member_id,
            self.generation,
            [str(tp) for tp in self.assignment],
        )
        await self._on_assign(added if self.cooperative else list(self.assignment))
        self.joined.set()
        if self.cooperative and revoked:
            self.request_rejoin()  # let the revoked partitions move to their new owner

    async def _join(self) -> Any:
        subscription = encode_subscription(
            self.topics, owned=self.assignment, generation=self.generation
        )
        for _ in range(3):

            def build(version: int) -> Any:
                return request(
                    api.JOIN_GROUP,
                    version,
                    group_id=self.group_id,
                    session_timeout=self.session_timeout_ms,
                    rebalance_timeout=self.rebalance_timeout_ms,
                    member_id=self.member_id,
                    group_instance_id=self.group_instance_id,
                    protocol_type="consumer",
                    protocols=tuple(
                        nested(
                            api.JOIN_GROUP,
                            version,
                            "JoinGroupRequestProtocol",
                            name=a.name,
                            metadata=subscription,
                        )
                        for a in self.assignors
                    ),
                    reason=None,
                )

            node = await self._coordinator_node()
            timeout = self.rebalance_timeout_ms + self.client.request_timeout_ms
            try:
                response = await self.client.call(node, api.JOIN_GROUP, build, timeout_ms=timeout)
            except RetriableError:
                self._forget_coordinator()
                raise
            code = ErrorCode(response.error_code)
            if code == ErrorCode.member_id_required:
                self.member_id = response.member_id
                continue
            if code in (ErrorCode.unknown_member_id, ErrorCode.illegal_generation):
                self._lose_membership("")
                raise _Rejoin(code.name)
            if code != ErrorCode.none:
                raise error_for(code, f"JoinGroup {self.group_id}")
            self.member_id = response.member_id
            self.generation = int(response.generation_id)
            self.protocol = response.protocol_name
            return response
        raise _Rejoin("JoinGroup kept asking for a member id")

    async def _sync(self, join: Any) -> bytes:
        assignments: dict[str, bytes] = {}
        if join.leader == self.member_id:
            assignments = await self._assign(join)
        response = await self._call(
            api.SYNC_GROUP,
            lambda version: request(
                api.SYNC_GROUP,
                version,
                group_id=self.group_id,
                generation_id=self.generation,
                member_id=self.member_id,
                group_instance_id=self.group_instance_id,
                protocol_type="consumer",
                protocol_name=self.protocol,
                assignments=tuple(
                    nested(
                        api.SYNC_GROUP,
                        version,
                        "SyncGroupRequestAssignment",
                        member_id=m,
                        assignment=a,
                    )
                    for m, a in assignments.items()
                ),
            ),
        )
        code = ErrorCode(response.error_code)
        if code in (ErrorCode.unknown_member_id, ErrorCode.illegal_generation):
            self._lose_membership("" if code == ErrorCode.unknown_member_id else self.member_id)
            raise _Rejoin(code.name)
        if code == ErrorCode.rebalance_in_progress:
            raise _Rejoin(code.name)
        if code != ErrorCode.none:
            raise error_for(code, f"SyncGroup {self.group_id}")
        return bytes(response.assignment)

    async def _assign(self, join: Any) -> dict[str, bytes]:
        assignor = next((a for a in self.assignors if a.name == join.protocol_name), None)
        if assignor is None:
            raise FatalError(
                f"group {self.group_id} chose protocol {join.protocol_name!r}, unknown here"
            )
        members = [
            decode_subscription(
                m.member_id, bytes(m.metadata), getattr(m, "group_instance_id", None)
            )
            for m in join.members
        ]
        topics = sorted({t for m in members for t in m.topics})
        await self.client.refresh_metadata(topics)
        counts = {
            t: self.client.metadata.topics[t].num_partitions
            for t in topics
            if t in self.client.metadata.topics
            and self.client.metadata.topics[t].error == ErrorCode.none
        }
        result = assignor.assign(counts, members)
        logger.info(
            "group %s: leader %s assigned with %s: %s",
            self.group_id,
            self.member_id,
            assignor.name,
            {m: [str(tp) for tp in tps] for m, tps in result.items()},
        )
        return {m.member_id: encode_assignment(result.get(m.member_id, [])) for m in members}

    async def _heartbeat_until_rejoin(self) -> None:
        while not self._rejoin_needed.is_set() and not self._stopping:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.heartbeat_interval_ms / 1000):
                    await self._rejoin_needed.wait()
            if self._rejoin_needed.is_set() or self._stopping:
                return
            response = await self._call(
                api.HEARTBEAT,
                lambda version: request(
                    api.HEARTBEAT,
                    version,
                    group_id=self.group_id,
                    generation_id=self.generation,
                    member_id=self.member_id,
                    group_instance_id=self.group_instance_id,
                ),
            )
            code = ErrorCode(response.error_code)
            if code == ErrorCode.none:
                continue
            if code in _REJOIN:
                if code != ErrorCode.rebalance_in_progress:
                    self._lose_membership("")
                raise _Rejoin(code.name)
            raise error_for(code, f"Heartbeat {self.group_id}")

    # ---------------------------------------------------------------- leaving

    async def leave(self) -> None:
        self._stopping = True
        self._rejoin_needed.set()
        if not self.member_id or self.group_instance_id is not None:
            return
        with contextlib.suppress(KafkaClientError):
            await self._call(
                api.LEAVE_GROUP,
                lambda version: request(
                    api.LEAVE_GROUP,
                    version,
                    group_id=self.group_id,
                    member_id=self.member_id,
                    members=(
                        nested(
                            api.LEAVE_GROUP,
                            version,
                            "MemberIdentity",
                            member_id=self.member_id,
                            group_instance_id=None,
                            reason="consumer closing",
                        ),
                    ),
                ),
            )
            logger.info("group %s: member %s left", self.group_id, self.member_id)
        self.member_id, self.generation = "", -1
        self._identity = ("", -1)
