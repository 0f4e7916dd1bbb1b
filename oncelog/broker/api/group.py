"""Consumer-group APIs: JoinGroup (11), SyncGroup (14), Heartbeat (12), LeaveGroup (13),
OffsetCommit (8), OffsetFetch (9), TxnOffsetCommit (28); FindCoordinator is in
``find_coordinator``, ListGroups, DescribeGroups and DeleteGroups in ``group_admin``.

Thin: read the request (any version), call ``ctx.services.groups`` (a GroupCoordinator),
build the version's response with ``make``. Version ranges: every range below contains the
versions librdkafka 2.x, kafka-python 3.0 (its own caps: JoinGroup 7, SyncGroup 5,
OffsetCommit/OffsetFetch 8) and aiokafka 0.14 (JoinGroup 5, SyncGroup 3, Heartbeat 1,
LeaveGroup 1, OffsetCommit/OffsetFetch 3, FindCoordinator 1, ListGroups 2, DescribeGroups 3,
DeleteGroups 1) send, bounded by kio's schemas (OffsetCommit from v2, OffsetFetch from v1)
and by what a classic group means (OffsetCommit/OffsetFetch v10 address topics by id).

Authorization before anything else, as Kafka's KafkaApis: JoinGroup, SyncGroup,
Heartbeat, LeaveGroup and OffsetCommit need Read on the group (GROUP_AUTHORIZATION_FAILED
for the whole request), OffsetCommit then Read on each topic
(TOPIC_AUTHORIZATION_FAILED for its partitions, the others committed); OffsetFetch needs
Describe on each group, and answers only the topics the principal may Describe (those
named without it: TOPIC_AUTHORIZATION_FAILED; all offsets asked: the others left out).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any, cast

from oncelog.broker.api import RequestContext, handles
from oncelog.broker.api.transactions import authorized_txn_offset_commit
from oncelog.broker.authz import allowed, allowed_names
from oncelog.broker.cluster_view import (
    GROUP_KEY,
    NO_LEADER,
    TRANSACTION_KEY,
    coordinator_error,
)
from oncelog.coordinator.group.results import (
    NO_LEADER_EPOCH,
    NO_OFFSET,
    OffsetFetchEntry,
    TopicPartition,
)
from oncelog.errors import ErrorCode, KafkaError
from oncelog.internal_topics import OFFSETS_TOPIC
from oncelog.protocol import versions
from oncelog.protocol.build import make, response_module, to_ms
from oncelog.security.acl import AclOperation, ResourceType
from oncelog.storage.verification import SENTINEL

if TYPE_CHECKING:
    from oncelog.coordinator.group.coordinator import GroupCoordinator
    from oncelog.coordinator.transaction import TransactionCoordinator

log = logging.getLogger(__name__)

# ---------------------------------------------------------------------------------------
# JoinGroup, SyncGroup, Heartbeat, LeaveGroup


def _group_readable(ctx: RequestContext, group_id: str) -> bool:
    """Read on the group: what every member request and OffsetCommit need first."""
    return allowed(ctx, AclOperation.READ, ResourceType.GROUP, group_id)


def _group_coordinator_error(ctx: RequestContext, group_id: str) -> ErrorCode:
    """NOT_COORDINATOR when this broker does not lead the group's ``__consumer_offsets``
    partition (the cluster view decides)."""
    return coordinator_error(ctx.services.cluster, GROUP_KEY, group_id)


def _member_error(ctx: RequestContext, group_id: str) -> ErrorCode:
    """GROUP_AUTHORIZATION_FAILED without Read on the group, else the coordinator's."""
    if not _group_readable(ctx, group_id):
        return ErrorCode.group_authorization_failed
    return _group_coordinator_error(ctx, group_id)


