"""InitProducerId (key 22) for idempotent producers, and DescribeProducers (key 61).

Every InitProducerId goes to the transaction coordinator, which owns producer ids. An
idempotent producer (no transactional id) always gets a fresh producer id with epoch 0, as
Kafka does (also when it passes its current id and epoch for a KIP-360 bump). Producer ids
come from durable blocks, so a restart never hands one out twice.

Authorization, as Kafka 4.4's KafkaApis: with a transactional id, Write on it, and with
``enable2Pc`` also TwoPhaseCommit on it (KIP-939), both refused with
TRANSACTIONAL_ID_AUTHORIZATION_FAILED; ``keepPreparedTxn`` asks TwoPhaseCommit too (Kafka
4.4's coordinator answers it UNSUPPORTED_VERSION, so there is no Kafka rule to follow;
keeping a prepared transaction is a two-phase-commit privilege, as the design says).
Without a transactional id: IdempotentWrite on the Cluster or Write on some topic (Kafka
3.0+), else CLUSTER_AUTHORIZATION_FAILED. DescribeProducers needs Read on each topic
(TOPIC_AUTHORIZATION_FAILED for its partitions, before "does it exist").
"""

from __future__ import annotations

import logging
from typing import Any

from oncelog.broker.api import RequestContext, handles
from oncelog.broker.api.compat import fenced_for_version
from oncelog.broker.api.transactions import txn_coordinator_error
from oncelog.broker.authz import allowed, allowed_on_any, cluster_allowed
from oncelog.broker.cluster_view import check_leader
from oncelog.errors import ErrorCode, KafkaError
from oncelog.protocol import versions
from oncelog.protocol.build import make, response_module, to_ms
from oncelog.security.acl import AclOperation, ResourceType

log = logging.getLogger(__name__)


@handles(versions.INIT_PRODUCER_ID, 0, 6)
async def handle_init_producer_id(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(versions.INIT_PRODUCER_ID, ctx.api_version)
    if (error := _init_producer_id_refusal(ctx, request)) is not ErrorCode.none or (
        request.transactional_id is not None
        and (error := txn_coordinator_error(ctx, request.transactional_id))
        is not ErrorCode.none
    ):
        return make(mod.InitProducerIdResponse, throttle_time=0, error_code=error,
                    producer_id=-1, producer_epoch=-1, ongoing_txn_producer_id=-1,
                    ongoing_txn_producer_epoch=-1)
    # One path for every producer id: the transaction coordinator decides (a fresh id for an
    # idempotent producer; bump, fence, 2PC for a transactional one).
    result = await ctx.services.transactions.handle_init_producer_id(
        request.transactional_id,
        to_ms(request.transaction_timeout),
        int(getattr(request, "producer_id", -1)),
        int(getattr(request, "producer_epoch", -1)),
        enable_2pc=bool(getattr(request, "enable2_pc", False)),
        keep_prepared=bool(getattr(request, "keep_prepared_txn", False)),
    )
    code = fenced_for_version(result.error, ctx.api_version, 4)
    if request.transactional_id is None and code is ErrorCode.none:
        log.info("client %s: new idempotent producer id %d", ctx.client_id, result.producer_id)
    return make(
        mod.InitProducerIdResponse,
        throttle_time=0,
        error_code=code,
        producer_id=result.producer_id,
        producer_epoch=result.producer_epoch,
        ongoing_txn_producer_id=result.ongoing_txn_producer_id,
        ongoing_txn_producer_epoch=result.ongoing_txn_producer_epoch,
    )


def _init_producer_id_refusal(ctx: RequestContext, request: Any) -> ErrorCode:
    """The authorization answer of an InitProducerId (NONE: allowed)."""
    transactional_id = request.transactional_id
    if transactional_id is None:
        if allowed_on_any(ctx, AclOperation.WRITE, ResourceType.TOPIC) or cluster_allowed(
            ctx, AclOperation.IDEMPOTENT_WRITE
        ):
            return ErrorCode.none
        return ErrorCode.cluster_authorization_failed
    txn_id = ResourceType.TRANSACTIONAL_ID
    if not allowed(ctx, AclOperation.WRITE, txn_id, transactional_id):
        return ErrorCode.transactional_id_authorization_failed
    two_phase = bool(getattr(request, "enable2_pc", False)) or bool(
        getattr(request, "keep_prepared_txn", False))
    if two_phase and not allowed(ctx, AclOperation.TWO_PHASE_COMMIT, txn_id, transactional_id):
        return ErrorCode.transactional_id_authorization_failed
    return ErrorCode.none


@handles(versions.DESCRIBE_PRODUCERS, 0, 0)
async def handle_describe_producers(ctx: RequestContext, request: Any) -> Any:
    mod = response_module(versions.DESCRIBE_PRODUCERS, ctx.api_version)
    registry = ctx.services.partitions
    topics = []
    for topic in request.topics:
        partitions = []
        readable = allowed(ctx, AclOperation.READ, ResourceType.TOPIC, topic.name)
        for index in topic.partition_indexes:
            code, message, producers = ErrorCode.none, None, ()
            try:
                if not readable:
                    raise KafkaError(ErrorCode.topic_authorization_failed)
                check_leader(ctx.services.cluster, topic.name, int(index))
                partition = registry.get(topic.name, int(index))
                producers = tuple(
                    make(
                        mod.ProducerState,
                        producer_id=p.producer_id,
                        producer_epoch=p.producer_epoch,
                        last_sequence=p.last_sequence,
                        last_timestamp=p.last_timestamp,
                        coordinator_epoch=p.coordinator_epoch,
                        current_txn_start_offset=p.current_txn_start_offset,
                    )
                    for p in partition.producers()
                )
            except KafkaError as exc:
                code, message = exc.code, exc.message
            partitions.append(
                make(
                    mod.PartitionResponse,
                    partition_index=index,
                    error_code=code,
                    error_message=message,
                    active_producers=producers,
                )
            )
        topics.append(make(mod.TopicResponse, name=topic.name, partitions=tuple(partitions)))
    return make(mod.DescribeProducersResponse, throttle_time=0, topics=tuple(topics))
