"""Produce (key 0): validate batches by their headers, append, answer base offsets.

No per-record work happens here: validation reads batch headers and checks CRCs over
whole batches; offsets are assigned by rewriting headers in place.
"""

from __future__ import annotations

import logging
from typing import Any

from oncelog.broker.api import RequestContext, handles
from oncelog.coordinator.transaction.state import TransactionState
from oncelog.errors import ErrorCode, KafkaError
from oncelog.protocol import versions
from oncelog.protocol.build import make, response_module
from oncelog.records.batch import BatchHeader
from oncelog.records.validate import validate_batches

log = logging.getLogger(__name__)


@handles(versions.PRODUCE, 3, 11)
async def handle_produce(ctx: RequestContext, request: Any) -> Any:
    broker = ctx.broker
    registry = broker.partitions
    mod = response_module(versions.PRODUCE, ctx.api_version)
    acks = int(request.acks)
    topics = []
    for topic_data in request.topic_data:
        name = topic_data.name
        responses = []
        for pdata in topic_data.partition_data:
            code = ErrorCode.none
            message: str | None = None
            base_offset = -1
            append_time = -1
            log_start = -1
            try:
                if acks not in (0, 1, -1):
                    raise KafkaError(ErrorCode.invalid_required_acks, f"acks={acks}")
                info = registry.topics.get(name)
                if info is None:
                    raise KafkaError(ErrorCode.unknown_topic_or_partition, name)
                if info.internal:
                    raise KafkaError(
                        ErrorCode.invalid_topic_exception, f"cannot produce to internal {name}"
                    )
                partition = registry.get(name, pdata.index)
                data = pdata.records
                if not data:
                    raise KafkaError(ErrorCode.corrupt_message, "no record batches")
                buf = bytearray(data)
                headers = validate_batches(
                    buf, max_batch_bytes=partition.log.config.max_message_bytes
                )
                if headers[0].is_transactional:
                    verify_transaction(ctx, request.transactional_id, name, pdata.index, headers)
                result = partition.append(buf, headers, None)
                base_offset = result.base_offset
                append_time = result.log_append_time
                log_start = partition.log.log_start_offset
            except KafkaError as exc:
                code = exc.code
                message = exc.message or None
                if code not in (ErrorCode.unknown_topic_or_partition,):
                    log.info(
                        "produce to %s-%d from client %s rejected: %s",
                        name, pdata.index, ctx.client_id, exc,
                    )
            responses.append(
                make(
                    mod.PartitionProduceResponse,
                    index=pdata.index,
                    error_code=code,
                    base_offset=base_offset,
                    log_append_time=_timestamp(append_time),
                    log_start_offset=log_start,
                    record_errors=(),
                    error_message=message,
                )
            )
        topics.append(
            make(mod.TopicProduceResponse, name=name, partition_responses=tuple(responses))
        )
    if acks == 0:
        return None
    return make(mod.ProduceResponse, responses=tuple(topics), throttle_time=0)


def verify_transaction(
    ctx: RequestContext,
    transactional_id: str | None,
    topic: str,
    partition: int,
    headers: list[BatchHeader],
) -> None:
    """Transactional data must belong to an ongoing transaction that added this partition
    (KIP-890 part 1): otherwise a late or zombie write could land outside any transaction."""
    header = headers[0]
    if any(h.producer_id != header.producer_id or not h.is_transactional for h in headers):
        raise KafkaError(ErrorCode.invalid_record, "mixed batches in one transactional write")
    txn = ctx.broker.transactions.get(transactional_id) if transactional_id else None
    if txn is None or txn.producer_id != header.producer_id:
        raise KafkaError(
            ErrorCode.invalid_txn_state,
            f"producer {header.producer_id} has no transaction {transactional_id!r}",
        )
    if header.producer_epoch < txn.producer_epoch:
        raise KafkaError(
            ErrorCode.invalid_producer_epoch,
            f"producer {header.producer_id} epoch {header.producer_epoch} is fenced "
            f"(current {txn.producer_epoch})",
        )
    if txn.state is not TransactionState.ONGOING or (topic, partition) not in txn.partitions:
        raise KafkaError(
            ErrorCode.invalid_txn_state,
            f"{topic}-{partition} is not part of an ongoing transaction of {transactional_id!r}",
        )


def _timestamp(ms: int) -> Any:
    if ms < 0:
        return None
    import datetime

    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
