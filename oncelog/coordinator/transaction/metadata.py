"""What the coordinator knows about one transactional id, and how it changes.

A change is two steps (Kafka's TransactionMetadata): ``prepare_*`` checks the transition
against the table in ``state.py``, marks it pending and returns an immutable
``TxnTransitMetadata``; the caller writes that to ``__transaction_state`` and only after the
append succeeded calls ``complete_transition``; on failure it calls ``cancel_transition``.
Nothing here changes the visible state before the log does.

Identities. A transaction is written by ``(producer_id, producer_epoch)``; markers carry the
same producer id. The *client identity* is the (producer id, epoch) the client must present:
normally the same pair, but after InitProducerId with KeepPreparedTxn (KIP-939) the client
gets a new epoch (or id) while the ongoing transaction keeps its own; that new identity is
kept in ``next_producer_id``/``next_producer_epoch`` while the state is Ongoing. In
PrepareCommit/PrepareAbort, ``next_*`` is the identity the client continues with once the
transaction completes, when it differs from the one the markers use (epoch bump per
transaction of KIP-890 part 2 with an exhausted epoch, or KIP-939). ``prev_producer_id`` and
``last_producer_epoch`` hold the client identity that ended the transaction (so a retried
EndTxn is recognised) or, after InitProducerId, the epoch before the bump (KIP-360 retries).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from oncelog.coordinator.transaction.state import (
    IllegalStateTransition,
    TransactionState,
    check_transition,
)
from oncelog.errors import ErrorCode, KafkaError

logger = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_PRODUCER_EPOCH = 2**15 - 1
# Kafka marks a two-phase-commit transaction by this timeout: it never times out.
TWO_PHASE_COMMIT_TIMEOUT_MS = 2**31 - 1
# Transaction version the client negotiated: 2 means an epoch bump on every EndTxn (KIP-890).
TV_EPOCH_BUMP = 2


def is_epoch_exhausted(epoch: int) -> bool:
    """Kafka never hands out MAX epoch so the coordinator can always fence one more time."""
    return epoch >= MAX_PRODUCER_EPOCH - 1


@dataclass(frozen=True, slots=True)
class TxnTransitMetadata:
    """The complete new state of one transactional id: what is written to the log."""

    state: TransactionState
    producer_id: int
    producer_epoch: int
    txn_timeout_ms: int
    partitions: frozenset[TopicPartition] = frozenset()
    txn_start_timestamp: int = -1
    txn_last_update_timestamp: int = -1
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    prev_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID
    next_producer_epoch: int = NO_PRODUCER_EPOCH
    client_transaction_version: int = 0

    def __post_init__(self) -> None:
        if self.producer_id < 0:
            raise ValueError(f"illegal producer id {self.producer_id}")
        if self.state is not TransactionState.DEAD and not (
            0 <= self.producer_epoch <= MAX_PRODUCER_EPOCH
        ):
            raise ValueError(f"illegal producer epoch {self.producer_epoch}")
        if self.state is TransactionState.EMPTY and self.partitions:
            raise ValueError("an Empty transaction has no partitions")

    @property
    def two_phase_commit(self) -> bool:
        return self.txn_timeout_ms == TWO_PHASE_COMMIT_TIMEOUT_MS


@dataclass(slots=True)
class TransactionMetadata:
    """The cached state of one transactional id (mutated only by ``complete_transition``)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    txn_timeout_ms: int
    state: TransactionState = TransactionState.EMPTY
    partitions: set[TopicPartition] = field(default_factory=set)
    txn_start_timestamp: int = -1
    txn_last_update_timestamp: int = -1
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    prev_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID
    next_producer_epoch: int = NO_PRODUCER_EPOCH
    client_transaction_version: int = 0
    pending_state: TransactionState | None = None

    # ------------------------------------------------------------------ views

    @classmethod
    def from_transit(cls, transactional_id: str, t: TxnTransitMetadata) -> TransactionMetadata:
        """Metadata as loaded from a log record."""
        return cls(
            transactional_id=transactional_id,
            producer_id=t.producer_id,
            producer_epoch=t.producer_epoch,
            txn_timeout_ms=t.txn_timeout_ms,
            state=t.state,
            partitions=set(t.partitions),
            txn_start_timestamp=t.txn_start_timestamp,
            txn_last_update_timestamp=t.txn_last_update_timestamp,
            last_producer_epoch=t.last_producer_epoch,
            prev_producer_id=t.prev_producer_id,
            next_producer_id=t.next_producer_id,
            next_producer_epoch=t.next_producer_epoch,
            client_transaction_version=t.client_transaction_version,
        )

    def _fields(self) -> dict[str, object]:
        return {
            "state": self.state,
            "producer_id": self.producer_id,
            "producer_epoch": self.producer_epoch,
            "txn_timeout_ms": self.txn_timeout_ms,
            "partitions": frozenset(self.partitions),
            "txn_start_timestamp": self.txn_start_timestamp,
            "txn_last_update_timestamp": self.txn_last_update_timestamp,
            "last_producer_epoch": self.last_producer_epoch,
            "prev_producer_id": self.prev_producer_id,
            "next_producer_id": self.next_producer_id,
            "next_producer_epoch": self.next_producer_epoch,
            "client_transaction_version": self.client_transaction_version,
        }

    def snapshot(self) -> TxnTransitMetadata:
        """The current state as a transit object (no transition is prepared)."""
        return TxnTransitMetadata(**self._fields())  # type: ignore[arg-type]

    @property
    def two_phase_commit(self) -> bool:
        return self.txn_timeout_ms == TWO_PHASE_COMMIT_TIMEOUT_MS

    @property
    def keeping_prepared(self) -> bool:
        """An ongoing transaction kept by InitProducerId(KeepPreparedTxn): the client now has
        a different identity and may only end it."""
        return self.state is TransactionState.ONGOING and self.next_producer_epoch >= 0

    def client_identity(self) -> tuple[int, int]:
        """The (producer id, epoch) a client must present for this transactional id."""
        if self.keeping_prepared:
            return self.next_producer_id, self.next_producer_epoch
        return self.producer_id, self.producer_epoch

    @property
    def pending_transition(self) -> bool:
        return self.pending_state is not None

    @property
    def is_epoch_exhausted(self) -> bool:
        return is_epoch_exhausted(self.producer_epoch)

    # ------------------------------------------------------------- prepare_*

    def _prepare(
        self,
        target: TransactionState,
        *,
        from_state: TransactionState | None = None,
        **changes: object,
    ) -> TxnTransitMetadata:
        if self.pending_state is not None:
            raise IllegalStateTransition(
                f"{self.transactional_id}: preparing {target.wire_name} while "
                f"{self.pending_state.wire_name} is pending"
            )
        source = self.state if from_state is None else from_state
        check_transition(source, target)
        values = self._fields()
        values.update(changes, state=target)
        transit = TxnTransitMetadata(**values)  # type: ignore[arg-type]
        self.pending_state = target
        logger.debug(
            "transactional id %r prepares %s -> %s",
            self.transactional_id, source.wire_name, target.wire_name,
        )
        return transit

    def prepare_increment_producer_epoch(
        self, timeout_ms: int, expected_epoch: int | None, now_ms: int
    ) -> TxnTransitMetadata:
        """InitProducerId between transactions: the next epoch, fencing older instances.

        With an expected epoch (KIP-360): the current epoch is bumped again; the previous
        epoch means a retry of a bump that succeeded (answered without bumping); anything
        else is a fenced producer (PRODUCER_FENCED)."""
        if self.is_epoch_exhausted:
            raise IllegalStateTransition(
                f"{self.transactional_id}: epochs of producer {self.producer_id} exhausted"
            )
        bumped = self.producer_epoch + 1
        if expected_epoch is None:
            epoch, last = bumped, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            epoch, last = bumped, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            epoch, last = self.producer_epoch, self.last_producer_epoch
        else:
            raise KafkaError(
                ErrorCode.producer_fenced,
                f"epoch {expected_epoch} is neither the current {self.producer_epoch} "
                f"nor the previous {self.last_producer_epoch}",
            )
        return self._prepare_empty(
            timeout_ms, now_ms, producer_epoch=epoch, last_producer_epoch=last
        )

    def prepare_producer_id_rotation(
        self, new_producer_id: int, timeout_ms: int, now_ms: int, record_last_epoch: bool
    ) -> TxnTransitMetadata:
        """InitProducerId when the epoch is exhausted: a new producer id at epoch 0."""
        if self.state in (
            TransactionState.ONGOING,
            TransactionState.PREPARE_COMMIT,
            TransactionState.PREPARE_ABORT,
        ):
            raise IllegalStateTransition("cannot rotate producer ids during a transaction")
        return self._prepare_empty(
            timeout_ms,
            now_ms,
            producer_id=new_producer_id,
            producer_epoch=0,
            last_producer_epoch=self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
            prev_producer_id=self.producer_id,
        )

    def _prepare_empty(
        self,
        timeout_ms: int,
        now_ms: int,
        *,
        producer_epoch: int,
        last_producer_epoch: int,
        producer_id: int | None = None,
        prev_producer_id: int | None = None,
    ) -> TxnTransitMetadata:
        """InitProducerId's transition to EMPTY, shared by the epoch bump and the producer id
        rotation: no partitions, no start time, no kept identity; the epochs (and, rotating,
        ``producer_id`` and ``prev_producer_id``) are what the transactional id gets."""
        rotating = producer_id is not None and prev_producer_id is not None
        return self._prepare(
            TransactionState.EMPTY,
            producer_id=producer_id if rotating else self.producer_id,
            prev_producer_id=prev_producer_id if rotating else self.prev_producer_id,
            producer_epoch=producer_epoch,
            last_producer_epoch=last_producer_epoch,
            txn_timeout_ms=timeout_ms,
            partitions=frozenset(),
            txn_start_timestamp=-1,
            txn_last_update_timestamp=now_ms,
            next_producer_id=NO_PRODUCER_ID,
            next_producer_epoch=NO_PRODUCER_EPOCH,
        )

    def prepare_add_partitions(
        self, partitions: Iterable[TopicPartition], now_ms: int
    ) -> TxnTransitMetadata:
        """AddPartitionsToTxn / AddOffsetsToTxn: the transaction begins or grows."""
        starting = self.state in (
            TransactionState.EMPTY,
            TransactionState.COMPLETE_COMMIT,
            TransactionState.COMPLETE_ABORT,
        )
        return self._prepare(
            TransactionState.ONGOING,
            partitions=frozenset(self.partitions).union(partitions),
            txn_start_timestamp=now_ms if starting else self.txn_start_timestamp,
            txn_last_update_timestamp=now_ms,
        )

    def prepare_keep_prepared(
        self, client: tuple[int, int], timeout_ms: int, now_ms: int
    ) -> TxnTransitMetadata:
        """InitProducerId with KeepPreparedTxn on an ongoing transaction (KIP-939): the
        transaction and its identity stay; the client continues as ``client``."""
        if self.state is not TransactionState.ONGOING:
            raise IllegalStateTransition("only an ongoing transaction can be kept")
        return self._prepare(
            TransactionState.ONGOING,
            next_producer_id=client[0],
            next_producer_epoch=client[1],
            last_producer_epoch=NO_PRODUCER_EPOCH,
            txn_timeout_ms=timeout_ms,
            txn_last_update_timestamp=now_ms,
        )

    def prepare_end(
        self,
        commit: bool,
        now_ms: int,
        client_version: int = 0,
        new_producer_id: int = NO_PRODUCER_ID,
    ) -> TxnTransitMetadata:
        """EndTxn by the client: PrepareCommit or PrepareAbort.

        With transactions v2 (``client_version`` >= 2) the markers carry the next epoch and
        the client continues with the epoch after its own (or ``new_producer_id`` at epoch
        0 when its epoch is exhausted). A kept transaction (KIP-939) also writes its markers
        at the next epoch, so they are above every epoch that wrote its data."""
        target = TransactionState.PREPARE_COMMIT if commit else TransactionState.PREPARE_ABORT
        client = self.client_identity()
        tv2 = client_version >= TV_EPOCH_BUMP
        bump = tv2 or self.keeping_prepared or self.state is not TransactionState.ONGOING
        marker_epoch = self.producer_epoch + 1 if bump else self.producer_epoch
        if tv2:
            if is_epoch_exhausted(client[1]):
                if new_producer_id < 0:
                    raise IllegalStateTransition("exhausted epoch needs a new producer id")
                after = (new_producer_id, 0)
            else:
                after = (client[0], client[1] + 1)
        else:
            after = client
        return self._prepare_outcome(
            target, marker_epoch, after, now_ms,
            last_epoch=client[1], prev_id=client[0], client_version=client_version,
        )

    def prepare_fence_abort(self, now_ms: int) -> TxnTransitMetadata:
        """A new instance (InitProducerId) or the timeout sweep ends an ongoing transaction:
        Ongoing -> PrepareEpochFence -> PrepareAbort in one logged step. The epoch is bumped
        so the old instance is fenced both here and at every partition."""
        check_transition(self.state, TransactionState.PREPARE_EPOCH_FENCE)
        check_transition(TransactionState.PREPARE_EPOCH_FENCE, TransactionState.PREPARE_ABORT)
        if self.pending_state is not None:
            raise IllegalStateTransition(f"{self.transactional_id}: a transition is pending")
        client = self.client_identity()
        if self.producer_epoch >= MAX_PRODUCER_EPOCH or client[1] >= MAX_PRODUCER_EPOCH:
            raise IllegalStateTransition("cannot fence an epoch of Short.MAX_VALUE")
        after = (client[0], client[1] + 1)
        return self._prepare_outcome(
            TransactionState.PREPARE_ABORT, self.producer_epoch + 1, after, now_ms,
            last_epoch=NO_PRODUCER_EPOCH, prev_id=self.prev_producer_id, client_version=0,
            from_state=TransactionState.PREPARE_EPOCH_FENCE,
        )

    def _prepare_outcome(
        self,
        target: TransactionState,
        marker_epoch: int,
        after: tuple[int, int],
        now_ms: int,
        *,
        last_epoch: int,
        prev_id: int,
        client_version: int,
        from_state: TransactionState | None = None,
    ) -> TxnTransitMetadata:
        same = after == (self.producer_id, marker_epoch)
        return self._prepare(
            target,
            from_state=from_state,
            producer_epoch=marker_epoch,
            last_producer_epoch=last_epoch,
            prev_producer_id=prev_id,
            next_producer_id=NO_PRODUCER_ID if same else after[0],
            next_producer_epoch=NO_PRODUCER_EPOCH if same else after[1],
            # Nothing was added (transactions v2 abort from Empty/Complete*): starts now.
            txn_start_timestamp=(
                self.txn_start_timestamp if self.state is TransactionState.ONGOING else now_ms
            ),
            partitions=frozenset(self.partitions),
            txn_last_update_timestamp=now_ms,
            client_transaction_version=client_version,
        )

    def prepare_complete(self, now_ms: int) -> TxnTransitMetadata:
        """Every marker is written: CompleteCommit or CompleteAbort, and the client identity
        moves to the one prepared for after the transaction."""
        if self.state is TransactionState.PREPARE_COMMIT:
            target = TransactionState.COMPLETE_COMMIT
        elif self.state is TransactionState.PREPARE_ABORT:
            target = TransactionState.COMPLETE_ABORT
        else:
            raise IllegalStateTransition(f"cannot complete from {self.state.wire_name}")
        if self.next_producer_id >= 0:
            producer_id, epoch = self.next_producer_id, self.next_producer_epoch
        else:
            producer_id, epoch = self.producer_id, self.producer_epoch
        return self._prepare(
            target,
            producer_id=producer_id,
            producer_epoch=epoch,
            next_producer_id=NO_PRODUCER_ID,
            next_producer_epoch=NO_PRODUCER_EPOCH,
            partitions=frozenset(),
            txn_last_update_timestamp=now_ms,
        )

    def prepare_dead(self) -> TxnTransitMetadata:
        """Expiry of an idle transactional id: ends in removal and a tombstone."""
        return self._prepare(TransactionState.DEAD, partitions=frozenset())

    # ------------------------------------------------------------ complete

    def complete_transition(self, transit: TxnTransitMetadata) -> None:
        """Apply ``transit`` after its log append succeeded."""
        pending = self.pending_state
        if pending is None or pending is not transit.state:
            raise IllegalStateTransition(
                f"{self.transactional_id}: completing {transit.state.wire_name} but pending is "
                f"{pending.wire_name if pending is not None else None}"
            )
        target = transit.state
        if target is TransactionState.DEAD:
            raise IllegalStateTransition("a Dead transition ends in removal, never completion")
        if target is TransactionState.ONGOING and not transit.partitions >= self.partitions:
            raise IllegalStateTransition("Ongoing may only add partitions")
        if target.is_prepared and transit.partitions != self.partitions:
            raise IllegalStateTransition("PrepareCommit/PrepareAbort keeps the partitions")
        if target.is_complete and transit.txn_start_timestamp == -1:
            raise IllegalStateTransition("a completed transaction has a start time")
        if target is TransactionState.EMPTY and transit.txn_start_timestamp != -1:
            raise IllegalStateTransition("Empty has no start time")
        self.producer_id = transit.producer_id
        self.producer_epoch = transit.producer_epoch
        self.last_producer_epoch = transit.last_producer_epoch
        self.prev_producer_id = transit.prev_producer_id
        self.next_producer_id = transit.next_producer_id
        self.next_producer_epoch = transit.next_producer_epoch
        self.txn_timeout_ms = transit.txn_timeout_ms
        self.partitions = set(transit.partitions)
        self.txn_start_timestamp = transit.txn_start_timestamp
        self.txn_last_update_timestamp = transit.txn_last_update_timestamp
        self.client_transaction_version = transit.client_transaction_version
        self.state = target
        self.pending_state = None

    def cancel_transition(self) -> None:
        """The log append failed: nothing changed, the next request may try again."""
        self.pending_state = None

    def remove_partition(self, tp: TopicPartition) -> None:
        """A marker reached ``tp`` (only while markers are being written)."""
        if not self.state.is_prepared:
            raise IllegalStateTransition(
                f"removing a partition whose marker is written in {self.state.wire_name}"
            )
        self.partitions.discard(tp)