@handles(versions.JOIN_GROUP, 0, 9)
async def handle_join_group(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(versions.JOIN_GROUP, ctx.api_version)
    error, member_id = ErrorCode.group_authorization_failed, ""
    if _group_readable(ctx, request.group_id):
        error, member_id = _group_coordinator_error(ctx, request.group_id), request.member_id
    if error is not ErrorCode.none:
        return make(
            mod.JoinGroupResponse, throttle_time=0, error_code=error, generation_id=-1,
            protocol_type=None, protocol_name=None if ctx.api_version >= 7 else "",
            leader="", skip_assignment=False, member_id=member_id, members=(),
        )
    session_ms = to_ms(request.session_timeout)
    rebalance_ms = to_ms(getattr(request, "rebalance_timeout", None))
    result = await ctx.services.groups.join_group(
        group_id=request.group_id,
        member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        protocol_type=request.protocol_type,
        protocols=[(p.name, p.metadata) for p in request.protocols],
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=rebalance_ms,
        client_id=ctx.client_id or "",
        client_host=ctx.client_host,
        # KIP-394: from v4 a new member must come back with the member id it is given.
        require_known_member_id=ctx.api_version >= 4,
    )
    nullable_names = ctx.api_version >= 7
    members = tuple(
        make(
            mod.JoinGroupResponseMember,
            member_id=m.member_id,
            group_instance_id=m.group_instance_id,
            metadata=m.metadata,
        )
        for m in result.members
    )
    return make(
        mod.JoinGroupResponse,
        throttle_time=0,
        error_code=result.error,
        generation_id=result.generation_id,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name
        if result.protocol_name is not None or nullable_names
        else "",
        leader=result.leader_id,
        skip_assignment=result.skip_assignment,
        member_id=result.member_id,
        members=members,
    )


@handles(versions.SYNC_GROUP, 0, 5)
async def handle_sync_group(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(versions.SYNC_GROUP, ctx.api_version)
    if (error := _member_error(ctx, request.group_id)) is not ErrorCode.none:
        return make(mod.SyncGroupResponse, throttle_time=0, error_code=error,
                    protocol_type=None, protocol_name=None, assignment=b"")
    result = await ctx.services.groups.sync_group(
        group_id=request.group_id,
        generation_id=int(request.generation_id),
        member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        protocol_type=getattr(request, "protocol_type", None),
        protocol_name=getattr(request, "protocol_name", None),
        assignments={a.member_id: a.assignment for a in request.assignments},
    )
    return make(
        mod.SyncGroupResponse,
        throttle_time=0,
        error_code=result.error,
        protocol_type=result.protocol_type,
        protocol_name=result.protocol_name,
        assignment=result.assignment,
    )


@handles(versions.HEARTBEAT, 0, 4)
async def handle_heartbeat(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(versions.HEARTBEAT, ctx.api_version)
    if (error := _member_error(ctx, request.group_id)) is not ErrorCode.none:
        return make(mod.HeartbeatResponse, throttle_time=0, error_code=error)
    error = ctx.services.groups.heartbeat(
        request.group_id,
        int(request.generation_id),
        request.member_id,
        getattr(request, "group_instance_id", None),
    )
    return make(mod.HeartbeatResponse, throttle_time=0, error_code=error)


@handles(versions.LEAVE_GROUP, 0, 5)
async def handle_leave_group(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(versions.LEAVE_GROUP, ctx.api_version)
    if not _group_readable(ctx, request.group_id):
        return make(mod.LeaveGroupResponse, throttle_time=0,
                    error_code=ErrorCode.group_authorization_failed, members=())
    if ctx.api_version >= 3:
        leaving = [(m.member_id, m.group_instance_id) for m in request.members]
    else:
        leaving = [(request.member_id, None)]
    try:
        errors = ctx.services.groups.leave_group(request.group_id, leaving)
    except KafkaError as exc:
        return make(mod.LeaveGroupResponse, throttle_time=0, error_code=exc.code, members=())
    if ctx.api_version < 3:
        return make(mod.LeaveGroupResponse, throttle_time=0, error_code=errors[0])
    members = tuple(
        make(mod.MemberResponse, member_id=mid, group_instance_id=iid, error_code=err)
        for (mid, iid), err in zip(leaving, errors, strict=True)
    )
    return make(
        mod.LeaveGroupResponse, throttle_time=0, error_code=ErrorCode.none, members=members
    )


# ---------------------------------------------------------------------------------------
# OffsetCommit, OffsetFetch


def _requested_offsets(
    request: Any,
) -> tuple[dict[TopicPartition, tuple[int, int, str | None]], list[TopicPartition]]:
    """The (offset, leader epoch, metadata) per partition of an OffsetCommit or
    TxnOffsetCommit request, and the partitions in request order."""
    offsets: dict[TopicPartition, tuple[int, int, str | None]] = {}
    order: list[TopicPartition] = []
    for topic in request.topics:
        for p in topic.partitions:
            tp = (topic.name, int(p.partition_index))
            order.append(tp)
            offsets[tp] = (
                int(p.committed_offset),
                int(getattr(p, "committed_leader_epoch", -1)),
                p.committed_metadata,
            )
    return offsets, order


@handles(versions.OFFSET_COMMIT, 2, 9)
async def handle_offset_commit(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(versions.OFFSET_COMMIT, ctx.api_version)
    offsets, order = _requested_offsets(request)
    errors: dict[TopicPartition, ErrorCode] = {}
    if not _group_readable(ctx, request.group_id):
        errors = dict.fromkeys(offsets, ErrorCode.group_authorization_failed)
        offsets = {}
    # Kafka answers TOPIC_AUTHORIZATION_FAILED for topics it may not Read, then
    # UNKNOWN_TOPIC_OR_PARTITION for partitions that do not exist (every version), and
    # commits the others.
    readable = allowed_names(ctx, AclOperation.READ, ResourceType.TOPIC,
                             (topic for topic, _ in offsets))
    topics_known = ctx.services.partitions.topics
    for tp in offsets:
        if tp[0] not in readable:
            errors[tp] = ErrorCode.topic_authorization_failed
        elif (info := topics_known.get(tp[0])) is None or not 0 <= tp[1] < info.partitions:
            errors[tp] = ErrorCode.unknown_topic_or_partition
    known = {tp: entry for tp, entry in offsets.items() if tp not in errors}
    if known:
        errors.update(await ctx.services.groups.handle_commit_offsets(
            group_id=request.group_id,
            generation_id=int(request.generation_id_or_member_epoch),
            member_id=request.member_id,
            group_instance_id=getattr(request, "group_instance_id", None),
            offsets=known,
        ))
    by_topic: dict[str, list[Any]] = defaultdict(list)
    for tp in order:
        by_topic[tp[0]].append(
            make(mod.OffsetCommitResponsePartition, partition_index=tp[1], error_code=errors[tp])
        )
    topics = tuple(
        make(mod.OffsetCommitResponseTopic, name=name, partitions=tuple(parts))
        for name, parts in by_topic.items()
    )
    return make(mod.OffsetCommitResponse, throttle_time=0, topics=topics)


@handles(versions.OFFSET_FETCH, 1, 9)
async def handle_offset_fetch(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(versions.OFFSET_FETCH, ctx.api_version)
    require_stable = bool(getattr(request, "require_stable", False))
    if ctx.api_version >= 8:
        groups = []
        for g in request.groups:
            entries, error = _fetch_authorized(ctx, g.group_id, _wanted_partitions(g.topics),
                                               require_stable, per_partition=False)
            groups.append(
                make(
                    mod.OffsetFetchResponseGroup,
                    group_id=g.group_id,
                    topics=_fetch_topics(mod, entries, "OffsetFetchResponseTopics",
                                         "OffsetFetchResponsePartitions"),
                    error_code=error,
                )
            )
        return make(mod.OffsetFetchResponse, throttle_time=0, groups=tuple(groups))
    # v1 has no top-level error: a group-level error goes to each partition.
    entries, error = _fetch_authorized(ctx, request.group_id,
                                       _wanted_partitions(request.topics), require_stable,
                                       per_partition=ctx.api_version < 2)
    return make(
        mod.OffsetFetchResponse,
        throttle_time=0,
        topics=_fetch_topics(mod, entries, "OffsetFetchResponseTopic",
                             "OffsetFetchResponsePartition"),
        error_code=error,
    )


def _fetch_authorized(
    ctx: RequestContext,
    group_id: str,
    wanted: list[TopicPartition] | None,
    require_stable: bool,
    *,
    per_partition: bool,
) -> tuple[dict[TopicPartition, OffsetFetchEntry], ErrorCode]:
    """``_fetch`` as this principal may see it: GROUP_AUTHORIZATION_FAILED (and no
    offsets) without Describe on the group; only the topics it may Describe."""
    if not allowed(ctx, AclOperation.DESCRIBE, ResourceType.GROUP, group_id):
        return {}, ErrorCode.group_authorization_failed
    coordinator = ctx.services.groups
    if wanted is None:  # every committed offset: the topics it may not Describe are left out
        entries, error = _fetch(coordinator, group_id, None, require_stable,
                                per_partition=per_partition)
        described = allowed_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC,
                                  {tp[0] for tp in entries})
        return {tp: e for tp, e in entries.items() if tp[0] in described}, error
    described = allowed_names(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC,
                              {tp[0] for tp in wanted})
    entries, error = _fetch(coordinator, group_id, [tp for tp in wanted if tp[0] in described],
                            require_stable, per_partition=per_partition)
    if error is not ErrorCode.none:
        return entries, error
    refused = OffsetFetchEntry(NO_OFFSET, NO_LEADER_EPOCH, "", ErrorCode.topic_authorization_failed)
    return {**entries, **{tp: refused for tp in wanted if tp[0] not in described}}, error


def _fetch(
    coordinator: GroupCoordinator,
    group_id: str,
    wanted: list[TopicPartition] | None,
    require_stable: bool,
    *,
    per_partition: bool,
) -> tuple[dict[TopicPartition, OffsetFetchEntry], ErrorCode]:
    """One group's committed offsets and its group-level error (NOT_COORDINATOR,
    COORDINATOR_LOAD_IN_PROGRESS: no offsets, as Kafka answers); ``per_partition`` puts
    that error on each wanted partition instead."""
    try:
        return coordinator.fetch_offsets(group_id, wanted, require_stable), ErrorCode.none
    except KafkaError as exc:
        if not per_partition:
            return {}, exc.code
        return {tp: OffsetFetchEntry(NO_OFFSET, NO_LEADER_EPOCH, "", exc.code)
                for tp in wanted or ()}, ErrorCode.none


# ---------------------------------------------------------------------------------------
# TxnOffsetCommit


@handles(versions.TXN_OFFSET_COMMIT, 0, 5)
async def handle_txn_offset_commit(ctx: RequestContext, request: Any) -> Any:
    """Authorization first (the transactional id, the group, each topic), then the commit."""
    return await authorized_txn_offset_commit(ctx, request, _commit_txn_offsets)


async def _commit_txn_offsets(ctx: RequestContext, request: Any) -> Any:
    """Offsets committed inside a transaction. Kafka checks first that the group is
    coordinated here and takes the offsets partition's verification guard (KIP-890), then
    asks the transaction coordinator whether the group's offsets partition is in the
    producer's transaction (v5, transactions v2, adds it instead), then lets the group
    coordinator check the group (KIP-447: generation, member and instance, sent from v3) and
    append, presenting the guard: a marker written to the partition meanwhile refuses the
    append (INVALID_TXN_STATE) rather than leave offsets pending that no marker will end."""
    mod = response_module(versions.TXN_OFFSET_COMMIT, ctx.api_version)
    offsets, order = _requested_offsets(request)
    groups = ctx.services.groups
    errors: dict[TopicPartition, ErrorCode]
    guard = SENTINEL
    if not request.group_id:
        error = ErrorCode.invalid_group_id
    else:
        error, guard = groups.start_txn_verification(
            request.group_id, int(request.producer_id), int(request.producer_epoch))
    if error is ErrorCode.none:
        error = await _verify_txn_offsets(ctx, request, groups.partition_for(request.group_id))
    if error is not ErrorCode.none:
        errors = {tp: error for tp in offsets}
    else:
        errors = groups.commit_txn_offsets(
            transactional_id=request.transactional_id,
            group_id=request.group_id,
            producer_id=int(request.producer_id),
            producer_epoch=int(request.producer_epoch),
            generation_id=int(getattr(request, "generation_id", -1)),
            member_id=getattr(request, "member_id", ""),
            group_instance_id=getattr(request, "group_instance_id", None),
            offsets=offsets,
            verification_guard=guard,
        )
        errors = await _replicated(groups, request.group_id, errors)
    by_topic: dict[str, list[Any]] = defaultdict(list)
    for tp in order:
        by_topic[tp[0]].append(
            make(mod.TxnOffsetCommitResponsePartition, partition_index=tp[1],
                 error_code=errors[tp])
        )
    topics = tuple(
        make(mod.TxnOffsetCommitResponseTopic, name=name, partitions=tuple(parts))
        for name, parts in by_topic.items()
    )
    return make(mod.TxnOffsetCommitResponse, throttle_time=0, topics=topics)


async def _verify_txn_offsets(ctx: RequestContext, request: Any, partition: int) -> ErrorCode:
    """Is ``__consumer_offsets``-``partition`` in the producer's ongoing transaction? The
    answer of the transaction coordinator of the transactional id (this broker's, or the
    one on another broker, asked with AddPartitionsToTxn as Kafka's
    AddPartitionsToTxnManager does), as a TxnOffsetCommit client of this version reads it."""
    tp = (OFFSETS_TOPIC, partition)
    transactional_id = request.transactional_id
    producer_id, producer_epoch = int(request.producer_id), int(request.producer_epoch)
    verify_only = ctx.api_version < 5
    view = ctx.services.cluster
    leader = view.coordinator(TRANSACTION_KEY, transactional_id).leader
    verifier = getattr(ctx.services, "txn_verifier", None)
    coordinator = cast("TransactionCoordinator | None", getattr(ctx.services, "transactions", None))
    if leader != view.node_id and verifier is not None:
        if leader == NO_LEADER:
            return ErrorCode.coordinator_not_available
        answers = await verifier.add_or_verify(leader, transactional_id, producer_id,
                                               producer_epoch, [tp], verify_only=verify_only)
    elif coordinator is None:
        log.error("TxnOffsetCommit for group %s: the broker has no transaction coordinator",
                  request.group_id)
        return ErrorCode.coordinator_not_available
    else:
        answers = await coordinator.handle_add_partitions(
            transactional_id, producer_id, producer_epoch, [tp], verify_only=verify_only)
    return txn_verification_error(answers.get(tp, ErrorCode.unknown_server_error),
                                  ctx.api_version)


def txn_verification_error(code: ErrorCode, api_version: int) -> ErrorCode:
    """A transaction coordinator's answer for the offsets partition, as TxnOffsetCommit
    ``api_version`` answers it."""
    if code is ErrorCode.producer_fenced:
        return ErrorCode.invalid_producer_epoch
    if code is ErrorCode.transaction_abortable and api_version < 4:
        # Before v4 clients do not know TRANSACTION_ABORTABLE (KIP-890).
        return ErrorCode.invalid_txn_state
    if code in (ErrorCode.not_coordinator, ErrorCode.coordinator_not_available):
        # The transaction coordinator's state, not this group coordinator's: a client
        # would look the group coordinator up again for nothing.
        return ErrorCode.coordinator_not_available
    if code is ErrorCode.network_exception:
        # The coordinator's broker could not be asked: retried without a coordinator
        # lookup (Kafka's maybeConvertOffsetCommitError).
        return ErrorCode.coordinator_load_in_progress
    return code


def _wanted_partitions(topics: Iterable[Any] | None) -> list[TopicPartition] | None:
    if topics is None:
        return None
    return [(t.name, int(p)) for t in topics for p in t.partition_indexes]


def _fetch_topics(
    mod: ModuleType,
    entries: Mapping[TopicPartition, OffsetFetchEntry],
    topic_cls: str,
    partition_cls: str,
) -> tuple[Any, ...]:
    by_topic: dict[str, list[Any]] = defaultdict(list)
    for (topic, partition), entry in entries.items():
        by_topic[topic].append(
            make(
                getattr(mod, partition_cls),
                partition_index=partition,
                committed_offset=entry.offset,
                committed_leader_epoch=entry.leader_epoch,
                metadata=entry.metadata,
                error_code=entry.error,
            )
        )
    return tuple(
        make(getattr(mod, topic_cls), name=name, partitions=tuple(parts))
        for name, parts in by_topic.items()
    )


async def _replicated(
    groups: GroupCoordinator, group_id: str, errors: dict[TopicPartition, ErrorCode]
) -> dict[TopicPartition, ErrorCode]:
    """A TxnOffsetCommit's answer waits for the in-sync replicas of its offsets partition
    (acks=-1): the partitions it committed get the wait's error if the ISR did not
    acknowledge it (OffsetCommit waits inside ``GroupCoordinator.handle_commit_offsets``)."""
    if ErrorCode.none not in errors.values():
        return errors
    code = await groups.wait_offsets_replicated(group_id)
    if code is ErrorCode.none:
        return errors
    return {tp: code if error is ErrorCode.none else error for tp, error in errors.items()}
