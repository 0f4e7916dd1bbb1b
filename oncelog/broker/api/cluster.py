"""Partition and cluster administration.

DescribeCluster, DescribeTopicPartitions (KIP-966, paged) and ElectLeaders answer from the
cluster view (``ctx.services.cluster``: on one node this node leads every partition, so no
election is ever needed; in cluster mode ElectLeaders is the controller's,
``ctx.services.elections``), List/AlterPartitionReassignments (one
node: none in progress; a reassignment to this node alone is already done),
DescribeLogDirs (real sizes per log directory) and AlterReplicaLogDirs (moves a partition
between the directories of ``log.dirs``, see ``PartitionRegistry.move_partition``).

Authorization as Kafka's: DescribeCluster answers everyone (its cluster authorized
operations are 0 without Describe on the Cluster); DescribeTopicPartitions leaves out the
topics a listing may not Describe and refuses those named (TOPIC_AUTHORIZATION_FAILED);
ElectLeaders (forwarded by a broker that is not the controller; a controller it cannot
reach answers REQUEST_TIMED_OUT, one refusing its login UNKNOWN_SERVER_ERROR, as Kafka's
forwarding), AlterPartitionReassignments and AlterReplicaLogDirs need Alter on the
Cluster, ListPartitionReassignments and DescribeLogDirs Describe on it
(CLUSTER_AUTHORIZATION_FAILED, at the top level and for every partition named).
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

from oncelog.broker.api import RequestContext, handles
from oncelog.broker.api.admin import ZERO_UUID, live_brokers
from oncelog.broker.api.authorized import OMITTED, cluster_operations, topic_operations
from oncelog.broker.authz import allowed, cluster_allowed
from oncelog.broker.cluster.peers import PEER_REQUEST_FAILURES
from oncelog.broker.cluster_view import NO_LEADER, ClusterView, brokers_on
from oncelog.broker.markers import sender_broker
from oncelog.broker.partitions import PartitionRegistry, log_size
from oncelog.client.errors import AuthenticationError
from oncelog.cluster.controller_decisions import ElectionType
from oncelog.cluster.replica_assignment import check_replicas
from oncelog.errors import ErrorCode, KafkaError
from oncelog.protocol import versions
from oncelog.protocol.build import make, response_module
from oncelog.security.acl import AclOperation, ResourceType

log = logging.getLogger(__name__)

ENDPOINT_BROKERS = 1
# Kafka's max.request.partition.size.limit default: the most partitions one
# DescribeTopicPartitions answer holds, whatever the request asks.
MAX_PARTITIONS_PER_PAGE = 2000


def _refused(api: str) -> str:
    """The message of a request refused for want of a Cluster permission."""
    return f"Request {api} is not authorized."


# -- DescribeCluster -----------------------------------------------------------------------
@handles(versions.DESCRIBE_CLUSTER, 0, 2)
async def handle_describe_cluster(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(versions.DESCRIBE_CLUSTER, ctx.api_version)
    node = ctx.services.node
    view = ctx.services.cluster
    endpoint_type = int(getattr(request, "endpoint_type", ENDPOINT_BROKERS))
    if endpoint_type != ENDPOINT_BROKERS:
        return make(
            mod.DescribeClusterResponse,
            throttle_time=0,
            error_code=ErrorCode.mismatched_endpoint_type,
            error_message="The request was sent to an endpoint of type BROKER, but we wanted "
            "an endpoint of type CONTROLLER",
            endpoint_type=ENDPOINT_BROKERS,
            cluster_id="",
            controller_id=-1,
            brokers=(),
            cluster_authorized_operations=OMITTED,
        )
    brokers = tuple(
        make(mod.DescribeClusterBroker, broker_id=b.node_id, host=b.host, port=b.port,
             rack=b.rack, is_fenced=False)
        for b in brokers_on(view, ctx.session.listener)
    )
    wanted = bool(request.include_cluster_authorized_operations)
    operations = cluster_operations(wanted, ctx)
    if wanted and not cluster_allowed(ctx, AclOperation.DESCRIBE):
        operations = 0
    return make(
        mod.DescribeClusterResponse,
        throttle_time=0,
        error_code=ErrorCode.none,
        error_message=None,
        endpoint_type=ENDPOINT_BROKERS,
        cluster_id=node.cluster_id,
        controller_id=view.controller_id(),
        brokers=brokers,
        cluster_authorized_operations=operations,
    )


# -- DescribeTopicPartitions ---------------------------------------------------------------
@handles(versions.DESCRIBE_TOPIC_PARTITIONS, 0, 0)
async def handle_describe_topic_partitions(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(versions.DESCRIBE_TOPIC_PARTITIONS, ctx.api_version)
    registry = ctx.services.partitions
    view = ctx.services.cluster
    names = sorted({t.name for t in request.topics} if request.topics else registry.topics)
    cursor = request.cursor
    if cursor is not None:
        names = [n for n in names if n >= cursor.topic_name]
    budget = max(0, min(int(request.response_partition_limit), MAX_PARTITIONS_PER_PAGE))
    topics: list[Any] = []
    refused: list[Any] = []
    next_cursor = None
    for name in names:
        if not allowed(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, name):
            if request.topics:
                refused.append(make(
                    mod.DescribeTopicPartitionsResponseTopic,
                    error_code=ErrorCode.topic_authorization_failed, name=name,
                    topic_id=ZERO_UUID, is_internal=False, partitions=(),
                    topic_authorized_operations=OMITTED))
            continue
        info = registry.topics.get(name)
        if info is None:
            topics.append(
                make(
                    mod.DescribeTopicPartitionsResponseTopic,
                    error_code=ErrorCode.unknown_topic_or_partition,
                    name=name,
                    topic_id=ZERO_UUID,
                    is_internal=False,
                    partitions=(),
                    topic_authorized_operations=topic_operations(True, ctx, name),
                )
            )
            continue
        first = int(cursor.partition_index) if cursor and name == cursor.topic_name else 0
        if budget == 0 and first < info.partitions:
            next_cursor = make(mod.Cursor, topic_name=name, partition_index=first)
            break
        last = min(info.partitions, first + budget)
        budget -= last - first
        topics.append(
            make(
                mod.DescribeTopicPartitionsResponseTopic,
                error_code=ErrorCode.none,
                name=name,
                topic_id=info.topic_id,
                is_internal=info.internal,
                partitions=tuple(
                    _described_partition(mod, view, name, index)
                    for index in range(first, last)
                ),
                topic_authorized_operations=topic_operations(True, ctx, name),
            )
        )
        if last < info.partitions:
            next_cursor = make(mod.Cursor, topic_name=name, partition_index=last)
            break
    return make(
        mod.DescribeTopicPartitionsResponse,
        throttle_time=0,
        topics=(*topics, *refused),
        next_cursor=next_cursor,
    )


def _described_partition(mod: Any, view: ClusterView, topic: str, index: int) -> Any:
    state = view.partition(topic, index)
    return make(
        mod.DescribeTopicPartitionsResponsePartition,
        error_code=ErrorCode.none,
        partition_index=index,
        leader_id=-1 if state is None else state.leader,
        leader_epoch=-1 if state is None else state.leader_epoch,
        replica_nodes=() if state is None else state.replicas,
        isr_nodes=() if state is None else state.isr,
        eligible_leader_replicas=(),
        last_known_elr=(),
        offline_replicas=() if state is None else state.offline_replicas,
    )


# -- ElectLeaders ----------------------------------------------------------------------------
@handles(versions.ELECT_LEADERS, 0, 2)
async def handle_elect_leaders(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(versions.ELECT_LEADERS, ctx.api_version)
    if not cluster_allowed(ctx, AclOperation.ALTER):
        return _elect_leaders_refused(mod, request)
    if ctx.services.elections is not None:
        return await _cluster_elect_leaders(ctx, request, mod)
    registry = ctx.services.partitions
    view = ctx.services.cluster
    results = []
    if request.topic_partitions is None:
        # Every partition; as in Kafka, those needing no election are left out.
        results = [
            make(mod.ReplicaElectionResult, topic=name, partition_result=())
            for name in registry.topics
        ]
    else:
        for entry in request.topic_partitions:
            outcome = []
            for index in entry.partitions:
                code, message = _election(registry, view, entry.topic, int(index))
                outcome.append(
                    make(
                        mod.PartitionResult,
                        partition_id=index,
                        error_code=code,
                        error_message=message,
                    )
                )
            results.append(
                make(mod.ReplicaElectionResult, topic=entry.topic, partition_result=tuple(outcome))
            )
    return make(
        mod.ElectLeadersResponse,
        throttle_time=0,
        error_code=ErrorCode.none,
        replica_election_results=tuple(results),
    )


def _elect_leaders_refused(mod: Any, request: Any,
                           code: ErrorCode = ErrorCode.cluster_authorization_failed,
                           message: str | None = _refused("ElectLeaders")) -> Any:
    """ElectLeadersRequest.getErrorResponse: the error at the top and on each partition
    (by default the refusal of a principal without Alter on the Cluster)."""
    results = tuple(
        make(mod.ReplicaElectionResult, topic=entry.topic, partition_result=tuple(
            make(mod.PartitionResult, partition_id=index, error_code=code,
                 error_message=message) for index in entry.partitions))
        for entry in request.topic_partitions or ())
    return make(mod.ElectLeadersResponse, throttle_time=0, error_code=code,
                replica_election_results=results)


async def _cluster_elect_leaders(ctx: RequestContext, request: Any, mod: Any) -> Any:
    """Cluster mode: the controller elects (this broker, or the controller broker the
    request is forwarded to). As in Kafka, the "all partitions" form (topic_partitions
    null) answers only the partitions whose election was needed."""
    elections = ctx.services.elections
    assert elections is not None
    timeout_ms = max(1, int(request.timeout.total_seconds() * 1000))
    election = ElectionType(int(getattr(request, "election_type", ElectionType.PREFERRED)))
    wanted: list[tuple[str, int]] | None = None
    if request.topic_partitions is not None:
        wanted = [(entry.topic, int(index)) for entry in request.topic_partitions
                  for index in entry.partitions]
    errors = await elections.elect(election, wanted, timeout_ms)
    if errors is None:  # not the controller: Kafka forwards ElectLeaders to it
        controller_id = ctx.services.cluster.controller_id()
        try:
            # A request forwarded once is not forwarded again (stale images could bounce it).
            if sender_broker(ctx.client_id) is not None or controller_id in (
                    NO_LEADER, ctx.services.node.node_id):
                raise LookupError(f"no other controller to forward to ({controller_id})")
            return await elections.forward(request, timeout_ms)
        except PEER_REQUEST_FAILURES as exc:
            # Kafka's ForwardingManager: a controller that refuses the broker's login is
            # UNKNOWN_SERVER_ERROR, one it cannot reach in time REQUEST_TIMED_OUT.
            log.info("ElectLeaders: cannot reach the controller: %s", exc)
            code = (ErrorCode.unknown_server_error if isinstance(exc, AuthenticationError)
                    else ErrorCode.request_timed_out)
            return _elect_leaders_refused(mod, request, code, None)
    if wanted is None:
        errors = {k: c for k, c in errors.items() if c is not ErrorCode.election_not_needed}
        wanted = sorted(errors)
    by_topic: dict[str, list[Any]] = {}
    for topic, index in wanted:
        code = errors.get((topic, index), ErrorCode.unknown_topic_or_partition)
        by_topic.setdefault(topic, []).append(make(
            mod.PartitionResult, partition_id=index, error_code=code,
            error_message=_election_message(code, topic, index, election)))
    results = [make(mod.ReplicaElectionResult, topic=topic, partition_result=tuple(parts))
               for topic, parts in by_topic.items()]
    return make(mod.ElectLeadersResponse, throttle_time=0, error_code=ErrorCode.none,
                replica_election_results=tuple(results))


def _election_message(
    code: ErrorCode, topic: str, index: int, election: ElectionType
) -> str | None:
    """Kafka's error messages for ElectLeaders' per-partition codes."""
    if code is ErrorCode.none:
        return None
    if code is ErrorCode.election_not_needed:
        return "Leader election not needed for topic partition."
    if code is ErrorCode.unknown_topic_or_partition:
        return "The partition does not exist."
    strategy = ("PreferredElectionStrategy" if election is ElectionType.PREFERRED
                else "UncleanElectionStrategy")
    return f"Failed to elect leader for partition {topic}-{index} under strategy {strategy}"


def _election(
    registry: PartitionRegistry, view: ClusterView, topic: str, index: int
) -> tuple[ErrorCode, str]:
    """A preferred-leader election's answer: not needed when the preferred (first)
    replica already leads. Elections that are needed are the controller's (cluster mode)."""
    if registry.topics.get(topic) is None:
        return ErrorCode.unknown_topic_or_partition, f"No such topic as {topic}"
    state = view.partition(topic, index)
    if state is None:
        return ErrorCode.unknown_topic_or_partition, f"No such partition as {topic}-{index}"
    if state.replicas and state.leader == state.replicas[0]:
        return ErrorCode.election_not_needed, "Leader election not needed for topic partition."
    return ErrorCode.preferred_leader_not_available, (
        f"Failed to elect leader for partition {topic}-{index} under strategy "
        "PreferredElectionStrategy"
    )


