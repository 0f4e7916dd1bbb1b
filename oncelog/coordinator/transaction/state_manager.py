"""The transaction state manager: the cache of TransactionMetadata and the transaction log.

It owns everything the coordinator keeps about transactional ids (Kafka's
TransactionStateManager): the cache, the placement of an id on a ``__transaction_state``
partition, which of those partitions this coordinator owns (loaded, loading, or not here),
the log appends (prepare -> durable append -> wait for the in-sync replicas -> complete: a
transition prepared by ``metadata.py`` is applied only once the ISR has it; a failed append
or wait cancels it and is translated, in one place, into the error a transactional client
understands), loading the
cache from the log after a restart or on becoming leader of a partition (replayed to the log
end, installed once the in-sync replicas hold what was read: the same rule for what was
loaded as for what is appended; dropping a partition's ids when another broker takes it
over), the list of transactions for
ListTransactions, and the two sweeps' halves that concern the cache: which transactions
have timed out, and forgetting idle transactional ids (tombstones first, then the cache).

Sans-IO apart from the store it is given: ``apply`` and ``wait_in_sync`` await only the
store's ISR wait (which does not suspend on a single node), ``run_sweeps`` the injected
``sleep`` and the sweep; the clock is injected.
"""

from __future__ import annotations

import logging
import re
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterator, Sequence

from oncelog.clock import Clock
from oncelog.config import BrokerConfig
from oncelog.coordinator.group.codec import java_string_hash, kafka_abs
from oncelog.coordinator.store_errors import StoreWrite, translate_store_error
from oncelog.coordinator.transaction.log_codec import (
    decode_key,
    decode_value,
    encode_record,
    tombstone,
)
from oncelog.coordinator.transaction.metadata import TransactionMetadata, TxnTransitMetadata
from oncelog.coordinator.transaction.results import ListedTransaction, ListTransactionsResult
from oncelog.coordinator.transaction.state import TransactionState, parse_state
from oncelog.coordinator.transaction.store import TxnLogStore
from oncelog.errors import ErrorCode, KafkaError
from oncelog.faults import crash_point
from oncelog.internal_topics import TRANSACTION_STATE_TOPIC

logger = logging.getLogger(__name__)

Sleep = Callable[[float], Awaitable[None]]

_S = TransactionState


def transaction_log_partition(transactional_id: str, num_partitions: int) -> int:
    """Kafka's ``Utils.abs(transactionalId.hashCode) % partitions``."""
    return kafka_abs(java_string_hash(transactional_id)) % num_partitions


