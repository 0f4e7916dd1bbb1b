"""Produce (key 0): validate batches by their headers, append, answer base offsets.

No per-record work happens here: validation reads batch headers and checks CRCs over
whole batches; offsets are assigned by rewriting headers in place.

A partition this broker does not lead answers NOT_LEADER_OR_FOLLOWER; from v10 (KIP-951)
with the current leader and epoch and, in ``node_endpoints``, where that leader is, as
Kafka's ``KafkaApis.handleProduceRequest`` does, so the client needs no Metadata round trip.

Authorization, in Kafka's order: a request holding transactional batches needs a
transactional id and Write on it (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED for the whole
request, as Kafka answers even without an authorizer when the id is missing); then each
topic needs Write (TOPIC_AUTHORIZATION_FAILED, before "does it exist"). An idempotent
producer needs nothing more here: IdempotentWrite on the Cluster is asked at InitProducerId
only (Kafka 3.0+). Internal topics stay refused with INVALID_TOPIC_EXCEPTION for everyone
who may write them, and control batches with INVALID_RECORD: only the coordinators append
there, through their own paths (Kafka lets the client id ``__admin_client`` write internal
topics; oncelog lets no client).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from oncelog.broker.api import RequestContext, handles
from oncelog.broker.authz import allowed
from oncelog.broker.cluster_view import (
    TRANSACTION_KEY,
    BrokerEndpoint,
    ClusterView,
    broker_on,
    check_leader,
)
from oncelog.cluster.metadata import NO_LEADER
from oncelog.errors import ErrorCode, KafkaError
from oncelog.protocol import versions
from oncelog.protocol.build import make, response_module, to_ms
from oncelog.protocol.error_response import error_response
from oncelog.records.batch import (
    ATTR_TRANSACTIONAL,
    ATTRIBUTES_OFFSET,
    MAGIC_OFFSET,
    BatchHeader,
)
from oncelog.records.codec import decode_batch
from oncelog.records.validate import validate_batches
from oncelog.security.acl import AclOperation, ResourceType
from oncelog.storage.verification import SENTINEL

if TYPE_CHECKING:
    from oncelog.broker.cluster.replica_manager import ReplicaManager
    from oncelog.broker.partition import Partition

log = logging.getLogger(__name__)


@handles(versions.PRODUCE, 3, 12)
async def handle_produce(ctx: RequestContext, request: Any) -> Any:
    registry = ctx.services.partitions
    view = ctx.services.cluster
    mod = response_module(versions.PRODUCE, ctx.api_version)
    acks = int(request.acks)
    if _has_transactional_records(request) and not (
        request.transactional_id
        and allowed(ctx, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID,
                    request.transactional_id)
    ):
        if not request.transactional_id:  # (a denied id has its audit line)
            log.info("produce from client %s refused: transactional batches without a "
                     "transactional id", ctx.client_id)
        return None if acks == 0 else error_response(
            versions.PRODUCE, ctx.api_version, request,
            ErrorCode.transactional_id_authorization_failed)
    writable = {t.name for t in request.topic_data
                if allowed(ctx, AclOperation.WRITE, ResourceType.TOPIC, t.name)}
    replication = ctx.services.replication
    timeout_ms = to_ms(request.timeout)
    # acks=all appends waiting for the ISR (cluster mode): (response fields, partition, end).
    waiting: list[tuple[dict[str, Any], Partition, int]] = []
    topics: list[tuple[str, list[dict[str, Any]]]] = []
    leader_endpoints: dict[int, BrokerEndpoint] = {}
    for topic_data in request.topic_data:
        name = topic_data.name
        responses = []
        for pdata in topic_data.partition_data:
            code = ErrorCode.none
            message: str | None = None
            base_offset = -1
            append_time = -1
            log_start = -1
            record_errors: list[tuple[int, str]] = []
            wait_until: int | None = None
            try:
                if name not in writable:
                    raise KafkaError(ErrorCode.topic_authorization_failed)  # audited
                if acks not in (0, 1, -1):
                    raise KafkaError(ErrorCode.invalid_required_acks, f"acks={acks}")
                info = registry.topics.get(name)
                if info is None:
                    raise KafkaError(ErrorCode.unknown_topic_or_partition, name)
                if info.internal:
                    raise KafkaError(
                        ErrorCode.invalid_topic_exception, f"cannot produce to internal {name}"
                    )
                check_leader(view, name, pdata.index)
                partition = registry.get(name, pdata.index)
                data = pdata.records
                if not data:
                    raise KafkaError(ErrorCode.corrupt_message, "no record batches")
                buf = bytearray(data)
                headers = validate_batches(
                    buf, max_batch_bytes=partition.config.max_message_bytes
                )
                if len(headers) != 1:
                    # Kafka's ProduceRequest.validateRecords, from v3 on. Several batches
                    # would each need their own transaction check and duplicate answer.
                    raise KafkaError(
                        ErrorCode.invalid_record,
                        f"{len(headers)} record batches for one partition; Produce v3+ "
                        "allows exactly one",
                    )
                if "compact" in partition.config.cleanup_policy.split(","):
                    record_errors = keyless_records(buf, f"{name}-{pdata.index}")
                    if record_errors:
                        log_start = partition.log_start_offset
                        raise KafkaError(ErrorCode.invalid_record,
                                         _record_errors_message(record_errors))
                guard = SENTINEL
                if headers[0].is_transactional:
                    # KIP-890: the guard first, so that a marker landing while the
                    # coordinator is asked makes the append fail, not open a transaction.
                    guard = partition.maybe_start_transaction_verification(
                        headers[0].producer_id, headers[0].producer_epoch)
                    await add_or_verify_transaction(
                        ctx, request.transactional_id, name, pdata.index, headers[0]
                    )
                if replication is not None:
                    replication.check_min_isr(partition, acks)
                result = partition.append(buf, headers, verification_guard=guard)
                base_offset = result.base_offset
                append_time = result.log_append_time
                log_start = partition.log_start_offset
                # The leader's follower tracking saw the append through the partition's
                # append listener (oncelog.broker.cluster.replication).
                if replication is not None and acks == -1:
                    wait_until = result.last_offset + 1
            except KafkaError as exc:
                code = exc.code
                message = exc.message or None
                if code not in (ErrorCode.unknown_topic_or_partition,
                                ErrorCode.not_leader_or_follower,
                                ErrorCode.topic_authorization_failed):
                    log.info(
                        "produce to %s-%d from client %s rejected: %s",
                        name, pdata.index, ctx.client_id, exc,
                    )
            current_leader = None
            if code is ErrorCode.not_leader_or_follower and ctx.api_version >= 10:
                current_leader = _current_leader(mod, view, name, pdata.index, leader_endpoints,
                                                 ctx.session.listener)
            fields: dict[str, Any] = dict(
                index=pdata.index,
                error_code=code,
                base_offset=base_offset,
                log_append_time=_timestamp(append_time),
                log_start_offset=log_start,
                record_errors=tuple(
                    make(mod.BatchIndexAndErrorMessage, batch_index=index,
                         batch_index_error_message=text)
                    for index, text in record_errors
                ),
                error_message=message,
                **({} if current_leader is None else {"current_leader": current_leader}),
            )
            responses.append(fields)
            if wait_until is not None and code is ErrorCode.none:
                waiting.append((fields, partition, wait_until))
        topics.append((name, responses))
    if waiting:
        await _wait_for_acks(replication, waiting, timeout_ms)
    if acks == 0:
        return None
    return make(
        mod.ProduceResponse,
        responses=tuple(
            make(mod.TopicProduceResponse, name=name, partition_responses=tuple(
                make(mod.PartitionProduceResponse, **fields) for fields in responses
            ))
            for name, responses in topics
        ),
        throttle_time=0,
        node_endpoints=tuple(
            make(mod.NodeEndpoint, node_id=b.node_id, host=b.host, port=b.port, rack=b.rack)
            for b in leader_endpoints.values()
        ),
    )


def _has_transactional_records(request: Any) -> bool:
    """Kafka's ``RequestUtils.hasTransactionalRecords``: is the first batch of some
    partition transactional (control batches are too)?"""
    for topic_data in request.topic_data:
        for pdata in topic_data.partition_data:
            data = pdata.records
            if len(data or b"") > ATTRIBUTES_OFFSET + 1 and data[MAGIC_OFFSET] >= 2 and (
                int.from_bytes(data[ATTRIBUTES_OFFSET:ATTRIBUTES_OFFSET + 2], "big")
                & ATTR_TRANSACTIONAL
            ):
                return True
    return False


async def _wait_for_acks(
    replication: ReplicaManager | None,
    waiting: list[tuple[dict[str, Any], Partition, int]],
    timeout_ms: int,
) -> None:
    """acks=all (Kafka's DelayedProduce): each append is answered once the high watermark
    reaches its end, with NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR fell below
    min.insync.replicas meanwhile, or REQUEST_TIMED_OUT after the request's timeout."""
    assert replication is not None
    codes = await replication.wait_for_all_acks(
        [(partition, end) for _, partition, end in waiting], timeout_ms
    )
    for (fields, partition, _), code in zip(waiting, codes, strict=True):
        if code is not ErrorCode.none:
            log.info("acks=all produce to %s answered %s", partition.name, code.name)
            fields["error_code"] = code


def _current_leader(
    mod: Any, view: ClusterView, topic: str, index: int, endpoints: dict[int, BrokerEndpoint],
    listener: str,
) -> Any:
    """KIP-951: the partition's leader and epoch as this broker knows them ((-1, -1) if it
    does not), and the leader's endpoint added to ``endpoints`` if it is a live broker."""
    state = view.partition(topic, index)
    leader, epoch = (-1, -1) if state is None else (state.leader, state.leader_epoch)
    broker = broker_on(view, leader, listener)
    if broker is not None:
        endpoints[broker.node_id] = broker
    return make(mod.LeaderIdAndEpoch, leader_id=leader, leader_epoch=epoch)


def keyless_records(buf: bytearray, partition_name: str) -> list[tuple[int, str]]:
    """Kafka refuses records without a key on a compacted topic: the index of each such
    record in the batch, with its message (a compressed batch is decompressed to look)."""
    _, records = decode_batch(buf, verify_crc=False)
    message = (
        f"Compacted topic cannot accept message without key in topic partition {partition_name}"
    )
    return [(index, message) for index, record in enumerate(records) if record.key is None]


def _record_errors_message(errors: list[tuple[int, str]]) -> str:
    """The produce error message Kafka gives with record errors (the first three shown)."""
    shown = ", ".join(
        f"RecordError(batchIndex={index}, message='{text}')" for index, text in errors[:3]
    )
    return (
        f"One or more records have been rejected due to {len(errors)} record errors in total, "
        f"and only showing the first three errors at most: [{shown}]"
    )


async def add_or_verify_transaction(
    ctx: RequestContext,
    transactional_id: str | None,
    topic: str,
    partition: int,
    header: BatchHeader,
) -> None:
    """Transactional data must belong to the ongoing transaction of exactly this producer id
    and epoch, and that transaction must hold this partition: otherwise a late or zombie
    write could land outside any transaction, or inside one its writer no longer owns.

    Produce v12 (transactions v2, KIP-890 part 2) adds the partition itself: the broker
    asks the coordinator to add it (AddPartitionsToTxn's rules: the epoch must be the
    client's current one) before appending. Below v12 the partition must already be in the
    transaction (KIP-890 part 1 verification). The request version decides, not the
    finalized ``transaction.version``: Kafka 4.4 at level 1 adds on Produce v12 too
    (tests/integration/test_txn_v2_differential.py); clients only send v12 at level 2.

    The coordinator is the leader of the id's ``__transaction_state`` partition: this
    broker's own coordinator, or in a cluster another broker, asked with AddPartitionsToTxn
    v4 (Kafka's AddPartitionsToTxnManager); never this broker's coordinator for an id it
    does not own.

    The coordinator's answer is translated as Kafka's AddPartitionsToTxnManager and
    ReplicaManager do for produce: PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH;
    TRANSACTION_ABORTABLE stays from v11 (clients that know it) and becomes INVALID_TXN_STATE
    below; a coordinator that is not there (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
    COORDINATOR_LOAD_IN_PROGRESS, NETWORK_EXCEPTION) becomes NOT_ENOUGH_REPLICAS, which every
    producer retries without a metadata refresh."""
    if not transactional_id:
        raise KafkaError(
            ErrorCode.invalid_txn_state,
            f"transactional batch of producer {header.producer_id} without a transactional id",
        )
    tp = (topic, partition)
    view = ctx.services.cluster
    coordinator = view.coordinator(TRANSACTION_KEY, transactional_id).leader
    verifier = ctx.services.txn_verifier
    if coordinator == view.node_id:
        if ctx.api_version >= 12:
            answers = await ctx.services.transactions.handle_add_partitions(
                transactional_id, header.producer_id, header.producer_epoch, [tp]
            )
        else:
            answers = ctx.services.transactions.verify_partitions(
                transactional_id, header.producer_id, header.producer_epoch, [tp]
            )
    elif coordinator == NO_LEADER or verifier is None:
        answers = {tp: ErrorCode.coordinator_not_available}
    else:  # Kafka's AddPartitionsToTxnManager: ask the coordinator's broker
        answers = await verifier.add_or_verify(
            coordinator, transactional_id, header.producer_id, header.producer_epoch, [tp],
            verify_only=ctx.api_version < 12,
        )
    code = answers[tp]
    if code is ErrorCode.none:
        return
    if code is ErrorCode.producer_fenced:
        code = ErrorCode.invalid_producer_epoch
    elif code is ErrorCode.transaction_abortable and ctx.api_version < 11:
        code = ErrorCode.invalid_txn_state
    elif code in _UNVERIFIED or (
        code is ErrorCode.concurrent_transactions and ctx.api_version < 12
    ):
        raise KafkaError(
            ErrorCode.not_enough_replicas,
            f"Unable to verify the partition has been added to the transaction. "
            f"Underlying error: {code.name.upper()}",
        )
    raise KafkaError(
        code,
        f"{topic}-{partition}: producer {header.producer_id} epoch {header.producer_epoch} "
        f"is not writing an ongoing transaction of {transactional_id!r} that holds it",
    )


# Coordinator answers meaning "not verified yet" (Kafka's ReplicaManager turns them into
# NOT_ENOUGH_REPLICAS for produce: older clients do not retry them on the produce path).
# CONCURRENT_TRANSACTIONS (the transaction is mid-transition, e.g. its AddPartitionsToTxn
# waiting for the ISR) too, below Produce v12 only: a transactions v2 producer retries it.
_UNVERIFIED = frozenset({
    ErrorCode.network_exception,
    ErrorCode.coordinator_load_in_progress,
    ErrorCode.coordinator_not_available,
    ErrorCode.not_coordinator,
})


def _timestamp(ms: int) -> Any:
    if ms < 0:
        return None
    import datetime

    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