# -- partition reassignments ---------------------------------------------------------------
@handles(versions.LIST_PARTITION_REASSIGNMENTS, 0, 0)
async def handle_list_partition_reassignments(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(versions.LIST_PARTITION_REASSIGNMENTS, ctx.api_version)
    if not cluster_allowed(ctx, AclOperation.DESCRIBE):
        return make(
            mod.ListPartitionReassignmentsResponse, throttle_time=0,
            error_code=ErrorCode.cluster_authorization_failed,
            error_message=_refused("ListPartitionReassignments"),
            topics=tuple(
                make(mod.OngoingTopicReassignment, name=topic.name, partitions=tuple(
                    make(mod.OngoingPartitionReassignment, partition_index=index, replicas=(),
                         adding_replicas=(), removing_replicas=())
                    for index in topic.partition_indexes))
                for topic in request.topics or ()))
    # One node: a reassignment completes when it is accepted, so none is ever ongoing.
    return make(
        mod.ListPartitionReassignmentsResponse,
        throttle_time=0,
        error_code=ErrorCode.none,
        error_message=None,
        topics=(),
    )


@handles(versions.ALTER_PARTITION_REASSIGNMENTS, 0, 1)
async def handle_alter_partition_reassignments(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(versions.ALTER_PARTITION_REASSIGNMENTS, ctx.api_version)
    registry = ctx.services.partitions
    live = live_brokers(ctx)
    top_code: ErrorCode = ErrorCode.none
    top_message: str | None = None
    if not cluster_allowed(ctx, AclOperation.ALTER):
        top_code = ErrorCode.cluster_authorization_failed
        top_message = _refused("AlterPartitionReassignments")
    responses = []
    for topic in request.topics:
        outcome = []
        for entry in topic.partitions:
            code, message = top_code, top_message
            if code is ErrorCode.none:
                code, message = _reassignment(registry, live, topic.name, entry)
            outcome.append(
                make(
                    mod.ReassignablePartitionResponse,
                    partition_index=entry.partition_index,
                    error_code=code,
                    error_message=message,
                )
            )
        responses.append(
            make(mod.ReassignableTopicResponse, name=topic.name, partitions=tuple(outcome))
        )
    return make(
        mod.AlterPartitionReassignmentsResponse,
        throttle_time=0,
        allow_replication_factor_change=getattr(request, "allow_replication_factor_change", True),
        error_code=top_code,
        error_message=top_message,
        responses=tuple(responses),
    )


def _reassignment(registry: PartitionRegistry, live: frozenset[int], topic: str, entry: Any
                  ) -> tuple[ErrorCode, str | None]:
    """One partition's answer (one node: a valid reassignment is done when accepted)."""
    info = registry.topics.get(topic)
    if info is None:
        return ErrorCode.unknown_topic_or_partition, f"Unable to find a topic named {topic}."
    if not 0 <= int(entry.partition_index) < info.partitions:
        return (ErrorCode.unknown_topic_or_partition,
                f"Unable to find partition {topic}:{entry.partition_index}.")
    if entry.replicas is None:
        return ErrorCode.no_reassignment_in_progress, None
    try:
        check_replicas(entry.replicas, live, None)
    except KafkaError as exc:
        return exc.code, exc.message
    return ErrorCode.none, None


# -- log directories -------------------------------------------------------------------------
@handles(versions.DESCRIBE_LOG_DIRS, 1, 5)
async def handle_describe_log_dirs(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(versions.DESCRIBE_LOG_DIRS, ctx.api_version)
    if not cluster_allowed(ctx, AclOperation.DESCRIBE):
        return make(mod.DescribeLogDirsResponse, throttle_time=0,
                    error_code=ErrorCode.cluster_authorization_failed, results=())
    registry = ctx.services.partitions
    wanted: set[tuple[str, int]] | None = None
    if request.topics is not None:
        wanted = {(t.topic, int(p)) for t in request.topics for p in t.partitions}
    by_dir: dict[Path, dict[str, list[Any]]] = {d: {} for d in registry.log_dirs}
    for partition in registry.partitions():
        if wanted is not None and (partition.topic, partition.index) not in wanted:
            continue
        by_dir.setdefault(partition.log_dir, {}).setdefault(partition.topic, []).append(
            make(
                mod.DescribeLogDirsPartition,
                partition_index=partition.index,
                partition_size=log_size(partition.log_dir / partition.name),
                offset_lag=0,
                is_future_key=False,
            )
        )
    results = []
    for log_dir, topics in by_dir.items():
        try:
            usage = shutil.disk_usage(log_dir)
            code, total, usable = ErrorCode.none, usage.total, usage.free
        except OSError as exc:
            log.warning("cannot read the disk usage of log dir %s: %s", log_dir, exc)
            code, total, usable = ErrorCode.kafka_storage_error, -1, -1
        results.append(
            make(
                mod.DescribeLogDirsResult,
                error_code=code,
                log_dir=str(log_dir),
                topics=tuple(
                    make(mod.DescribeLogDirsTopic, name=name, partitions=tuple(parts))
                    for name, parts in topics.items()
                ),
                total_bytes=total,
                usable_bytes=usable,
                is_cordoned=False,
            )
        )
    return make(
        mod.DescribeLogDirsResponse,
        throttle_time=0,
        error_code=ErrorCode.none,
        results=tuple(results),
    )


@handles(versions.ALTER_REPLICA_LOG_DIRS, 1, 2)
async def handle_alter_replica_log_dirs(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(versions.ALTER_REPLICA_LOG_DIRS, ctx.api_version)
    registry = ctx.services.partitions
    may_alter = cluster_allowed(ctx, AclOperation.ALTER)
    results = []
    for entry in request.dirs:
        target = registry.log_dir_named(entry.path)
        for topic in entry.topics:
            outcome = []
            for index in topic.partitions:
                code = ErrorCode.none
                try:
                    if not may_alter:
                        raise KafkaError(ErrorCode.cluster_authorization_failed)
                    if target is None:
                        raise KafkaError(ErrorCode.log_dir_not_found, entry.path)
                    registry.move_partition(topic.name, int(index), target)
                except KafkaError as exc:
                    code = exc.code
                    log.info("AlterReplicaLogDirs %s-%s to %s: %s",
                             topic.name, index, entry.path, exc)
                outcome.append(
                    make(mod.AlterReplicaLogDirPartitionResult, partition_index=index,
                         error_code=code)
                )
            results.append(
                make(mod.AlterReplicaLogDirTopicResult, topic_name=topic.name,
                     partitions=tuple(outcome))
            )
    return make(mod.AlterReplicaLogDirsResponse, throttle_time=0, results=tuple(results))