class TransactionStateManager:
    def __init__(
        self,
        config: BrokerConfig,
        store: TxnLogStore,
        clock: Clock,
        *,
        coordinator_epoch: int = 0,
    ) -> None:
        self._config = config
        self._store = store
        self._clock = clock
        # The epoch a single node writes markers with; in a cluster each partition has its
        # own: the leader epoch of that __transaction_state partition (``_owned``).
        self.default_coordinator_epoch = coordinator_epoch
        self._cache: dict[str, TransactionMetadata] = {}
        # Kafka's TransactionStateManager: the partitions loaded here with their coordinator
        # epoch, and those being loaded (their ids answer COORDINATOR_LOAD_IN_PROGRESS).
        self._owned: dict[int, int] = {}
        self._loading: set[int] = set()
        self._loaded = False  # a first load (or cluster start) happened: others are not here
        self.expired = 0  # transactional ids forgotten since start

    # ------------------------------------------------------------------- the cache

    def partition_for(self, transactional_id: str) -> int:
        """The ``__transaction_state`` partition holding ``transactional_id``."""
        return transaction_log_partition(transactional_id, self._store.num_partitions)

    @property
    def loaded(self) -> bool:
        """Whether no partition is loading (and the coordinator has started)."""
        return self._loaded and not self._loading

    @property
    def coordinator_epoch(self) -> int:
        """The highest coordinator epoch of the partitions owned here (the default epoch on
        a single node or before any partition is loaded)."""
        return max(self._owned.values(), default=self.default_coordinator_epoch)

    def owned_partitions(self) -> dict[int, int]:
        """The partitions loaded here and their coordinator epochs."""
        return dict(self._owned)

    def coordinator_epoch_for(self, transactional_id: str) -> int | None:
        """The coordinator epoch of the id's partition; None if it is not owned here."""
        return self._owned.get(self.partition_for(transactional_id))

    def check(self, transactional_id: str) -> ErrorCode:
        """Whether this coordinator answers for ``transactional_id`` (Kafka's
        getTransactionState): COORDINATOR_LOAD_IN_PROGRESS while its partition loads (or
        before the first load), NOT_COORDINATOR if the partition is not owned here."""
        partition = self.partition_for(transactional_id)
        if partition in self._loading or not self._loaded:
            return ErrorCode.coordinator_load_in_progress
        if partition not in self._owned:
            return ErrorCode.not_coordinator
        return ErrorCode.none

    def start_partitioned(self) -> None:
        """Cluster mode: partitions are loaded one by one as this broker comes to lead them;
        until then their ids are NOT_COORDINATOR here."""
        self._loaded = True

    def begin_loading(self, partition: int) -> None:
        """Answer COORDINATOR_LOAD_IN_PROGRESS for the partition's ids until it is loaded."""
        self._check_partition(partition)
        self._loading.add(partition)

    def get(self, transactional_id: str) -> TransactionMetadata | None:
        return self._cache.get(transactional_id)

    def put(self, md: TransactionMetadata) -> None:
        """Cache a new transactional id (it reaches the log with its first transition)."""
        self._cache[md.transactional_id] = md

    def items(self) -> Iterator[tuple[str, TransactionMetadata]]:
        """A snapshot of the cache, safe to iterate while transitions change it."""
        return iter(list(self._cache.items()))

    def __len__(self) -> int:
        return len(self._cache)

    # ------------------------------------------------------------------ the log

    def _append(
        self, transactional_id: str, transit: TxnTransitMetadata
    ) -> tuple[ErrorCode, int]:
        """The local half of a write: the error code and the offset the ISR must reach."""
        key, value = encode_record(transactional_id, transit)
        try:
            end = self._store.append(self.partition_for(transactional_id), [(key, value)])
        except KafkaError as exc:
            return self._failed(transactional_id, transit, exc.code, str(exc)), -1
        except OSError as exc:
            logger.error("transaction log append for %r failed: %s", transactional_id, exc)
            return ErrorCode.not_coordinator, -1
        crash_point(f"txn.logged.{transit.state.wire_name}")
        return ErrorCode.none, end

    def _failed(
        self, transactional_id: str, transit: TxnTransitMetadata, code: ErrorCode, why: str
    ) -> ErrorCode:
        answer = translate_store_error(code, StoreWrite.TRANSACTION_LOG)
        logger.warning(
            "transaction log append for %r (%s) failed: %s; answering %s",
            transactional_id, transit.state.wire_name, why, answer.name,
        )
        return answer

    async def apply(self, md: TransactionMetadata, transit: TxnTransitMetadata) -> ErrorCode:
        """Append the prepared transition, wait until the in-sync replicas have it (Kafka's
        appendTransactionToLog with acks=-1 and the transaction's timeout), and only then
        apply it; otherwise cancel it and answer the translated error. A new coordinator
        loads what the ISR holds, so a transition it could not see is never acted on
        (markers are sent only after PrepareCommit/PrepareAbort is replicated). If the
        partition moved (or was reloaded) meanwhile the answer is NOT_COORDINATOR and the
        transition is not applied here: the owner now is whoever loaded the log. On a
        single node the wait returns without suspending: this is synchronous."""
        transactional_id = md.transactional_id
        partition = self.partition_for(transactional_id)
        owner_epoch = self._owned.get(partition)
        code, end = self._append(transactional_id, transit)
        if code is ErrorCode.none:
            acked = await self._store.wait_for_isr(partition, end, transit.txn_timeout_ms)
            if acked is not ErrorCode.none:
                code = self._failed(transactional_id, transit, acked, "in-sync replicas: "
                                    f"{acked.name}")
        still_owner = (
            self._cache.get(transactional_id) is md and self._owned.get(partition) == owner_epoch
        )
        if not still_owner:
            logger.info(
                "%r moved while %s was being logged (coordinator epoch %s -> %s): not "
                "applied here", transactional_id, transit.state.wire_name, owner_epoch,
                self._owned.get(partition),
            )
            return ErrorCode.not_coordinator if code is ErrorCode.none else code
        if code is ErrorCode.none:
            md.complete_transition(transit)
        else:
            md.cancel_transition()
        return code

    def load(self, on_prepared: Callable[[str], None]) -> int:
        """Single node: load every partition at the default coordinator epoch."""
        self._loaded = True
        total = sum(
            self.load_partition(partition, self.default_coordinator_epoch, on_prepared)
            for partition in range(self._store.num_partitions)
        )
        logger.info(
            "loaded %d transactional ids from %s (%d partitions)",
            total, TRANSACTION_STATE_TOPIC, self._store.num_partitions,
        )
        return total

    def load_partition(
        self, partition: int, coordinator_epoch: int, on_prepared: Callable[[str], None]
    ) -> int:
        """Replay one ``__transaction_state`` partition and own it at once: a single node,
        whose log is all its own (a cluster coordinator first waits for the in-sync
        replicas, ``TransactionCoordinator.load_partition``)."""
        loaded, _ = self.replay_partition(partition)
        return self.install_partition(partition, coordinator_epoch, loaded, on_prepared)

    def replay_partition(self, partition: int) -> tuple[dict[str, TransactionMetadata], int]:
        """Rebuild the ids of one ``__transaction_state`` partition from its log, to the log
        end (last record per id wins, a tombstone removes it; Kafka's
        loadTransactionMetadata): the ids, and the offset the in-sync replicas must reach
        before anything is decided on them. The partition's ids answer
        COORDINATOR_LOAD_IN_PROGRESS until ``install_partition``."""
        self._check_partition(partition)
        self._loaded = True
        self._loading.add(partition)
        try:
            end = self._store.log_end_offset(partition)
            loaded: dict[str, TransactionMetadata] = {}
            for key, value in self._store.read(partition):
                transactional_id = decode_key(key)
                if transactional_id is None:
                    logger.warning("skipping a __transaction_state key of unknown version")
                    continue
                transit = decode_value(value)
                if transit is None:
                    loaded.pop(transactional_id, None)
                else:
                    loaded[transactional_id] = TransactionMetadata.from_transit(
                        transactional_id, transit
                    )
        except BaseException:
            self._loading.discard(partition)
            raise
        return loaded, end

    def in_sync(self, partition: int, end: int) -> bool:
        """Whether the in-sync replicas hold the partition's log up to ``end``."""
        return self._store.high_watermark(partition) >= end

    async def wait_in_sync(self, partition: int, end: int, timeout_ms: int) -> ErrorCode:
        """Wait until the in-sync replicas hold the partition up to ``end`` (or an error:
        the store's ISR wait timed out, the leadership moved, ...)."""
        return await self._store.wait_for_isr(partition, end, timeout_ms)

    def install_partition(
        self,
        partition: int,
        coordinator_epoch: int,
        loaded: dict[str, TransactionMetadata],
        on_prepared: Callable[[str], None],
    ) -> int:
        """Own the partition at ``coordinator_epoch`` with the ids ``replay_partition``
        read (Kafka's loadTransactionsForTxnTopicPartition). ``on_prepared`` is called for
        every transaction found in PrepareCommit/PrepareAbort, whose markers must be
        written again with the new epoch. Ids the partition held before (an older load)
        are replaced."""
        self._loading.discard(partition)
        self._drop_ids_of(partition)
        self._cache.update(loaded)
        self._owned[partition] = coordinator_epoch
        resumed = 0
        for transactional_id, md in loaded.items():
            if md.state.is_prepared:
                resumed += 1
                logger.info(
                    "loaded %r in %s: resuming its markers to %d partitions at coordinator "
                    "epoch %d", transactional_id, md.state.wire_name, len(md.partitions),
                    coordinator_epoch,
                )
                on_prepared(transactional_id)
        logger.info(
            "loaded %s-%d at coordinator epoch %d: %d transactional ids, %d to complete",
            TRANSACTION_STATE_TOPIC, partition, coordinator_epoch, len(loaded), resumed,
        )
        return len(loaded)

    def unload_partition(self, partition: int) -> list[str]:
        """Stop owning a partition (another broker leads it now): forget its ids (Kafka's
        removeTransactionsForTxnTopicPartition); returns them."""
        self._loading.discard(partition)
        epoch = self._owned.pop(partition, None)
        removed = self._drop_ids_of(partition)
        logger.info(
            "unloaded %s-%d (coordinator epoch %s): %d transactional ids dropped",
            TRANSACTION_STATE_TOPIC, partition, epoch, len(removed),
        )
        return removed

    def _drop_ids_of(self, partition: int) -> list[str]:
        gone = [tid for tid in self._cache if self.partition_for(tid) == partition]
        for transactional_id in gone:
            del self._cache[transactional_id]
        return gone

    def _check_partition(self, partition: int) -> None:
        if not 0 <= partition < self._store.num_partitions:
            raise ValueError(f"{TRANSACTION_STATE_TOPIC} has no partition {partition}")

    # -------------------------------------------------------------------- sweeps

    def timed_out_transactions(self, now: int) -> list[TransactionMetadata]:
        """Ongoing transactions older than their timeout, with no transition open.
        Two-phase-commit transactions never time out."""
        return [
            md
            for _, md in self.items()
            if not md.pending_transition
            and md.state is _S.ONGOING
            and not md.two_phase_commit
            and md.txn_start_timestamp + md.txn_timeout_ms < now
        ]

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
        self.expired += removed
        return removed

    async def run_sweeps(
        self, abort_timed_out: Callable[[], Awaitable[object]], sleep: Sleep
    ) -> None:
        """Run the two sweeps until cancelled, in one loop so they never overlap: the
        coordinator's ``abort_timed_out`` (it needs the marker channel) every
        ``transaction.abort.timed.out.transaction.cleanup.interval.ms``, and
        ``remove_expired_transactional_ids`` every
        ``transaction.remove.expired.transaction.cleanup.interval.ms``."""
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
                await sleep(wait_ms / 1000)
                continue
            if now >= next_abort:
                await abort_timed_out()
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
        """The cached transactions matching every filter (Kafka's listTransactionStates)."""
        if not self.loaded:
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
