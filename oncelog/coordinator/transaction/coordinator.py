"""The transaction coordinator's request handling: one ``handle_*`` per API.

Kafka's TransactionCoordinator. Every decision is made by synchronous code that reads and
prepares the metadata of one transactional id, has the state manager append the prepared
state to ``__transaction_state``, wait until the in-sync replicas have it (cluster mode;
a single node does not suspend there) and only then apply it (``state_manager.py``,
``metadata.py``). The pending state set by the prepare keeps any other transition of the
same id out for as long as the transition is open (a concurrent request gets
CONCURRENT_TRANSACTIONS, as in Kafka). The other awaits are for markers, which the marker
channel (``marker_channel.py``) writes in tasks of the coordinator's own TaskGroup (started
by ``run()``), so a client that disconnects never leaves a decided transaction half-marked.

Life of a transaction:
  InitProducerId -> Empty (epoch bumped) ; AddPartitions/AddOffsets -> Ongoing (logged)
  EndTxn -> PrepareCommit/PrepareAbort logged (the outcome is now fixed)
         -> markers to every partition, retried with backoff until all are written
         -> CompleteCommit/CompleteAbort logged.
After a restart ``load()`` rebuilds the cache from the log and finishes every Prepare* it
finds. ``run()`` also aborts transactions older than their timeout (bumping the epoch so the
zombie is fenced) and expires idle transactional ids, in one loop so the sweeps never overlap.
It also hands out every producer id, idempotent producers' included (InitProducerId without
a transactional id), and answers the KIP-890 verification of the produce and TxnOffsetCommit
paths (``verify_partitions``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from oncelog.clock import Clock
from oncelog.config import BrokerConfig
from oncelog.coordinator.group.codec import partition_for as group_partition_for
from oncelog.coordinator.producer_ids import ProducerIdSource
from oncelog.coordinator.transaction.decisions import decide_end, decide_init
from oncelog.coordinator.transaction.marker_channel import (
    MarkerWriter,
    Sleep,
    TransactionMarkerChannel,
)
from oncelog.coordinator.transaction.metadata import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TWO_PHASE_COMMIT_TIMEOUT_MS,
    TopicPartition,
    TransactionMetadata,
)
from oncelog.coordinator.transaction.results import (
    DescribedTransaction,
    EndTxnResult,
    InitProducerIdResult,
    ListTransactionsResult,
    TxnCoordinatorStatistics,
)
from oncelog.coordinator.transaction.state import IllegalStateTransition, TransactionState
from oncelog.coordinator.transaction.state_manager import (
    TRANSACTION_STATE_TOPIC,
    TransactionStateManager,
)
from oncelog.coordinator.transaction.store import TxnLogStore
from oncelog.errors import ErrorCode, KafkaError
from oncelog.faults import crash_point
from oncelog.internal_topics import OFFSETS_TOPIC

logger = logging.getLogger(__name__)

_S = TransactionState

# The finalized feature of KIP-890 part 2, as Kafka advertises it in ApiVersions: supported
# 0..2; level 2 is transactions v2 (Produce v12 adds partitions, an epoch bump per EndTxn).
TRANSACTION_VERSION_FEATURE = "transaction.version"
MAX_TRANSACTION_VERSION = 2

# A loaded partition waits for the in-sync replicas in rounds of this long (and after a
# failed round, e.g. before the replica has taken its leadership, this much longer).
LOAD_ISR_WAIT_MS = 5000
LOAD_ISR_RETRY_S = 0.1


@dataclass(frozen=True, eq=False)
class _PendingLoad:
    """A replayed partition waiting for the in-sync replicas to hold all of it."""

    coordinator_epoch: int
    loaded: dict[str, TransactionMetadata]
    end: int


class TransactionCoordinator:
    def __init__(
        self,
        config: BrokerConfig,
        store: TxnLogStore,
        producer_ids: ProducerIdSource,
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
        self._producer_ids = producer_ids
        self._clock = clock
        self._sleep = sleep
        self._state = TransactionStateManager(
            config, store, clock, coordinator_epoch=coordinator_epoch
        )
        self._channel = TransactionMarkerChannel(
            self._state, markers, clock, sleep=sleep, end_txn_wait_ms=end_txn_wait_ms,
            backoff_ms=marker_backoff_ms, backoff_max_ms=marker_backoff_max_ms,
        )
        self._max_timeout_ms = int(config["transaction.max.timeout.ms"])
        self._two_phase_commit_enabled = bool(config["transaction.two.phase.commit.enable"])
        self._running = asyncio.Event()
        self._tasks: asyncio.TaskGroup | None = None
        self._pending_loads: dict[int, _PendingLoad] = {}
        self._load_tasks: dict[int, asyncio.Task[None]] = {}
        self._timed_out_aborts = 0
        self._transaction_version = int(config["transaction.version"])
        # Clients keep the features of the highest epoch they saw: the start time moves it
        # past any earlier run of this broker, whose level may have been different.
        self._features_epoch = clock.now_ms()

    # ------------------------------------------------------------------- features

    @property
    def transaction_version(self) -> int:
        """The finalized ``transaction.version`` level (``transaction.version`` config)."""
        return self._transaction_version

    @property
    def features_epoch(self) -> int:
        """The epoch of the finalized features this broker advertises (always >= 0)."""
        return self._features_epoch

    # ------------------------------------------------------------------- placement

    @property
    def coordinator_epoch(self) -> int:
        return self._state.coordinator_epoch

    @coordinator_epoch.setter
    def coordinator_epoch(self, epoch: int) -> None:
        self._state.default_coordinator_epoch = epoch

    def partition_for(self, transactional_id: str) -> int:
        """The ``__transaction_state`` partition holding ``transactional_id``."""
        return self._state.partition_for(transactional_id)

    def offsets_partition_for(self, group_id: str) -> TopicPartition:
        return OFFSETS_TOPIC, group_partition_for(
            group_id, int(self._config["offsets.topic.num.partitions"])
        )

    @property
    def loaded(self) -> bool:
        return self._state.loaded

    def get(self, transactional_id: str) -> TransactionMetadata | None:
        """The cached metadata (read-only use: tools and tests)."""
        return self._state.get(transactional_id)

    def load(self) -> int:
        """Rebuild the cache from ``__transaction_state``; transactions found in
        PrepareCommit/PrepareAbort get their markers written again and complete (as soon as
        ``run()`` is running)."""
        return self._state.load(self._channel.start)

    def start_partitioned(self) -> None:
        """Cluster mode: own no ``__transaction_state`` partition until this broker leads
        one (``load_partition``); the ids of the others answer NOT_COORDINATOR."""
        self._state.start_partitioned()

    def begin_loading(self, partition: int) -> None:
        """This broker now leads ``partition``: its ids answer COORDINATOR_LOAD_IN_PROGRESS
        until ``load_partition`` has run."""
        self._state.begin_loading(partition)

    def load_partition(self, partition: int, coordinator_epoch: int) -> int:
        """Own ``partition`` at ``coordinator_epoch`` (its leader epoch): replay it to its
        log end and, once the in-sync replicas hold all of it, serve its ids and resume the
        markers of every transaction it has in PrepareCommit/PrepareAbort. Until then its
        ids answer COORDINATOR_LOAD_IN_PROGRESS: the log may end with records only this
        replica has (an append whose ISR wait failed when this broker was fenced, and that
        it leads again at the same epoch), which the next leader may lack; a decision taken
        on one (an AddPartitionsToTxn or a produce verified against an Ongoing record, the
        markers of a PrepareCommit) would outlive it. Kafka's TransactionStateManager loads
        to the log end as well and serves at once; waiting closes the window in which such a
        tail is lost with the leadership."""
        if partition in self._state.owned_partitions():
            self.unload_partition(partition)  # an older epoch's markers stop first
        self._forget_pending_load(partition)
        loaded, end = self._state.replay_partition(partition)
        if self._state.in_sync(partition, end):
            return self._state.install_partition(
                partition, coordinator_epoch, loaded, self._channel.start
            )
        logger.info(
            "%s-%d replayed to offset %d at coordinator epoch %d (%d transactional ids); "
            "served once the in-sync replicas hold it", TRANSACTION_STATE_TOPIC, partition,
            end, coordinator_epoch, len(loaded),
        )
        pending = _PendingLoad(coordinator_epoch, loaded, end)
        self._pending_loads[partition] = pending
        if self._tasks is not None:
            self._start_pending_load(partition, pending)
        return len(loaded)

    def _start_pending_load(self, partition: int, pending: _PendingLoad) -> None:
        assert self._tasks is not None
        self._load_tasks[partition] = self._tasks.create_task(
            self._install_when_in_sync(partition, pending),
            name=f"txn-load-{TRANSACTION_STATE_TOPIC}-{partition}",
        )

    async def _install_when_in_sync(self, partition: int, pending: _PendingLoad) -> None:
        while self._pending_loads.get(partition) is pending:
            if self._state.in_sync(partition, pending.end):
                del self._pending_loads[partition]
                self._load_tasks.pop(partition, None)
                self._state.install_partition(
                    partition, pending.coordinator_epoch, pending.loaded, self._channel.start
                )
                return
            code = await self._state.wait_in_sync(partition, pending.end, LOAD_ISR_WAIT_MS)
            if code is not ErrorCode.none and not self._state.in_sync(partition, pending.end):
                await self._sleep(LOAD_ISR_RETRY_S)

    def _forget_pending_load(self, partition: int) -> None:
        self._pending_loads.pop(partition, None)
        task = self._load_tasks.pop(partition, None)
        if task is not None and not task.done():
            task.cancel()

    def unload_partition(self, partition: int) -> int:
        """Another broker leads ``partition`` now: forget its ids and stop their markers
        (later requests for them answer NOT_COORDINATOR)."""
        self._forget_pending_load(partition)
        removed = self._state.unload_partition(partition)
        self._channel.stop(removed)
        return len(removed)

    def owned_partitions(self) -> dict[int, int]:
        """The ``__transaction_state`` partitions loaded here (or replayed and waiting for
        the in-sync replicas), with their coordinator epochs."""
        owned = self._state.owned_partitions()
        owned.update((p, pending.coordinator_epoch) for p, pending in self._pending_loads.items())
        return owned

    def _new_producer_id(self) -> int:
        try:
            return self._producer_ids.next_id()
        except (OSError, RuntimeError) as exc:
            logger.error("cannot allocate a producer id: %s", exc)
            raise KafkaError(ErrorCode.coordinator_not_available, str(exc)) from exc

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
        if (code := self._state.check(transactional_id)) is not ErrorCode.none:
            return InitProducerIdResult(code)

        now = self._clock.now_ms()
        md = self._state.get(transactional_id)
        try:
            if md is None:
                md = TransactionMetadata(
                    transactional_id=transactional_id,
                    producer_id=self._new_producer_id(),
                    producer_epoch=NO_PRODUCER_EPOCH,
                    txn_timeout_ms=timeout_ms,
                    txn_last_update_timestamp=now,
                )
                self._state.put(md)
            decision = decide_init(
                md, timeout_ms, expected, keep_prepared, now, self._new_producer_id
            )
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
            code = await self._fence_and_abort(md, now, reason="a new producer instance")
            if code is not ErrorCode.none:
                return InitProducerIdResult(code)
            await self._channel.wait(transactional_id)
            return InitProducerIdResult(ErrorCode.concurrent_transactions)

        transit, ongoing = decision
        code = await self._state.apply(md, transit)
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

    async def _fence_and_abort(
        self, md: TransactionMetadata, now: int, reason: str
    ) -> ErrorCode:
        try:
            transit = md.prepare_fence_abort(now)
        except IllegalStateTransition as exc:
            # An epoch of Short.MAX_VALUE cannot be fenced (Kafka throws too).
            logger.error("cannot abort %r for %s: %s", md.transactional_id, reason, exc)
            return ErrorCode.unknown_server_error
        code = await self._state.apply(md, transit)
        if code is ErrorCode.none:
            logger.info(
                "aborting %r (producer id %d) for %s: markers at epoch %d",
                md.transactional_id, md.producer_id, reason, md.producer_epoch,
            )
            self._channel.start(md.transactional_id)
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
        code = await self._state.apply(md, transit)
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
        if (code := self._state.check(transactional_id)) is not ErrorCode.none:
            return code, None
        md = self._state.get(transactional_id)
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
        if (code := self._state.check(transactional_id)) is not ErrorCode.none:
            return EndTxnResult(code)
        md = self._state.get(transactional_id)
        if md is None:
            return EndTxnResult(ErrorCode.invalid_producer_id_mapping)
        try:
            outcome = decide_end(
                md, producer_id, producer_epoch, commit, client_version,
                self._clock.now_ms(), self._new_producer_id,
            )
        except KafkaError as exc:
            logger.debug("EndTxn for %r refused: %s", transactional_id, exc)
            return EndTxnResult(exc.code)
        if isinstance(outcome, EndTxnResult):
            return outcome
        code = await self._state.apply(md, outcome)
        if code is not ErrorCode.none:
            return EndTxnResult(code)
        logger.debug(
            "%r %s logged (producer id %d epoch %d, %d partitions)",
            transactional_id, outcome.state.wire_name, outcome.producer_id,
            outcome.producer_epoch, len(outcome.partitions),
        )
        crash_point("txn.prepared.before_markers")
        self._channel.start(transactional_id)
        await self._channel.wait(transactional_id)
        if outcome.next_producer_id >= 0:
            after = outcome.next_producer_id, outcome.next_producer_epoch
        else:
            after = outcome.producer_id, outcome.producer_epoch
        return EndTxnResult(ErrorCode.none, *after)

    # -------------------------------------------------------------------- sweeps

    async def abort_timed_out_transactions(self) -> int:
        """Abort every ongoing transaction older than its timeout, with an epoch bump so the
        producer that left it is fenced. Two-phase-commit transactions never time out.
        Also restarts the markers of any prepared transaction nobody is completing. Each
        abort's log write waits for the in-sync replicas (no wait on a single node); a
        transaction another request changed meanwhile is left alone."""
        now = self._clock.now_ms()
        for transactional_id, md in self._state.items():
            if not md.pending_transition and md.state.is_prepared:
                self._channel.start(transactional_id)  # no-op while one is running
        aborted = 0
        for md in self._state.timed_out_transactions(now):
            if md.pending_transition or md.state is not _S.ONGOING:
                continue
            code = await self._fence_and_abort(
                md, now, reason=f"its timeout of {md.txn_timeout_ms} ms"
            )
            if code is ErrorCode.none:
                aborted += 1
                self._timed_out_aborts += 1
        return aborted

    def remove_expired_transactional_ids(self) -> int:
        """Forget transactional ids idle for ``transactional.id.expiration.ms``."""
        return self._state.remove_expired_transactional_ids()

    async def wait_completions(self) -> None:
        """Wait until every transaction whose markers are being written has completed."""
        await self._channel.wait_all()

    async def run(self) -> None:
        """Run the coordinator's tasks (markers, sweeps) until cancelled. Start it inside the
        broker's TaskGroup after ``load()``."""
        async with asyncio.TaskGroup() as tasks:
            self._channel.attach(tasks)
            self._tasks = tasks
            for partition, pending in sorted(self._pending_loads.items()):
                self._start_pending_load(partition, pending)
            try:
                self._running.set()
                await self._state.run_sweeps(self.abort_timed_out_transactions, self._sleep)
            finally:
                self._running.clear()
                self._channel.detach()
                self._tasks = None

    async def wait_running(self) -> None:
        await self._running.wait()

    # ------------------------------------------------------------ admin views

    def list_transactions(
        self,
        state_filters: Sequence[str] = (),
        producer_id_filters: Sequence[int] = (),
        duration_filter_ms: int = -1,
        transactional_id_pattern: str | None = None,
    ) -> ListTransactionsResult:
        return self._state.list_transactions(
            state_filters, producer_id_filters, duration_filter_ms, transactional_id_pattern
        )

    def describe_transactions(self, transactional_ids: Iterable[str]) -> list[DescribedTransaction]:
        out = []
        for transactional_id in transactional_ids:
            if not transactional_id:
                out.append(DescribedTransaction(transactional_id, ErrorCode.invalid_request))
                continue
            if (code := self._state.check(transactional_id)) is not ErrorCode.none:
                out.append(DescribedTransaction(transactional_id, code))
                continue
            md = self._state.get(transactional_id)
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
            md for _, md in self._state.items() if md.state is _S.ONGOING or md.state.is_prepared
        ]
        oldest = max(
            (now - md.txn_start_timestamp for md in open_mds if md.txn_start_timestamp >= 0),
            default=0,
        )
        return TxnCoordinatorStatistics(
            transactional_ids=len(self._state),
            open_transactions=len(open_mds),
            two_phase_commit_transactions=sum(1 for md in open_mds if md.two_phase_commit),
            oldest_open_transaction_age_ms=max(oldest, 0),
            markers_in_flight=self._channel.in_flight,
            marker_retries=self._channel.retries,
            timed_out_aborts=self._timed_out_aborts,
            expired_transactional_ids=self._state.expired,
        )
