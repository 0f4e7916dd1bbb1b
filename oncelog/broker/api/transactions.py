"""Transaction APIs: AddPartitionsToTxn (24), AddOffsetsToTxn (25), EndTxn (26),
WriteTxnMarkers (27), DescribeTransactions (65), ListTransactions (66).

Thin: validate what only the broker knows (do the topics exist), call the transaction
coordinator at ``ctx.services.transactions``, build the response. InitProducerId lives in
``producers.py``; TxnOffsetCommit belongs to the group coordinator.

Clients that predate PRODUCER_FENCED (AddPartitionsToTxn/AddOffsetsToTxn/EndTxn below v2)
get INVALID_PRODUCER_EPOCH instead, as Kafka answers them. Version ranges: librdkafka,
kafka-python (<= v3 of the client APIs) and aiokafka (v0) all fit; v4+ of
AddPartitionsToTxn is the batched form a partition leader uses (KIP-890).

Authorization, as Kafka's KafkaApis asks it, before anything else (the coordinator too):
AddPartitionsToTxn v0-v3, AddOffsetsToTxn and EndTxn need Write on the transactional id
(TRANSACTIONAL_ID_AUTHORIZATION_FAILED); AddPartitionsToTxn v0-v3 then Write on each topic
(TOPIC_AUTHORIZATION_FAILED there, OPERATION_NOT_ATTEMPTED on the others; an internal
topic is never writable this way, with or without an authorizer, as in Kafka);
AddOffsetsToTxn then Read on the group (GROUP_AUTHORIZATION_FAILED). What only brokers send
(AddPartitionsToTxn v4+, WriteTxnMarkers) needs ClusterAction on the Cluster (WriteTxnMarkers
also takes Alter), else CLUSTER_AUTHORIZATION_FAILED on the whole request: a broker's
principal has it by being in ``super.users``, and a client id proves nothing once an
authorizer is configured. ListTransactions shows only the transactional ids the principal
may Describe; DescribeTransactions answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED for the
others, and leaves out the partitions of topics it may not Describe.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, cast

from oncelog.broker.api import RequestContext, handles
from oncelog.broker.api.compat import fenced_for_version
from oncelog.broker.authz import allowed, cluster_allowed
from oncelog.broker.cluster_view import TRANSACTION_KEY, check_leader, coordinator_error
from oncelog.broker.markers import LocalMarkerWriter, sender_broker
from oncelog.coordinator.transaction.results import DescribedTransaction
from oncelog.errors import ErrorCode, KafkaError
from oncelog.internal_topics import INTERNAL_TOPICS, OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from oncelog.protocol import versions
from oncelog.protocol.build import make, response_module
from oncelog.protocol.error_response import error_response
from oncelog.security.acl import CLUSTER_NAME, AclOperation, ResourceType

if TYPE_CHECKING:
    from oncelog.coordinator.transaction import TopicPartition, TransactionCoordinator

log = logging.getLogger(__name__)


def _coordinator(ctx: RequestContext) -> TransactionCoordinator:
    coordinator = getattr(ctx.services, "transactions", None)
    if coordinator is None:
        raise RuntimeError("the broker has no transaction coordinator (services.transactions)")
    return cast("TransactionCoordinator", coordinator)


def txn_coordinator_error(ctx: RequestContext, transactional_id: str) -> ErrorCode:
    """NOT_COORDINATOR when this broker does not lead the transactional id's
    ``__transaction_state`` partition (the cluster view decides)."""
    return coordinator_error(ctx.services.cluster, TRANSACTION_KEY, transactional_id)


def _may_write(ctx: RequestContext, transactional_id: str) -> bool:
    return allowed(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id)


def _from_a_broker(ctx: RequestContext) -> bool:
    """ClusterAction on the Cluster: what a broker's principal has (the audit line of a
    refusal names the principal, the API and the client id)."""
    return cluster_allowed(ctx, AclOperation.CLUSTER_ACTION)


def _topic_results(mod: Any, answers: dict[TopicPartition, ErrorCode]) -> tuple[Any, ...]:
    by_topic: dict[str, list[Any]] = {}
    for (topic, index), code in answers.items():
        by_topic.setdefault(topic, []).append(
            make(mod.AddPartitionsToTxnPartitionResult, partition_index=index,
                 partition_error_code=code)
        )
    return tuple(
        make(mod.AddPartitionsToTxnTopicResult, name=topic, results_by_partition=tuple(parts))
        for topic, parts in by_topic.items()
    )


async def _add_partitions(
    ctx: RequestContext,
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    topics: Iterable[Any],
    verify_only: bool,
) -> dict[TopicPartition, ErrorCode]:
    wanted = [(t.name, int(p)) for t in topics for p in t.partitions]
    refused: dict[TopicPartition, ErrorCode] = {}
    if ctx.api_version < 4:  # a client's request
        if not _may_write(ctx, transactional_id):
            return dict.fromkeys(wanted, ErrorCode.transactional_id_authorization_failed)
        writable = {topic for topic in {tp[0] for tp in wanted} if topic not in INTERNAL_TOPICS
                    and allowed(ctx, AclOperation.WRITE, ResourceType.TOPIC, topic)}
        refused = {tp: ErrorCode.topic_authorization_failed
                   for tp in wanted if tp[0] not in writable}
    # Kafka checks the metadata cache, not this broker's replicas: in a cluster the
    # coordinator rarely holds the transaction's partitions itself.
    view = ctx.services.cluster
    refused.update({tp: ErrorCode.unknown_topic_or_partition for tp in wanted
                    if tp not in refused and view.partition(tp[0], tp[1]) is None})
    if refused:
        # One bad partition fails the whole request; the others were not attempted.
        return {tp: refused.get(tp, ErrorCode.operation_not_attempted) for tp in wanted}
    if (error := txn_coordinator_error(ctx, transactional_id)) is not ErrorCode.none:
        return dict.fromkeys(wanted, error)
    answers = await _coordinator(ctx).handle_add_partitions(
        transactional_id, int(producer_id), int(producer_epoch), wanted, verify_only=verify_only
    )
    return {tp: fenced_for_version(code, ctx.api_version, 2) for tp, code in answers.items()}


async def authorized_txn_offset_commit(
    ctx: RequestContext, request: Any, commit: Callable[[RequestContext, Any], Awaitable[Any]]
) -> Any:
    """TxnOffsetCommit's authorization, as Kafka's KafkaApis asks it before anything else:
    Write on the transactional id (TRANSACTIONAL_ID_AUTHORIZATION_FAILED), Read on the
    group (GROUP_AUTHORIZATION_FAILED), both answered on every partition; then Read on each
    topic: the partitions of the others are answered TOPIC_AUTHORIZATION_FAILED, and
    ``commit`` (the group coordinator's handling) gets the rest, if any is left."""
    if not _may_write(ctx, request.transactional_id):
        refused = ErrorCode.transactional_id_authorization_failed
    elif not allowed(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        refused = ErrorCode.group_authorization_failed
    else:
        names = {t.name for t in request.topics}
        readable = {n for n in names if allowed(ctx, AclOperation.READ, ResourceType.TOPIC, n)}
        if readable == names:
            return await commit(ctx, request)
        denied = error_response(versions.TXN_OFFSET_COMMIT, ctx.api_version, dataclasses.replace(
            request, topics=tuple(t for t in request.topics if t.name not in readable)),
            ErrorCode.topic_authorization_failed)
        rest = tuple(t for t in request.topics if t.name in readable)
        if not rest:
            return denied
        answer = await commit(ctx, dataclasses.replace(request, topics=rest))
        return dataclasses.replace(answer, topics=denied.topics + answer.topics)
    return error_response(versions.TXN_OFFSET_COMMIT, ctx.api_version, request, refused)


@handles(versions.ADD_PARTITIONS_TO_TXN, 0, 5)
async def handle_add_partitions_to_txn(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(versions.ADD_PARTITIONS_TO_TXN, ctx.api_version)
    if ctx.api_version < 4:
        answers = await _add_partitions(
            ctx,
            request.v3_and_below_transactional_id,
            request.v3_and_below_producer_id,
            request.v3_and_below_producer_epoch,
            request.v3_and_below_topics,
            verify_only=False,
        )
        return make(
            mod.AddPartitionsToTxnResponse,
            throttle_time=0,
            results_by_topic_v3_and_below=_topic_results(mod, answers),
        )
    if not _from_a_broker(ctx):
        return make(mod.AddPartitionsToTxnResponse, throttle_time=0,
                    error_code=ErrorCode.cluster_authorization_failed, results_by_transaction=())
    results = []
    for txn in request.transactions:
        answers = await _add_partitions(
            ctx, txn.transactional_id, txn.producer_id, txn.producer_epoch, txn.topics,
            verify_only=bool(txn.verify_only),
        )
        results.append(
            make(
                mod.AddPartitionsToTxnResult,
                transactional_id=txn.transactional_id,
                topic_results=_topic_results(mod, answers),
            )
        )
    return make(
        mod.AddPartitionsToTxnResponse,
        throttle_time=0,
        error_code=ErrorCode.none,
        results_by_transaction=tuple(results),
    )


@handles(versions.ADD_OFFSETS_TO_TXN, 0, 4)
async def handle_add_offsets_to_txn(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(versions.ADD_OFFSETS_TO_TXN, ctx.api_version)
    if not _may_write(ctx, request.transactional_id):
        code = ErrorCode.transactional_id_authorization_failed
    elif not allowed(ctx, AclOperation.READ, ResourceType.GROUP, request.group_id):
        code = ErrorCode.group_authorization_failed
    else:
        code = txn_coordinator_error(ctx, request.transactional_id)
    if code is ErrorCode.none:
        code = await _coordinator(ctx).handle_add_offsets(
            request.transactional_id,
            int(request.producer_id),
            int(request.producer_epoch),
            request.group_id,
        )
    return make(
        mod.AddOffsetsToTxnResponse,
        throttle_time=0,
        error_code=fenced_for_version(code, ctx.api_version, 2),
    )


@handles(versions.END_TXN, 0, 5)
async def handle_end_txn(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(versions.END_TXN, ctx.api_version)
    # EndTxn v5 is how a client says it uses transactions v2 (an epoch bump per transaction).
    client_version = 2 if ctx.api_version >= 5 else 0
    if not _may_write(ctx, request.transactional_id):
        error = ErrorCode.transactional_id_authorization_failed
    else:
        error = txn_coordinator_error(ctx, request.transactional_id)
    if error is not ErrorCode.none:
        return make(mod.EndTxnResponse, throttle_time=0, error_code=error, producer_id=-1,
                    producer_epoch=-1)
    result = await _coordinator(ctx).handle_end_txn(
        request.transactional_id,
        int(request.producer_id),
        int(request.producer_epoch),
        bool(request.committed),
        client_version=client_version,
    )
    return make(
        mod.EndTxnResponse,
        throttle_time=0,
        error_code=fenced_for_version(result.error, ctx.api_version, 2),
        producer_id=result.producer_id,
        producer_epoch=result.producer_epoch,
    )


def _write_client_marker(
    ctx: RequestContext, marker: Any, topic: str, index: int
) -> ErrorCode:
    """One partition of a WriteTxnMarkers request from a client (not the coordinator)."""
    what = "COMMIT" if marker.transaction_result else "ABORT"
    if marker.transaction_result:
        # Only the transaction coordinator decides that a transaction commits.
        return ErrorCode.cluster_authorization_failed
    if topic == TRANSACTION_STATE_TOPIC:
        # The transaction log holds the coordinator's own records, never client transactions.
        return ErrorCode.invalid_topic_exception
    try:
        check_leader(ctx.services.cluster, topic, index)
    except KafkaError as exc:
        return exc.code
    partition = ctx.services.partitions.find(topic, index)
    if partition is None:
        return ErrorCode.unknown_topic_or_partition
    producer_id, producer_epoch = int(marker.producer_id), int(marker.producer_epoch)
    coordinator_epoch = int(marker.coordinator_epoch)
    current = _coordinator(ctx).coordinator_epoch
    if coordinator_epoch > current:
        # The partition remembers the highest coordinator epoch it saw and refuses markers
        # below it (TRANSACTION_COORDINATOR_FENCED). A client's marker above the real
        # coordinator's epoch would fence that coordinator there for good: its markers for
        # every later transaction of the producer would be refused.
        log.warning(
            "client %s (%s): %s marker for producer %d on %s-%d refused: coordinator epoch "
            "%d is above the transaction coordinator's %d",
            ctx.client_id, ctx.client_host, what, producer_id, topic, index,
            coordinator_epoch, current,
        )
        return ErrorCode.invalid_request
    try:
        offset = partition.append_marker(producer_id, producer_epoch, coordinator_epoch, False)
        if topic == OFFSETS_TOPIC:
            ctx.services.groups.on_txn_marker(index, producer_id, False, producer_epoch)
    except KafkaError as exc:
        log.warning(
            "client %s (%s): %s marker for producer %d epoch %d on %s-%d refused: %s",
            ctx.client_id, ctx.client_host, what, producer_id, producer_epoch, topic, index, exc,
        )
        return exc.code
    log.warning(
        "client %s (%s) aborted the transaction of producer %d epoch %d on %s-%d: "
        "ABORT marker at offset %d (LSO now %d)",
        ctx.client_id, ctx.client_host, producer_id, producer_epoch, topic, index, offset,
        partition.last_stable_offset,
    )
    return ErrorCode.none


@handles(versions.WRITE_TXN_MARKERS, 1, 2)
async def handle_write_txn_markers(ctx: RequestContext, request: Any) -> Any:
    """Markers from a client: Kafka's Admin.abortTransaction for a hanging transaction
    (one that no coordinator will ever finish). Without an authorizer Kafka accepts them;
    here ABORT markers are written through the partition (and the group coordinator drops
    the producer's pending offsets on ``__consumer_offsets``), while COMMIT markers stay
    refused with CLUSTER_AUTHORIZATION_FAILED: only the coordinator decides a commit.
    A coordinator epoch above the transaction coordinator's own is refused with
    INVALID_REQUEST (Kafka would write it and so fence the real coordinator on that
    partition); the epoch an admin tool reads from DescribeProducers is never above it.
    The coordinator's own markers are local calls (``oncelog.broker.markers``) on one node;
    in a cluster, a coordinator on another broker sends them here (``_write_broker_markers``).
    """
    mod = response_module(versions.WRITE_TXN_MARKERS, ctx.api_version)
    if not allowed(ctx, AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME, audit=False) \
            and not _from_a_broker(ctx):
        return error_response(versions.WRITE_TXN_MARKERS, ctx.api_version, request,
                              ErrorCode.cluster_authorization_failed)
    sender = sender_broker(ctx.client_id)
    if sender is not None and ctx.services.cluster.broker(sender) is not None:
        return await _write_broker_markers(ctx, mod, request, sender)
    markers = []
    for marker in request.markers:
        if marker.transaction_result:
            log.warning(
                "client %s (%s) sent a COMMIT marker for producer %d: refused, only the "
                "transaction coordinator commits",
                ctx.client_id, ctx.client_host, marker.producer_id,
            )
        topics = tuple(
            make(
                mod.WritableTxnMarkerTopicResult,
                name=topic.name,
                partitions=tuple(
                    make(
                        mod.WritableTxnMarkerPartitionResult,
                        partition_index=index,
                        error_code=_write_client_marker(ctx, marker, topic.name, int(index)),
                    )
                    for index in topic.partition_indexes
                ),
            )
            for topic in marker.topics
        )
        markers.append(
            make(mod.WritableTxnMarkerResult, producer_id=marker.producer_id, topics=topics)
        )
    return make(mod.WriteTxnMarkersResponse, markers=tuple(markers))


async def _write_broker_markers(ctx: RequestContext, mod: Any, request: Any, sender: int) -> Any:
    """WriteTxnMarkers from the transaction coordinator on broker ``sender``: each marker
    is written on the partitions this broker leads (NOT_LEADER_OR_FOLLOWER elsewhere, which
    the coordinator retries after the metadata moves). A marker whose coordinator epoch is
    older than one the partition saw for the producer is refused with
    TRANSACTION_COORDINATOR_FENCED by the partition's producer state."""
    writer = LocalMarkerWriter(ctx.services.partitions, ctx.services.groups,
                               ctx.services.replication)
    markers = []
    for marker in request.markers:
        answers: dict[tuple[str, int], ErrorCode] = {}
        mine: list[tuple[str, int]] = []
        for topic in marker.topics:
            for index in topic.partition_indexes:
                tp = (str(topic.name), int(index))
                try:
                    check_leader(ctx.services.cluster, *tp)
                    mine.append(tp)
                except KafkaError as exc:
                    answers[tp] = exc.code
        if mine:
            answers.update(await writer.write_markers(
                int(marker.producer_id), int(marker.producer_epoch),
                int(marker.coordinator_epoch), bool(marker.transaction_result), mine))
        if refused := {tp: code.name for tp, code in answers.items() if code is not ErrorCode.none}:
            log.info("markers from the coordinator on broker %d for producer %d refused: %s",
                     sender, marker.producer_id, refused)
        by_topic: dict[str, list[Any]] = {}
        for (topic_name, index), code in answers.items():
            by_topic.setdefault(topic_name, []).append(
                make(mod.WritableTxnMarkerPartitionResult, partition_index=index,
                     error_code=code))
        markers.append(make(
            mod.WritableTxnMarkerResult, producer_id=marker.producer_id,
            topics=tuple(make(mod.WritableTxnMarkerTopicResult, name=name,
                              partitions=tuple(parts))
                         for name, parts in by_topic.items())))
    return make(mod.WriteTxnMarkersResponse, markers=tuple(markers))


@handles(versions.LIST_TRANSACTIONS, 0, 2)
async def handle_list_transactions(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(versions.LIST_TRANSACTIONS, ctx.api_version)
    result = _coordinator(ctx).list_transactions(
        state_filters=tuple(request.state_filters),
        producer_id_filters=tuple(int(p) for p in request.producer_id_filters),
        duration_filter_ms=int(getattr(request, "duration_filter", -1)),
        transactional_id_pattern=getattr(request, "transactional_id_pattern", None),
    )
    return make(
        mod.ListTransactionsResponse,
        throttle_time=0,
        error_code=result.error,
        unknown_state_filters=result.unknown_state_filters,
        transaction_states=tuple(
            make(
                mod.TransactionState,
                transactional_id=t.transactional_id,
                producer_id=t.producer_id,
                transaction_state=t.state.wire_name,
            )
            for t in result.transactions
            if allowed(ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID,
                       t.transactional_id)
        ),
    )


@handles(versions.DESCRIBE_TRANSACTIONS, 0, 0)
async def handle_describe_transactions(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(versions.DESCRIBE_TRANSACTIONS, ctx.api_version)
    states = []
    ids = list(request.transactional_ids)
    describable = [tid for tid in ids
                   if allowed(ctx, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, tid)]
    described = {d.transactional_id: d
                 for d in _coordinator(ctx).describe_transactions(describable)}
    visible: dict[str, bool] = {}
    for tid in ids:
        # A refused id carries Kafka's zeros (its schema has no defaults).
        d = described.get(tid) or DescribedTransaction(
            tid, ErrorCode.transactional_id_authorization_failed, producer_id=0,
            producer_epoch=0, start_timestamp_ms=0)
        topics: dict[str, list[int]] = {}
        for topic, index in d.partitions:
            # Only the partitions of topics the principal may Describe, as Kafka.
            if topic not in visible:
                visible[topic] = allowed(ctx, AclOperation.DESCRIBE, ResourceType.TOPIC, topic)
            if visible[topic]:
                topics.setdefault(topic, []).append(index)
        states.append(
            make(
                mod.TransactionState,
                error_code=d.error,
                transactional_id=d.transactional_id,
                transaction_state=d.state.wire_name if d.state is not None else "",
                transaction_timeout=d.timeout_ms,
                transaction_start_time=datetime.datetime.fromtimestamp(
                    d.start_timestamp_ms / 1000, tz=datetime.UTC
                ),
                producer_id=d.producer_id,
                producer_epoch=d.producer_epoch,
                topics=tuple(
                    make(mod.TopicData, topic=topic, partitions=tuple(ids))
                    for topic, ids in topics.items()
                ),
            )
        )
    return make(mod.DescribeTransactionsResponse, throttle_time=0, transaction_states=tuple(states))
