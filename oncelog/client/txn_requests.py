"""The transactional producer's requests and error classification, without I/O.

``txn_error`` sorts an error code of a transaction coordinator request as the Java
TransactionManager does (fenced, fatal, retriable, abortable). The builders here make the
AddPartitionsToTxn and TxnOffsetCommit requests for a given version, and
``check_add_partitions`` turns an AddPartitionsToTxn response into the error to raise.
``oncelog.client.aio.transaction_manager`` sends them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from oncelog.client.errors import (
    AbortableError,
    FatalError,
    KafkaClientError,
    ProducerFencedError,
    RetriableError,
    error_for,
)
from oncelog.client.types import ConsumerGroupMetadata, OffsetAndMetadata, TopicPartition
from oncelog.client.wire import nested, request
from oncelog.errors import ErrorCode
from oncelog.protocol import versions as api

__all__ = [
    "COORDINATOR_MOVED",
    "FENCING",
    "TXN_FATAL",
    "add_partitions_request",
    "check_add_partitions",
    "check_error_code",
    "txn_error",
    "txn_offset_commit_error",
    "txn_offset_commit_request",
]

# Errors of transactional coordinator requests, as the Java TransactionManager sorts them.
TXN_FATAL = frozenset(
    {
        ErrorCode.producer_fenced,
        ErrorCode.invalid_producer_epoch,
        ErrorCode.transactional_id_authorization_failed,
        ErrorCode.cluster_authorization_failed,
        ErrorCode.invalid_txn_state,
        ErrorCode.invalid_producer_id_mapping,
        ErrorCode.unsupported_version,
        ErrorCode.unsupported_for_message_format,
        ErrorCode.invalid_transaction_timeout,
        ErrorCode.transaction_coordinator_fenced,
    }
)
COORDINATOR_MOVED = frozenset({ErrorCode.not_coordinator, ErrorCode.coordinator_not_available})
FENCING = frozenset({ErrorCode.producer_fenced, ErrorCode.invalid_producer_epoch})


def txn_error(code: ErrorCode, what: str) -> KafkaClientError:
    """A transactional coordinator error, classified."""
    if code in FENCING:
        return ProducerFencedError(
            f"{what}: fenced by a newer producer with the same transactional.id", code
        )
    if code in TXN_FATAL:
        exc = error_for(code, what)
        return exc if isinstance(exc, FatalError) else FatalError(what, code)
    exc = error_for(code, what)
    if isinstance(exc, RetriableError | AbortableError):
        return exc
    return AbortableError(what, code)


def check_error_code(response: Any, what: str) -> None:
    """Raise the classified error of a response with one top-level error code."""
    if response.error_code != ErrorCode.none:
        raise txn_error(ErrorCode(response.error_code), what)


def add_partitions_request(
    version: int,
    transactional_id: str | None,
    producer_id: int,
    producer_epoch: int,
    tps: list[TopicPartition],
) -> Any:
    """AddPartitionsToTxn (the v3-and-below form, one transaction) for ``tps``."""
    by_topic: dict[str, list[int]] = defaultdict(list)
    for tp in tps:
        by_topic[tp.topic].append(tp.partition)
    topics = tuple(
        nested(
            api.ADD_PARTITIONS_TO_TXN,
            version,
            "AddPartitionsToTxnTopic",
            name=t,
            partitions=tuple(ps),
        )
        for t, ps in by_topic.items()
    )
    return request(
        api.ADD_PARTITIONS_TO_TXN,
        version,
        v3_and_below_transactional_id=transactional_id,
        v3_and_below_producer_id=producer_id,
        v3_and_below_producer_epoch=producer_epoch,
        v3_and_below_topics=topics,
    )


def check_add_partitions(response: Any) -> None:
    """Raise the error of an AddPartitionsToTxn response, if any: a fatal one first, then a
    retriable one, else the first (OPERATION_NOT_ATTEMPTED only when nothing else failed)."""
    errors: dict[TopicPartition, ErrorCode] = {}
    for topic in response.results_by_topic_v3_and_below:
        for part in topic.results_by_partition:
            code = ErrorCode(part.partition_error_code)
            if code != ErrorCode.none:
                errors[TopicPartition(topic.name, int(part.partition_index))] = code
    if not errors:
        return
    codes = set(errors.values()) - {ErrorCode.operation_not_attempted}
    for code in codes:
        exc = txn_error(code, f"AddPartitionsToTxn {sorted(errors)}")
        if isinstance(exc, FatalError):
            raise exc
    for code in codes:
        exc = txn_error(code, f"AddPartitionsToTxn {sorted(errors)}")
        if isinstance(exc, RetriableError):
            raise exc
    code = next(iter(codes or {ErrorCode.operation_not_attempted}))
    raise txn_error(code, f"AddPartitionsToTxn {sorted(errors)}")


def txn_offset_commit_request(
    version: int,
    transactional_id: str | None,
    producer_id: int,
    producer_epoch: int,
    group: ConsumerGroupMetadata,
    offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
) -> Any:
    """TxnOffsetCommit of ``offsets`` for ``group`` inside the producer's transaction."""
    by_topic: dict[str, list[tuple[int, OffsetAndMetadata]]] = defaultdict(list)
    for tp, om in offsets.items():
        meta = om if isinstance(om, OffsetAndMetadata) else OffsetAndMetadata(int(om))
        by_topic[tp.topic].append((tp.partition, meta))
    return request(
        api.TXN_OFFSET_COMMIT,
        version,
        transactional_id=transactional_id,
        group_id=group.group_id,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        generation_id=group.generation_id,
        member_id=group.member_id,
        group_instance_id=group.group_instance_id,
        topics=tuple(
            nested(
                api.TXN_OFFSET_COMMIT,
                version,
                "TxnOffsetCommitRequestTopic",
                name=t,
                partitions=tuple(
                    nested(
                        api.TXN_OFFSET_COMMIT,
                        version,
                        "TxnOffsetCommitRequestPartition",
                        partition_index=p,
                        committed_offset=m.offset,
                        committed_leader_epoch=m.leader_epoch,
                        committed_metadata=m.metadata,
                    )
                    for p, m in parts
                ),
            )
            for t, parts in by_topic.items()
        ),
    )


def txn_offset_commit_error(response: Any, group_id: str) -> KafkaClientError | None:
    """The error of a TxnOffsetCommit response (its first failed partition), or None. A
    rebalance of the group makes the transaction abortable, as in the Java client."""
    for topic in response.topics:
        for part in topic.partitions:
            code = ErrorCode(part.error_code)
            if code == ErrorCode.none:
                continue
            if code in (
                ErrorCode.unknown_member_id,
                ErrorCode.illegal_generation,
                ErrorCode.fenced_instance_id,
            ):
                return AbortableError(
                    f"TxnOffsetCommit: consumer group {group_id} rebalanced", code
                )
            return txn_error(code, f"TxnOffsetCommit {topic.name}-{part.partition_index}")
    return None
