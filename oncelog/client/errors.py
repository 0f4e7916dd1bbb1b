"""Client errors: one family, each class carrying a Kafka error code.

Kafka sorts errors the client sees into three kinds, and so does this module:

- **retriable** (``RetriableError``): the client retries them itself with backoff (leader
  moved, coordinator loading, concurrent transactions, timeouts, lost connections). They
  reach the application only when the retries run out of time.
- **abortable** (``AbortableError``): the current transaction cannot commit; the producer
  stays usable. Call ``abort_transaction()`` and run the transaction again.
- **fatal** (``FatalError``): the producer is unusable (fenced by a newer instance,
  unsupported version, authorization). Close it; create a new one to go on.

``error_for(code, message)`` turns a wire error code into the right named class; codes
without a class of their own become ``RetriableError`` or ``KafkaClientError`` according to
Kafka's retriable flag (kio's ``ErrorCode.retriable``).
"""

from __future__ import annotations

from typing import ClassVar

from kio.schema.errors import ErrorCode

__all__ = [
    "AbortableError",
    "AuthenticationError",
    "BrokerConnectionError",
    "CommitFailedError",
    "ConcurrentTransactionsError",
    "ConfigError",
    "CoordinatorLoadInProgressError",
    "CoordinatorNotAvailableError",
    "CorruptRecordError",
    "ErrorCode",
    "FatalError",
    "FencedInstanceIdError",
    "GroupAuthorizationFailedError",
    "IllegalGenerationError",
    "IllegalStateError",
    "InvalidProducerEpochError",
    "InvalidTxnStateError",
    "KafkaClientError",
    "KafkaTimeoutError",
    "MessageSizeTooLargeError",
    "NotCoordinatorError",
    "NotLeaderOrFollowerError",
    "NotSupportedError",
    "OffsetOutOfRangeError",
    "OutOfOrderSequenceError",
    "ProducerFencedError",
    "RebalanceInProgressError",
    "RetriableError",
    "TopicAlreadyExistsError",
    "TopicAuthorizationFailedError",
    "TransactionAbortableError",
    "TransactionCoordinatorFencedError",
    "TransactionalIdAuthorizationFailedError",
    "UnknownMemberIdError",
    "UnknownProducerIdError",
    "UnknownTopicOrPartitionError",
    "UnsupportedVersionError",
    "error_for",
    "unexpected_error",
]


class KafkaClientError(Exception):
    """Base of every error this client raises. ``code`` is the Kafka error code, or None
    for errors that are the client's own (illegal state, configuration)."""

    default_code: ClassVar[ErrorCode | None] = None

    def __init__(self, message: str = "", code: ErrorCode | None = None) -> None:
        self.code: ErrorCode | None = code if code is not None else self.default_code
        self.message = message
        text = f"{self.code.name.upper()}: {message}" if self.code is not None else message
        if self.code is not None and not message:
            text = self.code.name.upper()
        super().__init__(text)

    @property
    def retriable(self) -> bool:
        return isinstance(self, RetriableError)

    @property
    def fatal(self) -> bool:
        return isinstance(self, FatalError)

    @property
    def abortable(self) -> bool:
        return isinstance(self, AbortableError)


class RetriableError(KafkaClientError):
    """Transient; retried inside the client until its time runs out."""


class AbortableError(KafkaClientError):
    """The ongoing transaction must be aborted; the producer can then start a new one."""


class FatalError(KafkaClientError):
    """The producer (or consumer) cannot go on; close it."""


# ---------------------------------------------------------------- client-side conditions


class ConfigError(KafkaClientError, ValueError):
    """An unknown or invalid configuration value."""


class IllegalStateError(KafkaClientError):
    """An API call that is not allowed in the current state (Java's IllegalStateException),
    e.g. ``send`` on a transactional producer outside a transaction."""


class NotSupportedError(KafkaClientError):
    """An operation this client (or the broker it talks to) does not offer."""


class KafkaTimeoutError(RetriableError):
    default_code = ErrorCode.request_timed_out


class BrokerConnectionError(RetriableError):
    default_code = ErrorCode.network_exception


class AuthenticationError(FatalError):
    """SASL authentication failed (Java's SaslAuthenticationException): wrong credentials,
    an unsupported mechanism (``code`` UNSUPPORTED_SASL_MECHANISM) or a refused exchange."""

    default_code = ErrorCode.sasl_authentication_failed


# What a request to a broker can fail with short of an answer: no connection, a timeout, a
# socket error, or a refused login. Brokers talking to each other retry on these.
CONNECTION_FAILURES: tuple[type[Exception], ...] = (
    BrokerConnectionError, KafkaTimeoutError, OSError, AuthenticationError,
)


class CommitFailedError(KafkaClientError):
    """An offset commit failed because the group rebalanced (generation or member gone)."""


# ---------------------------------------------------------------- retriable broker errors


class NotLeaderOrFollowerError(RetriableError):
    default_code = ErrorCode.not_leader_or_follower


class UnknownTopicOrPartitionError(RetriableError):
    default_code = ErrorCode.unknown_topic_or_partition


class CoordinatorNotAvailableError(RetriableError):
    default_code = ErrorCode.coordinator_not_available


class NotCoordinatorError(RetriableError):
    default_code = ErrorCode.not_coordinator


class CoordinatorLoadInProgressError(RetriableError):
    default_code = ErrorCode.coordinator_load_in_progress


class ConcurrentTransactionsError(RetriableError):
    default_code = ErrorCode.concurrent_transactions


