"""Per-partition producer state: epochs, sequences and ongoing transactions of every producer id.

This is the broker side of the idempotent producer (KIP-98 "PID-Sequence Management"). The
log is the source of truth; this module keeps, per producer id, what the log says about that
producer, so that a produce request can be validated and a retried batch recognised.

The partition append order (Kafka's ``UnifiedLog.append``) uses it in three steps:

1. ``check(header)`` (or ``check_batches(headers)`` for several batches in one request) —
   validates epoch and sequence WITHOUT changing anything. Returns a ``DuplicateBatch`` when
   the batch is a retry of one of the producer's last 5 batches: the caller then answers
   success with the original offsets and appends nothing. Raises ``KafkaError`` when the
   batch must be refused.
2. The caller appends the batch to the log (offsets are now final).
3. ``update(header)`` applies the appended batch (with its final offsets) to the state.

Recovery only replays: ``update`` for every batch carrying a producer id, in log order, with
no validation (``restore`` the entries of a snapshot first, then replay the tail). The
manager does no I/O: ``oncelog.storage.snapshot`` writes and reads its snapshot files.

The validation rules are Kafka's (``ProducerAppendInfo.checkProducerEpoch``/``checkSequence``
and ``ProducerStateEntry.findDuplicateBatch``, in
storage/src/main/java/org/apache/kafka/storage/internals/log/), for data batches from clients:

- older epoch than the producer's current one → INVALID_PRODUCER_EPOCH (Kafka ≥ 2.7 answers
  this, not PRODUCER_FENCED, on the produce path, so the client can abort and retry);
- unknown producer (no state, e.g. expired or never seen here) → any sequence is accepted
  (since KIP-360 the broker no longer answers UNKNOWN_PRODUCER_ID);
- new (bumped) epoch → the sequence must be 0, else OUT_OF_ORDER_SEQUENCE_NUMBER;
- same epoch → the first sequence must follow the last one (int32 wrap-around: after
  2147483647 comes 0), else OUT_OF_ORDER_SEQUENCE_NUMBER;
- a non-transactional batch while the producer has a transaction open → INVALID_TXN_STATE;
- with ``transaction_verification`` (KIP-890), a transactional batch not continuing a
  transaction open here at its epoch must present the guard ``maybe_start_verification``
  gave, else INVALID_TXN_STATE (``oncelog.storage.verification``).

The duplicate check runs first, against the committed state only: same epoch and the same
(first, last) sequence range as one of the last 5 appended batches.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from oncelog.clock import Clock
from oncelog.errors import ErrorCode, KafkaError
from oncelog.records.batch import NO_PRODUCER_EPOCH, NO_SEQUENCE, BatchHeader
from oncelog.storage.producer_entry import (
    BatchMetadata,
    CompletedTxn,
    DuplicateBatch,
    ProducerInfo,
    ProducerStateEntry,
    next_sequence,
)
from oncelog.storage.verification import SENTINEL, VerificationGuard, Verifications

__all__ = ["ProducerStateManager"]

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class _Pending:
    """The view of one producer after the earlier batches of the same request."""

    epoch: int
    last_seq: int
    in_txn: bool


class ProducerStateManager:
    """Producer id → state for one partition (see the module docstring for the call order)."""

    def __init__(
        self,
        partition: str,
        clock: Clock,
        producer_id_expiration_ms: int = 86400000,
        *,
        transaction_verification: bool = False,
    ) -> None:
        self.partition = partition
        self._clock = clock
        self.producer_id_expiration_ms = producer_id_expiration_ms
        # Kafka's ProducerStateManagerConfig.transactionVerificationEnabled: whether a
        # transaction's first append must present its verification guard. The broker sets
        # it from transaction.partition.verification.enable; off for a bare engine.
        self.transaction_verification = transaction_verification
        self._producers: dict[int, ProducerStateEntry] = {}
        self._verifications = Verifications()
        self._map_end_offset = 0  # the offset after the last batch applied by update()
        self._last_snapshot_offset: int | None = None

    # ------------------------------------------------------------------ validation

    def check(
        self,
        header: BatchHeader,
        *,
        is_from_client: bool = True,
        request_version: int | None = None,
        verification_guard: VerificationGuard = SENTINEL,
    ) -> DuplicateBatch | None:
        """Validate one data batch that carries a producer id, changing nothing.

        ``is_from_client=False`` is Kafka's coordinator origin (e.g. the group coordinator
        writing offsets): only the epoch is checked, no sequences, no duplicate detection.
        ``verification_guard`` is the guard the caller got from ``maybe_start_verification``
        before asking the transaction coordinator (module docstring).
        ``request_version`` is accepted for the produce handler's convenience; Kafka's current
        rules do not depend on it (the old UNKNOWN_PRODUCER_ID answer is gone since KIP-360).
        """
        entry = self._producers.get(header.producer_id)
        if (
            entry is not None
            and is_from_client
            and header.producer_epoch == entry.producer_epoch
            and header.base_sequence == next_sequence(entry.last_seq)
            and (entry.current_txn_first_offset is None) != header.is_transactional
        ):
            # The common case: the next batch, in sequence, continuing the producer's open
            # transaction or outside any. It cannot also be a duplicate (that would need the
            # 5 retained batches to span all 2**31 sequences).
            return None
        return self._check_slow(header, entry, None, is_from_client, verification_guard)

    def check_batches(
        self,
        headers: Iterable[BatchHeader],
        *,
        is_from_client: bool = True,
        verification_guard: VerificationGuard = SENTINEL,
    ) -> DuplicateBatch | None:
        """Validate all producer-id batches of one request, each against the state the
        earlier ones would leave. A duplicate of an appended batch answers for the request
        (nothing is appended) only when it is the request's only producer-id batch: a
        duplicate beside other batches is refused with INVALID_RECORD, since answering the
        duplicate's offsets would acknowledge the others without writing them (clients send
        one batch per partition per request; Kafka refuses more from Produce v3 on)."""
        checked = [h for h in headers if h.producer_id >= 0 and not h.is_control]
        pending: dict[int, _Pending] = {}
        for header in checked:
            entry = self._producers.get(header.producer_id)
            duplicate = self._check_slow(
                header, entry, pending, is_from_client, verification_guard
            )
            if duplicate is not None:
                if len(checked) > 1:
                    raise KafkaError(
                        ErrorCode.invalid_record,
                        f"partition {self.partition}: producer {header.producer_id} batch "
                        f"{header.base_sequence}..{header.last_sequence} is a duplicate, "
                        f"sent with {len(checked) - 1} other batches",
                    )
                return duplicate
        return None

    def _check_slow(
        self,
        header: BatchHeader,
        entry: ProducerStateEntry | None,
        pending: dict[int, _Pending] | None,
        is_from_client: bool,
        verification_guard: VerificationGuard = SENTINEL,
    ) -> DuplicateBatch | None:
        pid = header.producer_id
        epoch = header.producer_epoch
        first_seq = header.base_sequence
        seen = pending.get(pid) if pending is not None else None

        if is_from_client and entry is not None:
            dup = entry.find_duplicate(epoch, first_seq, header.last_sequence)
            if dup is not None:
                logger.info(
                    "duplicate batch partition=%s producer_id=%d epoch=%d seq=%d..%d "
                    "original_offsets=%d..%d",
                    self.partition,
                    pid,
                    epoch,
                    first_seq,
                    header.last_sequence,
                    dup.first_offset,
                    dup.last_offset,
                )
                return DuplicateBatch(dup.first_offset, dup.last_offset, dup.timestamp)

        if seen is not None:
            current_epoch, last_seq, in_txn = seen.epoch, seen.last_seq, seen.in_txn
        elif entry is not None:
            current_epoch = entry.producer_epoch
            last_seq = entry.last_seq
            in_txn = entry.current_txn_first_offset is not None
        else:
            current_epoch, last_seq, in_txn = NO_PRODUCER_EPOCH, NO_SEQUENCE, False

        if epoch < current_epoch:
            raise KafkaError(
                ErrorCode.invalid_producer_epoch,
                f"partition {self.partition}: producer {pid} epoch {epoch} is older than "
                f"the current epoch {current_epoch}",
            )

        if header.is_transactional and not (in_txn and epoch == current_epoch):
            self._check_verified(pid, epoch, verification_guard)

        if is_from_client:
            if epoch != current_epoch:
                if first_seq != 0 and current_epoch != NO_PRODUCER_EPOCH:
                    raise KafkaError(
                        ErrorCode.out_of_order_sequence_number,
                        f"partition {self.partition}: producer {pid} new epoch {epoch} must "
                        f"start at sequence 0, got {first_seq} (current epoch {current_epoch})",
                    )
            # Same epoch. Kafka accepts any sequence when the producer is unknown here
            # (current epoch NO_PRODUCER_EPOCH). A later batch of the same request is held to
            # the sequence the earlier ones set, since their epoch is now current (stricter
            # than Kafka, which compares with the committed entry's epoch and would accept
            # anything there for an unknown producer, even the same sequences twice).
            elif current_epoch != NO_PRODUCER_EPOCH and first_seq != next_sequence(last_seq):
                raise KafkaError(
                    ErrorCode.out_of_order_sequence_number,
                    f"partition {self.partition}: producer {pid} epoch {epoch} sequence "
                    f"{first_seq} does not follow {last_seq}",
                )

        if in_txn and not header.is_transactional:
            raise KafkaError(
                ErrorCode.invalid_txn_state,
                f"partition {self.partition}: non-transactional batch from producer {pid} "
                f"while its transaction is open",
            )

        if pending is not None:
            pending[pid] = _Pending(epoch, header.last_sequence, in_txn or header.is_transactional)
        return None

    # ------------------------------------------------------------------ verification

    def maybe_start_verification(
        self, producer_id: int, producer_epoch: int
    ) -> VerificationGuard:
        """The guard a transaction's first append must present, taken before the
        coordinator is asked (Kafka's ``UnifiedLog.maybeStartTransactionVerification``):
        SENTINEL if the transaction is open here at this epoch; INVALID_PRODUCER_EPOCH for
        an epoch older than the producer's here."""
        entry = self._producers.get(producer_id)
        if entry is not None and producer_epoch < entry.producer_epoch:
            raise KafkaError(
                ErrorCode.invalid_producer_epoch,
                f"partition {self.partition}: producer {producer_id} epoch {producer_epoch} "
                f"is older than the current epoch {entry.producer_epoch}",
            )
        if self.has_ongoing_transaction(producer_id, producer_epoch):
            return SENTINEL
        return self._verifications.start(producer_id, producer_epoch, self._clock.now_ms())

    def verification_guard(self, producer_id: int) -> VerificationGuard:
        """The producer's open verification guard, ``SENTINEL`` if none."""
        return self._verifications.guard(producer_id)

    def has_ongoing_transaction(self, producer_id: int, producer_epoch: int) -> bool:
        """Whether the producer has a transaction open here at ``producer_epoch``."""
        entry = self._producers.get(producer_id)
        return (
            entry is not None
            and entry.current_txn_first_offset is not None
            and entry.producer_epoch == producer_epoch
        )

    def _check_verified(
        self, producer_id: int, producer_epoch: int, presented: VerificationGuard
    ) -> None:
        if not self.transaction_verification:
            return
        if self.verification_guard(producer_id).verify(presented):
            return
        raise KafkaError(
            ErrorCode.invalid_txn_state,
            f"partition {self.partition}: Record was not part of an ongoing transaction "
            f"(producer {producer_id} epoch {producer_epoch})",
        )

    # ------------------------------------------------------------------ applying

    def update(self, header: BatchHeader) -> None:
        """Apply a data batch that is now in the log (its offsets are final).

        Used after a validated append and, without validation, when replaying the log.
        Batches without a producer id are ignored; control batches must go through
        ``update_end_txn_marker`` (their content says COMMIT or ABORT).
        """
        pid = header.producer_id
        if pid < 0:
            return
        if header.is_control:
            raise ValueError("control batches are applied with update_end_txn_marker()")
        entry = self._producers.get(pid)
        if entry is None:
            entry = self._producers[pid] = ProducerStateEntry(pid)
        entry.add_batch(
            header.producer_epoch,
            BatchMetadata(
                header.base_sequence,
                header.last_sequence,
                header.base_offset,
                header.last_offset,
                header.max_timestamp,
            ),
        )
        if header.is_transactional:
            # Data in the transaction (or, below, its marker): the guard has served.
            self._verifications.clear(pid)
            if entry.current_txn_first_offset is None:
                entry.current_txn_first_offset = header.base_offset
        if header.next_offset > self._map_end_offset:
            self._map_end_offset = header.next_offset

    def update_all(self, headers: Sequence[BatchHeader]) -> None:
        for header in headers:
            self.update(header)

    def check_end_txn_marker(
        self, producer_id: int, producer_epoch: int, coordinator_epoch: int
    ) -> None:
        """Validate a COMMIT/ABORT marker from the transaction coordinator, changing nothing
        (Kafka's checkProducerEpoch and checkCoordinatorEpoch for transaction version < 2)."""
        entry = self._producers.get(producer_id)
        if entry is None:
            return
        if producer_epoch < entry.producer_epoch:
            raise KafkaError(
                ErrorCode.invalid_producer_epoch,
                f"partition {self.partition}: marker for producer {producer_id} has epoch "
                f"{producer_epoch}, older than {entry.producer_epoch}",
            )
        if coordinator_epoch < entry.coordinator_epoch:
            raise KafkaError(
                ErrorCode.transaction_coordinator_fenced,
                f"partition {self.partition}: marker for producer {producer_id} from "
                f"coordinator epoch {coordinator_epoch}, older than {entry.coordinator_epoch}",
            )

    def update_end_txn_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        offset: int,
        timestamp: int,
        is_abort: bool,
    ) -> CompletedTxn | None:
        """Apply a COMMIT/ABORT marker now in the log at ``offset``. Returns the completed
        transaction, or None when the producer had no data in an open transaction here."""
        entry = self._producers.get(producer_id)
        if entry is None:
            entry = self._producers[producer_id] = ProducerStateEntry(producer_id)
        completed = None
        if entry.current_txn_first_offset is not None:
            completed = CompletedTxn(producer_id, entry.current_txn_first_offset, offset, is_abort)
        if producer_epoch != entry.producer_epoch:
            entry.batches.clear()
            entry.producer_epoch = producer_epoch
        entry.coordinator_epoch = coordinator_epoch
        entry.current_txn_first_offset = None
        self._verifications.clear(producer_id)
        entry.last_timestamp = timestamp
        if offset + 1 > self._map_end_offset:
            self._map_end_offset = offset + 1
        return completed

    # ------------------------------------------------------------------ queries

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        """The live entry (do not mutate it)."""
        return self._producers.get(producer_id)

    def entries(self) -> dict[int, ProducerStateEntry]:
        """Copies of all entries, by producer id."""
        return {pid: e.copy() for pid, e in self._producers.items()}

    def active_producers(self) -> list[ProducerInfo]:
        """For DescribeProducers, sorted by producer id."""
        return [
            ProducerInfo(
                e.producer_id,
                e.producer_epoch,
                e.last_seq,
                e.last_timestamp,
                e.coordinator_epoch,
                -1 if e.current_txn_first_offset is None else e.current_txn_first_offset,
            )
            for _, e in sorted(self._producers.items())
        ]

    def ongoing_txn_first_offsets(self) -> list[int]:
        """First offsets of the open transactions (for the first unstable offset)."""
        return sorted(
            e.current_txn_first_offset
            for e in self._producers.values()
            if e.current_txn_first_offset is not None
        )

    def __len__(self) -> int:
        return len(self._producers)

    @property
    def map_end_offset(self) -> int:
        """The offset after the last batch applied (the state covers the log below it)."""
        return self._map_end_offset

    @property
    def last_snapshot_offset(self) -> int | None:
        return self._last_snapshot_offset

    # ------------------------------------------------------------------ expiry

    def remove_expired(self, now_ms: int | None = None) -> list[int]:
        """Forget producers idle for ``producer.id.expiration.ms`` (by their last batch's
        timestamp, as Kafka does), except those with a transaction open. Returns their ids."""
        now = self._clock.now_ms() if now_ms is None else now_ms
        limit = self.producer_id_expiration_ms
        expired = [
            pid
            for pid, e in self._producers.items()
            if e.current_txn_first_offset is None and now - e.last_timestamp >= limit
        ]
        for pid in expired:
            del self._producers[pid]
        # Verifications that never led to an append (Kafka expires them with producers).
        self._verifications.expire(now, limit)
        if expired:
            logger.info(
                "expired producer ids partition=%s count=%d ids=%s",
                self.partition,
                len(expired),
                expired[:10],
            )
        return expired

    # ------------------------------------------------------------------ truncation

    def clear(self) -> None:
        """Forget everything (the log was emptied or will be replayed from its start)."""
        self._producers.clear()
        self._map_end_offset = 0
        self._last_snapshot_offset = None

    def truncate_after(self, offset: int) -> int:
        """The log now ends at ``offset`` (everything at or above it is gone) and there are no
        snapshots to go back to: clears the state and returns 0, the offset from which the
        caller must replay the log, up to its new end, through ``update``. Nothing is reset
        (and ``offset`` is returned) when no applied batch reaches ``offset``. With snapshot
        files, ``snapshot.truncate_state_after`` resets to the newest one at or below it."""
        if offset >= self._map_end_offset:
            return offset
        self.clear()
        logger.info(
            "producer state cleared for truncation partition=%s offset=%d",
            self.partition,
            offset,
        )
        return 0

    # ------------------------------------------------------------------ snapshots
    # The manager does no I/O: ``oncelog.storage.snapshot`` encodes ``snapshot_entries``,
    # writes the file and calls ``on_snapshot_written``; loading reads the file and hands
    # its entries to ``restore``.

    def snapshot_entries(self, offset: int) -> list[ProducerStateEntry]:
        """The entries a snapshot at ``offset`` holds; the state must cover the log up to
        ``offset``. Live entries: encode them before the state changes again."""
        if offset < self._map_end_offset:
            raise ValueError(
                f"snapshot offset {offset} is below the state's end {self._map_end_offset}"
            )
        return list(self._producers.values())

    def on_snapshot_written(self, offset: int) -> None:
        self._last_snapshot_offset = offset

    def restore(
        self, offset: int, entries: Iterable[ProducerStateEntry], *,
        log_level: int = logging.INFO,
    ) -> int:
        """Replace the state with a snapshot's ``entries`` covering the log below ``offset``,
        dropping producers already expired. Returns ``offset``, from which the caller must
        replay the log tail through ``update``."""
        self.clear()
        for e in entries:
            self._producers[e.producer_id] = e
        self.remove_expired()
        self._map_end_offset = offset
        self._last_snapshot_offset = offset
        logger.log(
            log_level,
            "loaded producer snapshot partition=%s offset=%d producers=%d",
            self.partition,
            offset,
            len(self._producers),
        )
        return offset
