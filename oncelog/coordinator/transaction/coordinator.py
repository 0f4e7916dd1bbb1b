"""The transaction coordinator: one ``handle_*`` per API, the transaction log, markers, sweeps.

Every decision is made by synchronous code that reads and prepares the metadata of one
transactional id, appends the prepared state to ``__transaction_state`` and only then applies
it (``metadata.py``). All of that runs between two awaits, so on the event loop it is the
critical section of that id; the pending state it sets keeps any other transition of the same
id out for as long as the transition is open (a concurrent request gets
CONCURRENT_TRANSACTIONS, as in Kafka). The only awaits are for markers, which run in tasks of
the coordinator's own TaskGroup (started by ``run()``), so a client that disconnects never
leaves a decided transaction half-marked.

Life of a transaction:
  InitProducerId -> Empty (epoch bumped) ; AddPartitions/AddOffsets -> Ongoing (logged)
  EndTxn -> PrepareCommit/PrepareAbort logged (the outcome is now fixed)
         -> markers to every partition, retried with backoff until all are written
         -> CompleteCommit/CompleteAbort logged.
After a restart ``load()`` rebuilds the cache from the log and finishes every Prepare* it
finds. ``run()`` also aborts transactions older than their timeout (bumping the epoch so the
zombie is fenced) and expires idle transactional ids, in one loop so the sweeps never overlap.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Sequence

from oncelog.clock import Clock
from oncelog.config import BrokerConfig
from oncelog.coordinator.group.codec import java_string_hash, kafka_abs
from oncelog.coordinator.group.codec import partition_for as group_partition_for
from oncelog.coordinator.producer_ids import ProducerIdManager
from oncelog.coordinator.transaction.log_codec import (
    decode_key,
    decode_value,
    encode_record,
    tombstone,
)
from oncelog.coordinator.transaction.markers import (
    MarkerOutcome,
    MarkerWriter,
    classify_marker_error,
)
from oncelog.coordinator.transaction.metadata import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TV_EPOCH_BUMP,
    TWO_PHASE_COMMIT_TIMEOUT_MS,
    TopicPartition,
    TransactionMetadata,
    TxnTransitMetadata,
    is_epoch_exhausted,
)
from oncelog.coordinator.transaction.results import (
    DescribedTransaction,
    EndTxnResult,
    InitProducerIdResult,
    ListedTransaction,
    ListTransactionsResult,
    TxnCoordinatorStatistics,
)
from oncelog.coordinator.transaction.state import (
    IllegalStateTransition,
    TransactionState,
    parse_state,
)
from oncelog.coordinator.transaction.store import TxnLogStore
from oncelog.errors import ErrorCode, KafkaError
from oncelog.faults import crash_point
from oncelog.internal_topics import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC

logger = logging.getLogger(__name__)


Sleep = Callable[[float], Awaitable[None]]

_S = TransactionState


def transaction_log_partition(transactional_id: str, num_partitions: int) -> int:
    """Kafka's ``Utils.abs(transactionalId.hashCode) % partitions``."""
    return kafka_abs(java_string_hash(transactional_id)) % num_partitions


def _append_error(code: ErrorCode) -> ErrorCode:
    """A failed transaction-log append as the error a transactional client understands
    (Kafka's TransactionStateManager does the same translation)."""
    if code in (
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.not_enough_replicas,
        ErrorCode.not_enough_replicas_after_append,
        ErrorCode.request_timed_out,
    ):
        return ErrorCode.coordinator_not_available
    if code in (ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error):
        return ErrorCode.not_coordinator
    if code in (ErrorCode.message_too_large, ErrorCode.record_list_too_large):
        return ErrorCode.unknown_server_error
    return code