# ---------------------------------------------------------------- fatal


class ProducerFencedError(FatalError):
    default_code = ErrorCode.producer_fenced


class InvalidProducerEpochError(FatalError):
    """The coordinator or a partition has seen a newer epoch: another instance took over."""

    default_code = ErrorCode.invalid_producer_epoch


class TransactionalIdAuthorizationFailedError(FatalError):
    """Also what a broker answers when two-phase commit is requested but not enabled."""

    default_code = ErrorCode.transactional_id_authorization_failed


class UnsupportedVersionError(FatalError):
    default_code = ErrorCode.unsupported_version


class InvalidTxnStateError(FatalError):
    default_code = ErrorCode.invalid_txn_state


class TransactionCoordinatorFencedError(FatalError):
    default_code = ErrorCode.transaction_coordinator_fenced


class FencedInstanceIdError(FatalError):
    default_code = ErrorCode.fenced_instance_id


# ---------------------------------------------------------------- abortable


class OutOfOrderSequenceError(AbortableError):
    default_code = ErrorCode.out_of_order_sequence_number


class UnknownProducerIdError(AbortableError):
    default_code = ErrorCode.unknown_producer_id


class TopicAuthorizationFailedError(AbortableError):
    default_code = ErrorCode.topic_authorization_failed


class GroupAuthorizationFailedError(AbortableError):
    default_code = ErrorCode.group_authorization_failed


class TransactionAbortableError(AbortableError):
    default_code = ErrorCode.transaction_abortable


# ---------------------------------------------------------------- other named errors


class MessageSizeTooLargeError(KafkaClientError):
    default_code = ErrorCode.message_too_large


class OffsetOutOfRangeError(KafkaClientError):
    default_code = ErrorCode.offset_out_of_range


class RebalanceInProgressError(KafkaClientError):
    default_code = ErrorCode.rebalance_in_progress


class IllegalGenerationError(KafkaClientError):
    default_code = ErrorCode.illegal_generation


class UnknownMemberIdError(KafkaClientError):
    default_code = ErrorCode.unknown_member_id


class TopicAlreadyExistsError(KafkaClientError):
    default_code = ErrorCode.topic_already_exists


class CorruptRecordError(KafkaClientError):
    """The consumer fetched a record batch it cannot decode (CRC mismatch, bad framing,
    undecompressable body). Java's consumer raises it from poll() the same way, wrapped in a
    KafkaException. Refetching returns the same bytes, so unlike CORRUPT_MESSAGE in a
    produce response this is not retried: the position stays at ``offset`` and every poll
    raises again until the application seeks past the batch. Not in ``error_for``'s table,
    which keeps the wire code retriable for the producer."""

    default_code = ErrorCode.corrupt_message

    def __init__(self, message: str, *, topic: str, partition: int, offset: int) -> None:
        super().__init__(message)
        self.topic = topic
        self.partition = partition
        self.offset = offset


_BY_CODE: dict[ErrorCode, type[KafkaClientError]] = {
    cls.default_code: cls
    for cls in (
        KafkaTimeoutError,
        BrokerConnectionError,
        NotLeaderOrFollowerError,
        UnknownTopicOrPartitionError,
        CoordinatorNotAvailableError,
        NotCoordinatorError,
        CoordinatorLoadInProgressError,
        ConcurrentTransactionsError,
        ProducerFencedError,
        InvalidProducerEpochError,
        TransactionalIdAuthorizationFailedError,
        UnsupportedVersionError,
        InvalidTxnStateError,
        TransactionCoordinatorFencedError,
        FencedInstanceIdError,
        OutOfOrderSequenceError,
        UnknownProducerIdError,
        TopicAuthorizationFailedError,
        GroupAuthorizationFailedError,
        TransactionAbortableError,
        MessageSizeTooLargeError,
        OffsetOutOfRangeError,
        RebalanceInProgressError,
        IllegalGenerationError,
        UnknownMemberIdError,
        TopicAlreadyExistsError,
        AuthenticationError,
    )
    if cls.default_code is not None
}
_BY_CODE[ErrorCode.record_list_too_large] = MessageSizeTooLargeError
_BY_CODE[ErrorCode.unsupported_sasl_mechanism] = AuthenticationError
_BY_CODE[ErrorCode.illegal_sasl_state] = AuthenticationError
# Fatal for a producer although they have no class of their own.
_FATAL_CODES = frozenset(
    {
        ErrorCode.cluster_authorization_failed,
        ErrorCode.unsupported_for_message_format,
        ErrorCode.invalid_transaction_timeout,
        ErrorCode.unsupported_compression_type,
    }
)


def error_for(code: ErrorCode | int, message: str = "") -> KafkaClientError:
    """The exception for a Kafka error code (``code`` must not be NONE)."""
    code = ErrorCode(code)
    cls = _BY_CODE.get(code)
    if cls is not None:
        return cls(message, code)
    if code in _FATAL_CODES:
        return FatalError(message, code)
    if code.retriable:
        return RetriableError(message, code)
    return KafkaClientError(message, code)


def unexpected_error(what: str, exc: BaseException) -> KafkaClientError:
    """The client error that reports a bug or an unexpected response met in ``what``
    (``exc`` is its cause), for a background task to hand to the caller it serves."""
    error = KafkaClientError(
        f"{what} failed: {type(exc).__name__}: {exc}", ErrorCode.unknown_server_error
    )
    error.__cause__ = exc
    return error