class TransactionCoordinator:
    def __init__(
        self,
        config: BrokerConfig,
        store: TxnLogStore,
        producer_ids: ProducerIdManager,
        markers: MarkerWriter,
        clock: Clock,
        *,
        coordinator_epoch: int = 0,
        sleep: Sleep = asyncio.sleep,
        end_txn_wait_ms: int = 5000,
        marker_backoff_ms: int = 20,
        marker_backoff_max_ms: int = 1000,
    ) -> None:
        self._config = config
        self._store = store
        self._producer_ids = producer_ids
        self._markers = markers
        self._clock = clock
        self._sleep = sleep
        self.coordinator_epoch = coordinator_epoch
        self._end_txn_wait_s = end_txn_wait_ms / 1000
        self._backoff_ms = marker_backoff_ms
        self._backoff_max_ms = marker_backoff_max_ms
        self._max_timeout_ms = int(config["transaction.max.timeout.ms"])
        self._two_phase_commit_enabled = bool(config["transaction.two.phase.commit.enable"])
        self._cache: dict[str, TransactionMetadata] = {}
        self._loaded = False
        self._tasks: asyncio.TaskGroup | None = None
        self._completions: dict[str, asyncio.Task[None]] = {}
        self._deferred: set[str] = set()  # completions waiting for run() to start
        self._running = asyncio.Event()
        self._marker_retries = 0
        self._timed_out_aborts = 0
        self._expired = 0

    # ------------------------------------------------------------------- placement

    def partition_for(self, transactional_id: str) -> int:
        """The ``__transaction_state`` partition holding ``transactional_id``."""
        return transaction_log_partition(transactional_id, self._store.num_partitions)

    def offsets_partition_for(self, group_id: str) -> TopicPartition:
        return OFFSETS_TOPIC, group_partition_for(
            group_id, int(self._config["offsets.topic.num.partitions"])
        )

    @property
    def loaded(self) -> bool:
        return self._loaded

    def get(self, transactional_id: str) -> TransactionMetadata | None:
        """The cached metadata (read-only use: tools and tests)."""
        return self._cache.get(transactional_id)

    # ------------------------------------------------------------------ the log

    def _append(self, transactional_id: str, transit: TxnTransitMetadata) -> ErrorCode:
        key, value = encode_record(transactional_id, transit)
        try:
            self._store.append(self.partition_for(transactional_id), [(key, value)])
        except KafkaError as exc:
            code = _append_error(exc.code)
            logger.warning(
                "transaction log append for %r (%s) failed: %s; answering %s",
                transactional_id, transit.state.wire_name, exc, code.name,
            )
            return code
        except OSError as exc:
            logger.error("transaction log append for %r failed: %s", transactional_id, exc)
            return ErrorCode.not_coordinator
        crash_point(f"txn.logged.{transit.state.wire_name}")
        return ErrorCode.none

    def _apply(self, md: TransactionMetadata, transit: TxnTransitMetadata) -> ErrorCode:
        """Append the prepared transition; apply it only if the append succeeded."""
        code = self._append(md.transactional_id, transit)
        if code is ErrorCode.none:
            md.complete_transition(transit)
        else:
            md.cancel_transition()
        return code

    def _new_producer_id(self) -> int:
        try:
            return self._producer_ids.next_id()
        except (OSError, RuntimeError) as exc:
            logger.error("cannot allocate a producer id: %s", exc)
            raise KafkaError(ErrorCode.coordinator_not_available, str(exc)) from exc

    def load(self) -> int:
        """Rebuild the cache from ``__transaction_state`` (last record per id wins, a
        tombstone removes it). Transactions found in PrepareCommit/PrepareAbort get their
        markers written again and complete (as soon as ``run()`` is running)."""
        cache: dict[str, TransactionMetadata] = {}
        for partition in range(self._store.num_partitions):
            for key, value in self._store.read(partition):
                transactional_id = decode_key(key)
                if transactional_id is None:
                    logger.warning("skipping a __transaction_state key of unknown version")
                    continue
                transit = decode_value(value)
                if transit is None:
                    cache.pop(transactional_id, None)
                else:
                    cache[transactional_id] = TransactionMetadata.from_transit(
                        transactional_id, transit
                    )
        self._cache = cache
        self._loaded = True
        resumed = 0
        for transactional_id, md in cache.items():
            if md.state.is_prepared:
                resumed += 1
                logger.info(
                    "loaded %r in %s: resuming its markers to %d partitions",
                    transactional_id, md.state.wire_name, len(md.partitions),
                )
                self._start_completion(transactional_id)
        logger.info(
            "loaded %d transactional ids from %s (%d partitions), %d to complete",
            len(cache), TRANSACTION_STATE_TOPIC, self._store.num_partitions, resumed,
        )
        return len(cache)

    # -------------------------------------------------------------- InitProducerId

    async def handle_init_producer_id(
        self,
        transactional_id: str | None,
        timeout_ms: int,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        enable_2pc: bool = False,
        keep_prepared: bool = False,
    ) -> InitProducerIdResult:
        if transactional_id is None:
            try:
                return InitProducerIdResult(ErrorCode.none, self._new_producer_id(), 0)
            except KafkaError as exc:
                return InitProducerIdResult(exc.code)
        if transactional_id == "":
            return InitProducerIdResult(ErrorCode.invalid_request)
        if enable_2pc and not self._two_phase_commit_enabled:
            # KIP-939: the same answer as a missing ACL, so a client cannot probe the flag.
            return InitProducerIdResult(ErrorCode.transactional_id_authorization_failed)
        if enable_2pc:
            timeout_ms = TWO_PHASE_COMMIT_TIMEOUT_MS  # the client's timeout is ignored
        elif not 0 < timeout_ms <= self._max_timeout_ms:
            return InitProducerIdResult(ErrorCode.invalid_transaction_timeout)
        if (producer_id == NO_PRODUCER_ID) != (producer_epoch == NO_PRODUCER_EPOCH):
            return InitProducerIdResult(ErrorCode.invalid_request)
        expected = None if producer_id == NO_PRODUCER_ID else (producer_id, producer_epoch)
        if not self._loaded:
            return InitProducerIdResult(ErrorCode.coordinator_load_in_progress)

        now = self._clock.now_ms()
        md = self._cache.get(transactional_id)
        try:
            if md is None:
                md = TransactionMetadata(
                    transactional_id=transactional_id,
                    producer_id=self._new_producer_id(),
                    producer_epoch=NO_PRODUCER_EPOCH,
                    txn_timeout_ms=timeout_ms,
                    txn_last_update_timestamp=now,
                )
                self._cache[transactional_id] = md
            decision = self._decide_init(md, timeout_ms, expected, keep_prepared, now)
        except KafkaError as exc:
            logger.info("InitProducerId for %r refused: %s", transactional_id, exc)
            return InitProducerIdResult(exc.code)
        except IllegalStateTransition as exc:
            # E.g. a bump of an exhausted epoch that does not match (Kafka's
            # prepareIncrementProducerEpoch throws, and the request is answered
            # UNKNOWN_SERVER_ERROR): an answer, never a closed connection.
            logger.warning("InitProducerId for %r impossible: %s", transactional_id, exc)
            return InitProducerIdResult(ErrorCode.unknown_server_error)

        if decision is None:
            # An open transaction: abort it with a bumped epoch (fencing the old instance)
            # and let the client retry once the markers are written.
            code = self._fence_and_abort(md, now, reason="a new producer instance")
            if code is not ErrorCode.none:
                return InitProducerIdResult(code)
            await self._wait_completion(transactional_id)
            return InitProducerIdResult(ErrorCode.concurrent_transactions)

        transit, ongoing = decision
        code = self._apply(md, transit)
        if code is not ErrorCode.none:
            return InitProducerIdResult(code)
        if ongoing is not None:
            result = InitProducerIdResult(
                ErrorCode.none, transit.next_producer_id, transit.next_producer_epoch,
                ongoing[0], ongoing[1],
            )
        else:
            result = InitProducerIdResult(
                ErrorCode.none, transit.producer_id, transit.producer_epoch
            )
        logger.info(
            "initialized transactional id %r: producer id %d epoch %d (partition %s-%d%s)",
            transactional_id, result.producer_id, result.producer_epoch,
            TRANSACTION_STATE_TOPIC, self.partition_for(transactional_id),
            f", kept transaction {ongoing[0]}/{ongoing[1]}" if ongoing else "",
        )
        return result

    def _decide_init(
        self,
        md: TransactionMetadata,
        timeout_ms: int,
        expected: tuple[int, int] | None,
        keep_prepared: bool,
        now: int,
    ) -> tuple[TxnTransitMetadata, tuple[int, int] | None] | None:
        """The transition InitProducerId makes (and the kept transaction's identity), or
        None when an open transaction must be fenced first. Raises KafkaError to refuse."""
        if md.pending_transition:
            raise KafkaError(ErrorCode.concurrent_transactions, "a transition is in progress")
        client_id, _ = md.client_identity()
        if expected is not None and not (
            md.producer_epoch == NO_PRODUCER_EPOCH  # just created: safe to hand it out
            or expected[0] in (client_id, md.producer_id)
            or (expected[0] == md.prev_producer_id and is_epoch_exhausted(expected[1]))
        ):
            raise KafkaError(ErrorCode.producer_fenced, f"producer id {expected[0]} is not current")
        state = md.state
        if state.is_prepared:
            raise KafkaError(ErrorCode.concurrent_transactions, "markers are being written")
        if state in (_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT):
            if md.is_epoch_exhausted and (expected is None or expected[1] == md.producer_epoch):
                transit = md.prepare_producer_id_rotation(
                    self._new_producer_id(), timeout_ms, now, expected is not None
                )
            else:
                transit = md.prepare_increment_producer_epoch(
                    timeout_ms, None if expected is None else expected[1], now
                )
            return transit, None
        if state is _S.ONGOING:
            if not keep_prepared:
                return None
            client = md.client_identity()
            if is_epoch_exhausted(client[1]):
                new_client = (self._new_producer_id(), 0)
            else:
                new_client = (client[0], client[1] + 1)
            return (
                md.prepare_keep_prepared(new_client, timeout_ms, now),
                (md.producer_id, md.producer_epoch),
            )
        raise IllegalStateTransition(f"{md.transactional_id} found in {state.wire_name}")

    def _fence_and_abort(self, md: TransactionMetadata, now: int, reason: str) -> ErrorCode:
        try:
            transit = md.prepare_fence_abort(now)
        except IllegalStateTransition as exc:
            # An epoch of Short.MAX_VALUE cannot be fenced (Kafka throws too).
            logger.error("cannot abort %r for %s: %s", md.transactional_id, reason, exc)
            return ErrorCode.unknown_server_error
        code = self._apply(md, transit)
        if code is ErrorCode.none:
            logger.info(
                "aborting %r (producer id %d) for %s: markers at epoch %d",
                md.transactional_id, md.producer_id, reason, md.producer_epoch,
            )
            self._start_completion(md.transactional_id)
        return code

    # ----------------------------------------------------------- AddPartitionsToTxn

    async def handle_add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
        verify_only: bool = False,
    ) -> dict[TopicPartition, ErrorCode]:
        """Add partitions to the transaction (v0-3, and v4+ from a partition leader), or with
        ``verify_only`` (KIP-890 part 1) answer for each partition whether it is in the
        ongoing transaction (NONE) or not (TRANSACTION_ABORTABLE)."""
        parts = list(dict.fromkeys(partitions))

        def every(code: ErrorCode) -> dict[TopicPartition, ErrorCode]:
            return {tp: code for tp in parts}

        if verify_only:
            return self.verify_partitions(transactional_id, producer_id, producer_epoch, parts)
        code, md = self._check_client(transactional_id, producer_id, producer_epoch)
        if md is None:
            return every(code)
        if md.pending_transition or md.state.is_prepared:
            return every(ErrorCode.concurrent_transactions)
        if md.keeping_prepared:
            # KIP-939: after KeepPreparedTxn the transaction may only be ended.
            return every(ErrorCode.invalid_txn_state)
        if not parts or (md.state is _S.ONGOING and md.partitions.issuperset(parts)):
            return every(ErrorCode.none)
        transit = md.prepare_add_partitions(parts, self._clock.now_ms())
        code = self._apply(md, transit)
        if code is ErrorCode.none:
            logger.debug(
                "%r added %d partitions, %d in the transaction",
                transactional_id, len(parts), len(md.partitions),
            )
        return every(code)

    def verify_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        """KIP-890 part 1 verification (AddPartitionsToTxn verify-only, and the produce and
        TxnOffsetCommit paths): is each partition in the ongoing transaction of exactly this
        producer id and epoch? As Kafka's ``handleVerifyPartitionsInTransaction``: another
        producer id is INVALID_PRODUCER_ID_MAPPING, any other epoch (older or newer) is
        PRODUCER_FENCED, markers being written is CONCURRENT_TRANSACTIONS, a partition not in
        the transaction is TRANSACTION_ABORTABLE.

        The identity checked is the client's (``client_identity``). After
        InitProducerId(KeepPreparedTxn) (KIP-939) that is the new owner's: the old instance,
        still at the transaction's data epoch, is fenced; the new owner may only end the kept
        transaction, so its writes are refused with INVALID_TXN_STATE, as its
        AddPartitionsToTxn is. Synchronous: it changes nothing."""
        parts = list(dict.fromkeys(partitions))
        code, md = self._check_client(transactional_id, producer_id, producer_epoch)
        if md is None:
            return {tp: code for tp in parts}
        if md.state.is_prepared:
            code = ErrorCode.concurrent_transactions
        elif md.keeping_prepared:
            code = ErrorCode.invalid_txn_state
        if code is not ErrorCode.none:
            return {tp: code for tp in parts}
        return {
            tp: ErrorCode.none if tp in md.partitions else ErrorCode.transaction_abortable
            for tp in parts
        }

    async def handle_add_offsets(
        self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str
    ) -> ErrorCode:
        """Add the group's ``__consumer_offsets`` partition to the transaction."""
        tp = self.offsets_partition_for(group_id)
        result = await self.handle_add_partitions(
            transactional_id, producer_id, producer_epoch, [tp]
        )
        return result[tp]

    def _check_client(
        self, transactional_id: str, producer_id: int, producer_epoch: int
    ) -> tuple[ErrorCode, TransactionMetadata | None]:
        if not transactional_id:
            return ErrorCode.invalid_request, None
        if not self._loaded:
            return ErrorCode.coordinator_load_in_progress, None
        md = self._cache.get(transactional_id)
        if md is None:
            return ErrorCode.invalid_producer_id_mapping, None
        client_id, client_epoch = md.client_identity()
        if producer_id != client_id:
            return ErrorCode.invalid_producer_id_mapping, None
        if producer_epoch != client_epoch:
            return ErrorCode.producer_fenced, None
        return ErrorCode.none, md

    # -------------------------------------------------------------------- EndTxn

    async def handle_end_txn(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        client_version: int = 0,
    ) -> EndTxnResult:
        """Commit or abort. Answers once PREPARE_* is durable and the markers are written
        (or after ``end_txn_wait_ms``; the outcome is decided either way). With
        ``client_version`` >= 2 (EndTxn v5, KIP-890 part 2) the epoch is bumped for every
        transaction and the answer carries the identity the client continues with."""
        if not transactional_id:
            return EndTxnResult(ErrorCode.invalid_request)
        if not self._loaded:
            return EndTxnResult(ErrorCode.coordinator_load_in_progress)
        md = self._cache.get(transactional_id)
        if md is None:
            return EndTxnResult(ErrorCode.invalid_producer_id_mapping)
        try:
            outcome = self._decide_end(md, producer_id, producer_epoch, commit, client_version)
        except KafkaError as exc:
            logger.debug("EndTxn for %r refused: %s", transactional_id, exc)
            return EndTxnResult(exc.code)
        if isinstance(outcome, EndTxnResult):
            return outcome
        code = self._apply(md, outcome)
        if code is not ErrorCode.none:
            return EndTxnResult(code)
        logger.debug(
            "%r %s logged (producer id %d epoch %d, %d partitions)",
            transactional_id, outcome.state.wire_name, outcome.producer_id,
            outcome.producer_epoch, len(outcome.partitions),
        )
        self._start_completion(transactional_id)
        await self._wait_completion(transactional_id)
        if outcome.next_producer_id >= 0:
            after = outcome.next_producer_id, outcome.next_producer_epoch
        else:
            after = outcome.producer_id, outcome.producer_epoch
        return EndTxnResult(ErrorCode.none, *after)

    def _decide_end(
        self,
        md: TransactionMetadata,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        client_version: int,
    ) -> TxnTransitMetadata | EndTxnResult:
        state = md.state
        client = md.client_identity()
        ended_v2 = md.client_transaction_version >= TV_EPOCH_BUMP
        # A retried EndTxn of transactions v2: the client still has the identity it ended
        # the transaction with (it never got the answer carrying its new one).
        is_retry = (
            (state.is_prepared or state.is_complete)
            and ended_v2
            and (producer_id, producer_epoch) == (md.prev_producer_id, md.last_producer_epoch)
        )
        if producer_id != client[0] and not is_retry:
            raise KafkaError(ErrorCode.invalid_producer_id_mapping, f"producer id {producer_id}")
        if producer_epoch != client[1] and not is_retry:
            raise KafkaError(ErrorCode.producer_fenced, f"epoch {producer_epoch} != {client[1]}")
        if md.pending_transition:
            raise KafkaError(ErrorCode.concurrent_transactions, "a transition is in progress")
        wants = _S.PREPARE_COMMIT if commit else _S.PREPARE_ABORT
        done = _S.COMPLETE_COMMIT if commit else _S.COMPLETE_ABORT
        now = self._clock.now_ms()
        tv2 = client_version >= TV_EPOCH_BUMP

        if state is _S.ONGOING:
            new_id = NO_PRODUCER_ID
            if tv2 and is_epoch_exhausted(client[1]):
                new_id = self._new_producer_id()
            return md.prepare_end(commit, now, client_version, new_id)
        if state.is_complete and (is_retry or not ended_v2):
            if state is done:
                return EndTxnResult(ErrorCode.none, md.producer_id, md.producer_epoch)
            raise KafkaError(ErrorCode.invalid_txn_state, f"already {state.wire_name}")
        if state.is_prepared:
            if state is wants:
                raise KafkaError(ErrorCode.concurrent_transactions, "markers are being written")
            raise KafkaError(ErrorCode.invalid_txn_state, f"already {state.wire_name}")
        if state in (_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT):
            if not commit and tv2:
                # Transactions v2: a client unsure whether its transaction began may abort;
                # the epoch is still bumped.
                new_id = self._new_producer_id() if is_epoch_exhausted(client[1]) else -1
                return md.prepare_end(False, now, client_version, new_id)
            raise KafkaError(ErrorCode.invalid_txn_state, f"no transaction in {state.wire_name}")
        raise IllegalStateTransition(f"{md.transactional_id} found in {state.wire_name}")

    # ------------------------------------------------------------------ markers

    def _start_completion(self, transactional_id: str) -> None:
        running = self._completions.get(transactional_id)
        if running is not None and not running.done():
            return
        if self._tasks is None:
            self._deferred.add(transactional_id)
            return
        task = self._tasks.create_task(
            self._complete_transaction(transactional_id),
            name=f"txn-markers-{transactional_id}",
        )
        self._completions[transactional_id] = task

        def forget(done: asyncio.Task[None]) -> None:
            if self._completions.get(transactional_id) is done:
                del self._completions[transactional_id]

        task.add_done_callback(forget)

    async def _wait_completion(self, transactional_id: str) -> None:
        task = self._completions.get(transactional_id)
        if task is None or task.done():
            return
        try:
            await asyncio.wait_for(asyncio.shield(task), self._end_txn_wait_s)
        except TimeoutError:
            logger.info("markers of %r still in flight; answering now", transactional_id)

    async def wait_completions(self) -> None:
        """Wait until every transaction whose markers are being written has completed."""
        while True:
            tasks = [t for t in self._completions.values() if not t.done()]
            if not tasks:
                return
            await asyncio.gather(*(asyncio.shield(t) for t in tasks))

    async def _complete_transaction(self, transactional_id: str) -> None:
        """Write the markers of a prepared transaction until every partition has one, then
        log CompleteCommit/CompleteAbort. Never gives up while this coordinator owns it."""
        backoff = self._backoff_ms
        while True:
            md = self._cache.get(transactional_id)
            if md is None or not md.state.is_prepared or md.pending_transition:
                logger.error("%r has nothing to complete", transactional_id)
                return
            commit = md.state is _S.PREPARE_COMMIT
            pending = sorted(md.partitions)
            if pending:
                try:
                    answers = await self._markers.write_markers(
                        md.producer_id, md.producer_epoch, self.coordinator_epoch, commit, pending
                    )
                except Exception as exc:  # an error of the writer: retry, never give up
                    logger.warning(
                        "writing markers for %r failed: %r; retrying", transactional_id, exc
                    )
                    answers = {}
                if self._cache.get(transactional_id) is not md:
                    return
                for tp in pending:
                    code = answers.get(tp, ErrorCode.unknown_server_error)
                    outcome = classify_marker_error(code)
                    if outcome is MarkerOutcome.DONE:
                        if code is not ErrorCode.none:
                            logger.warning(
                                "marker for %r on %s-%d answered %s: partition done",
                                transactional_id, tp[0], tp[1], code.name,
                            )
                        md.remove_partition(tp)
                    elif outcome is MarkerOutcome.STOP:
                        logger.error(
                            "marker for %r on %s-%d: %s; this coordinator stops",
                            transactional_id, tp[0], tp[1], code.name,
                        )
                        return
                    else:
                        logger.info(
                            "marker for %r on %s-%d failed with %s; will retry",
                            transactional_id, tp[0], tp[1], code.name,
                        )
            if not md.partitions:
                transit = md.prepare_complete(self._clock.now_ms())
                if self._apply(md, transit) is ErrorCode.none:
                    logger.debug(
                        "%r %s (producer id %d epoch %d)",
                        transactional_id, md.state.wire_name, md.producer_id, md.producer_epoch,
                    )
                    return
            self._marker_retries += 1
            await self._sleep(backoff / 1000)
            backoff = min(backoff * 2, self._backoff_max_ms)

    # -------------------------------------------------------------------- sweeps

    def abort_timed_out_transactions(self) -> int:
        """Abort every ongoing transaction older than its timeout, with an epoch bump so the
        producer that left it is fenced. Two-phase-commit transactions never time out.
        Also restarts the markers of any prepared transaction nobody is completing."""
        now = self._clock.now_ms()
        aborted = 0
        for transactional_id, md in list(self._cache.items()):
            if md.pending_transition:
                continue
            if md.state.is_prepared:
                self._start_completion(transactional_id)  # no-op while one is running
                continue
            if (
                md.state is _S.ONGOING
                and not md.two_phase_commit
                and md.txn_start_timestamp + md.txn_timeout_ms < now
            ):
                code = self._fence_and_abort(
                    md, now, reason=f"its timeout of {md.txn_timeout_ms} ms"
                )
                if code is ErrorCode.none:
                    aborted += 1
                    self._timed_out_aborts += 1
        return aborted

    def remove_expired_transactional_ids(self) -> int:
        """Forget transactional ids idle for ``transactional.id.expiration.ms`` with no open
        transaction: a tombstone per id, then removal from the cache."""
        now = self._clock.now_ms()
        expiration_ms = int(self._config["transactional.id.expiration.ms"])
        by_partition: dict[int, list[TransactionMetadata]] = defaultdict(list)
        for transactional_id, md in self._cache.items():
            if (
                md.pending_state is None
                and md.state.expiration_allowed
                and md.txn_last_update_timestamp <= now - expiration_ms
            ):
                md.prepare_dead()
                by_partition[self.partition_for(transactional_id)].append(md)
        removed = 0
        for partition, mds in by_partition.items():
            try:
                self._store.append(partition, [tombstone(md.transactional_id) for md in mds])
                ok = True
            except (KafkaError, OSError) as exc:
                logger.warning("tombstones for %d expired ids failed: %s", len(mds), exc)
                ok = False
            for md in mds:
                if ok and self._cache.get(md.transactional_id) is md:
                    del self._cache[md.transactional_id]
                    removed += 1
                    logger.info(
                        "expired transactional id %r (producer id %d)",
                        md.transactional_id, md.producer_id,
                    )
                else:
                    md.cancel_transition()
        self._expired += removed
        return removed

    async def run(self) -> None:
        """Run the coordinator's tasks (markers, sweeps) until cancelled. Start it inside the
        broker's TaskGroup after ``load()``."""
        async with asyncio.TaskGroup() as tasks:
            self._tasks = tasks
            try:
                for transactional_id in sorted(self._deferred):
                    self._start_completion(transactional_id)
                self._deferred.clear()
                self._running.set()
                await self._sweep_loop()
            finally:
                self._running.clear()
                self._tasks = None

    async def wait_running(self) -> None:
        await self._running.wait()

    async def _sweep_loop(self) -> None:
        abort_every = int(
            self._config["transaction.abort.timed.out.transaction.cleanup.interval.ms"]
        )
        expire_every = int(
            self._config["transaction.remove.expired.transaction.cleanup.interval.ms"]
        )
        start = self._clock.monotonic_ms()
        next_abort, next_expire = start + abort_every, start + expire_every
        while True:
            now = self._clock.monotonic_ms()
            wait_ms = min(next_abort, next_expire) - now
            if wait_ms > 0:
                await self._sleep(wait_ms / 1000)
                continue
            if now >= next_abort:
                self.abort_timed_out_transactions()
                next_abort = self._clock.monotonic_ms() + abort_every
            if now >= next_expire:
                self.remove_expired_transactional_ids()
                next_expire = self._clock.monotonic_ms() + expire_every

    # ------------------------------------------------------------ admin views

    def list_transactions(
        self,
        state_filters: Sequence[str] = (),
        producer_id_filters: Sequence[int] = (),
        duration_filter_ms: int = -1,
        transactional_id_pattern: str | None = None,
    ) -> ListTransactionsResult:
        if not self._loaded:
            return ListTransactionsResult(ErrorCode.coordinator_load_in_progress)
        states: set[TransactionState] = set()
        unknown: list[str] = []
        for name in state_filters:
            state = parse_state(name)
            if state is None:
                unknown.append(name)
            else:
                states.add(state)
        pattern = None
        if transactional_id_pattern:
            try:
                pattern = re.compile(transactional_id_pattern)
            except re.error:
                return ListTransactionsResult(ErrorCode.invalid_regular_expression)
        now = self._clock.now_ms()
        pids = set(producer_id_filters)
        listed = []
        for transactional_id, md in sorted(self._cache.items()):
            if state_filters and md.state not in states:
                continue
            if pids and md.producer_id not in pids:
                continue
            if duration_filter_ms >= 0 and now - md.txn_start_timestamp <= duration_filter_ms:
                continue
            if pattern is not None and not pattern.fullmatch(transactional_id):
                continue
            listed.append(ListedTransaction(transactional_id, md.producer_id, md.state))
        return ListTransactionsResult(ErrorCode.none, tuple(unknown), tuple(listed))

    def describe_transactions(self, transactional_ids: Iterable[str]) -> list[DescribedTransaction]:
        out = []
        for transactional_id in transactional_ids:
            if not self._loaded:
                out.append(
                    DescribedTransaction(transactional_id, ErrorCode.coordinator_load_in_progress)
                )
                continue
            if not transactional_id:
                out.append(DescribedTransaction(transactional_id, ErrorCode.invalid_request))
                continue
            md = self._cache.get(transactional_id)
            if md is None:
                out.append(
                    DescribedTransaction(transactional_id, ErrorCode.transactional_id_not_found)
                )
                continue
            out.append(
                DescribedTransaction(
                    transactional_id=transactional_id,
                    error=ErrorCode.none,
                    state=md.state,
                    producer_id=md.producer_id,
                    producer_epoch=md.producer_epoch,
                    timeout_ms=md.txn_timeout_ms,
                    start_timestamp_ms=md.txn_start_timestamp,
                    partitions=tuple(sorted(md.partitions)),
                    two_phase_commit=md.two_phase_commit,
                )
            )
        return out

    def statistics(self) -> TxnCoordinatorStatistics:
        now = self._clock.now_ms()
        open_mds = [
            md for md in self._cache.values() if md.state is _S.ONGOING or md.state.is_prepared
        ]
        oldest = max(
            (now - md.txn_start_timestamp for md in open_mds if md.txn_start_timestamp >= 0),
            default=0,
        )
        return TxnCoordinatorStatistics(
            transactional_ids=len(self._cache),
            open_transactions=len(open_mds),
            two_phase_commit_transactions=sum(1 for md in open_mds if md.two_phase_commit),
            oldest_open_transaction_age_ms=max(oldest, 0),
            markers_in_flight=len(self._completions),
            marker_retries=self._marker_retries,
            timed_out_aborts=self._timed_out_aborts,
            expired_transactional_ids=self._expired,
        )
