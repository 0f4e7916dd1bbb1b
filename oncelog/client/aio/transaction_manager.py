"""The producer's transaction manager: every transaction call of the producer API.

The transactional half of the Java client's TransactionManager (the idempotent half, producer
id, epoch, sequences and error state, is ``oncelog.client.aio.idempotence``). It drives the
state machine of ``oncelog.client.txn_state`` and keeps the transaction's bookkeeping:
partitions join with AddPartitionsToTxn before their first batch is sent (the sender holds
them back meanwhile), offsets join with AddOffsetsToTxn and TxnOffsetCommit, EndTxn commits or
aborts; an abort after an unresolved sequence bumps the epoch. KIP-939:
``init_transactions(keep_prepared_txn)`` sends InitProducerId v6 (Enable2Pc,
KeepPreparedTxn); ``prepare_transaction`` flushes and returns the (producer id, epoch) that
``complete_transaction`` compares against. The requests and the classification of their
errors are in ``oncelog.client.txn_requests``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

from oncelog.client.accumulator import RecordAccumulator
from oncelog.client.aio.client import COORDINATOR_GROUP, COORDINATOR_TRANSACTION, KafkaClient
from oncelog.client.aio.idempotence import IdempotenceManager, unexpected
from oncelog.client.config import ClientConfig
from oncelog.client.errors import (
    AbortableError,
    FatalError,
    IllegalStateError,
    InvalidTxnStateError,
    KafkaClientError,
    KafkaTimeoutError,
    RetriableError,
    TransactionAbortableError,
    UnsupportedVersionError,
)
from oncelog.client.txn_requests import (
    COORDINATOR_MOVED,
    add_partitions_request,
    check_add_partitions,
    check_error_code,
    txn_error,
    txn_offset_commit_error,
    txn_offset_commit_request,
)
from oncelog.client.txn_state import TxnEvent, TxnState
from oncelog.client.types import (
    ConsumerGroupMetadata,
    OffsetAndMetadata,
    PreparedTxnState,
    TopicPartition,
)
from oncelog.client.wire import request
from oncelog.errors import ErrorCode
from oncelog.protocol import versions as api

logger = logging.getLogger(__name__)

__all__ = ["TransactionManager"]


class TransactionManager(IdempotenceManager):
    def __init__(
        self,
        config: ClientConfig,
        client: KafkaClient,
        accumulator: RecordAccumulator,
        *,
        transactional_id: str | None,
        idempotent: bool,
        two_phase_commit: bool,
    ) -> None:
        super().__init__(
            config, client, accumulator, transactional_id=transactional_id, idempotent=idempotent
        )
        self.two_phase_commit = two_phase_commit
        self._txn_partitions: set[TopicPartition] = set()
        self.pending_partitions: set[TopicPartition] = set()
        self._txn_offsets_added = False
        self._txn_failure: KafkaClientError | None = None
        self._prepared: PreparedTxnState | None = None
        # A transaction kept open across a restart (KIP-939 keep_prepared_txn): the broker
        # has it ongoing even though this instance added no partitions to it.
        self._kept_prepared = False
        self._noop_complete = False
        self._add_partitions_task: asyncio.Task[None] | None = None

    def on_append(self, tp: TopicPartition) -> None:
        """A record for ``tp`` is being queued: in a transaction, ``tp`` must join it first."""
        if self.transactional_id is not None and tp not in self._txn_partitions:
            self.pending_partitions.add(tp)

    def on_failure(self, exc: KafkaClientError) -> None:
        """A record failed: the transaction (if any) cannot commit; the first cause is kept."""
        if self.transactional_id is not None and self._txn_failure is None:
            self._txn_failure = exc

    # ------------------------------------------------------------------ transactions

    def _require_transactional(self, call: str) -> None:
        self.check_usable()
        if self.transactional_id is None:
            raise IllegalStateError(f"{call} needs transactional.id")
        self.txn.check_call(call)

    async def _txn_coordinator_call(
        self, api_key: int, build: Callable[[int], Any], what: str, check: Callable[[Any], None]
    ) -> Any:
        """Send a request to the transaction coordinator, retrying retriable errors and
        rediscovering the coordinator when it moved. ``check`` raises on error codes."""
        assert self.transactional_id is not None
        txn_id = self.transactional_id

        async def attempt() -> Any:
            node = await self.client.find_coordinator(COORDINATOR_TRANSACTION, txn_id)
            try:
                response = await self.client.call(node, api_key, build)
                check(response)
            except RetriableError as exc:
                if (
                    exc.code in COORDINATOR_MOVED
                    or exc.code == ErrorCode.network_exception
                    or exc.code == ErrorCode.request_timed_out
                ):
                    self.client.invalidate_coordinator(COORDINATOR_TRANSACTION, txn_id)
                raise
            return response

        try:
            return await self.client.retrying(
                attempt, timeout_ms=self.config["max.block.ms"], what=what
            )
        except FatalError as exc:
            self.enter_fatal(exc)
            raise

    async def init_transactions(
        self, keep_prepared_txn: bool = False, timeout: float | None = None
    ) -> None:
        self._require_transactional("init_transactions")
        await self.queue.start()
        assert self.transactional_id is not None
        two_pc = self.two_phase_commit
        self.txn.fire(TxnEvent.INIT)
        needs_v6 = two_pc or keep_prepared_txn

        def build(version: int) -> Any:
            if needs_v6 and version < 6:
                raise UnsupportedVersionError(
                    f"two-phase commit needs InitProducerId v6; the broker offers up to v{version}"
                )
            return self._init_producer_id_request(version, two_pc, keep_prepared_txn)

        def check(response: Any) -> None:
            check_error_code(response, "InitProducerId")

        try:
            response = await self._txn_coordinator_call(
                api.INIT_PRODUCER_ID, build, "InitProducerId", check
            )
        except FatalError:
            raise
        except KafkaClientError:
            self.txn.fire(TxnEvent.INIT_FAILED)
            raise
        self._set_producer_id(int(response.producer_id), int(response.producer_epoch))
        ongoing_pid = int(getattr(response, "ongoing_txn_producer_id", -1))
        ongoing_epoch = int(getattr(response, "ongoing_txn_producer_epoch", -1))
        self._noop_complete = False
        if keep_prepared_txn and ongoing_pid >= 0:
            self._prepared = PreparedTxnState(producer_id=ongoing_pid, epoch=ongoing_epoch)
            self._kept_prepared = True
            self.txn.fire(TxnEvent.INIT_DONE_PREPARED)
            logger.info(
                "producer %r: kept prepared transaction %s", self.transactional_id, self._prepared
            )
        else:
            self._prepared = None
            self._noop_complete = keep_prepared_txn
            self.txn.fire(TxnEvent.INIT_DONE)
        self._reset_txn()

    def _reset_txn(self) -> None:
        self._txn_partitions.clear()
        self.pending_partitions.clear()
        self._txn_offsets_added = False
        self._txn_failure = None

    async def begin_transaction(self) -> None:
        self._require_transactional("begin_transaction")
        self.txn.fire(TxnEvent.BEGIN)
        self._reset_txn()
        self._prepared = None
        self._kept_prepared = False
        self._noop_complete = False

    def maybe_add_partitions(self) -> None:
        if self._add_partitions_task is not None and not self._add_partitions_task.done():
            return
        if (
            self.txn.state is not TxnState.IN_TRANSACTION
            and self.txn.state is not TxnState.COMMITTING_TRANSACTION
        ):
            return
        self._add_partitions_task = asyncio.get_running_loop().create_task(self._add_partitions())

    async def _transactions_v2(self) -> bool:
        """Does the transaction coordinator speak transactions v2 (KIP-890 part 2)? Then
        Produce v12 adds partitions to the transaction and no AddPartitionsToTxn is sent."""
        assert self.transactional_id is not None
        node = await self.client.find_coordinator(COORDINATOR_TRANSACTION, self.transactional_id)
        return (await self.client.connection(node)).transactions_v2

    async def _add_partitions(self) -> None:
        tps = sorted(self.pending_partitions)
        if not tps:
            return
        try:
            implicit = await self._transactions_v2()
        except Exception:
            implicit = False  # the AddPartitionsToTxn path below reports the failure
        if implicit:
            self.pending_partitions.difference_update(tps)
            self._txn_partitions.update(tps)
            self.queue.wakeup()
            logger.debug("producer %r: %s join the transaction with Produce v12",
                         self.transactional_id, tps)
            return

        def build(version: int) -> Any:
            return add_partitions_request(
                version, self.transactional_id, self.producer_id, self.producer_epoch, tps
            )

        try:
            await self._txn_coordinator_call(
                api.ADD_PARTITIONS_TO_TXN, build, "AddPartitionsToTxn", check_add_partitions
            )
        except FatalError:
            return
        except Exception as exc:
            # An error code, or a bug / unexpected response (unknown whether the partitions
            # joined): as Java's AddPartitionsToTxnHandler, the transaction becomes abortable.
            error = (
                exc if isinstance(exc, KafkaClientError) else unexpected("AddPartitionsToTxn", exc)
            )
            self.enter_abortable(error)
            for tp in tps:
                self.pending_partitions.discard(tp)
            self.queue.fail_queued(self.txn.error or error)
            return
        finally:
            self.queue.wakeup()
        for tp in tps:
            self.pending_partitions.discard(tp)
            self._txn_partitions.add(tp)
        logger.debug("producer %r: added %s to the transaction", self.transactional_id, tps)

    async def send_offsets_to_transaction(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
        group_metadata: ConsumerGroupMetadata | str,
    ) -> None:
        self._require_transactional("send_offsets_to_transaction")
        group = (
            group_metadata
            if isinstance(group_metadata, ConsumerGroupMetadata)
            else ConsumerGroupMetadata(group_metadata)
        )

        try:
            if not self._txn_offsets_added:
                await self._txn_coordinator_call(
                    api.ADD_OFFSETS_TO_TXN,
                    lambda v: request(
                        api.ADD_OFFSETS_TO_TXN,
                        v,
                        transactional_id=self.transactional_id,
                        producer_id=self.producer_id,
                        producer_epoch=self.producer_epoch,
                        group_id=group.group_id,
                    ),
                    "AddOffsetsToTxn",
                    lambda response: check_error_code(
                        response, f"AddOffsetsToTxn {group.group_id}"
                    ),
                )
                self._txn_offsets_added = True
            await self._txn_offset_commit(offsets, group)
        except FatalError:
            raise
        except KafkaClientError as exc:
            self.enter_abortable(exc)
            raise self.txn.error or exc from None

    async def _txn_offset_commit(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
        group: ConsumerGroupMetadata,
    ) -> None:
        offsets = dict(offsets)

        def build(version: int) -> Any:
            return txn_offset_commit_request(
                version,
                self.transactional_id,
                self.producer_id,
                self.producer_epoch,
                group,
                offsets,
            )

        async def attempt() -> None:
            node = await self.client.find_coordinator(COORDINATOR_GROUP, group.group_id)
            try:
                response = await self.client.call(node, api.TXN_OFFSET_COMMIT, build)
            except RetriableError:
                self.client.invalidate_coordinator(COORDINATOR_GROUP, group.group_id)
                raise
            error = txn_offset_commit_error(response, group.group_id)
            if error is not None:
                if error.code in COORDINATOR_MOVED:
                    self.client.invalidate_coordinator(COORDINATOR_GROUP, group.group_id)
                raise error

        try:
            await self.client.retrying(
                attempt, timeout_ms=self.config["max.block.ms"], what="TxnOffsetCommit"
            )
        except FatalError as exc:
            self.enter_fatal(exc)
            raise

    async def _flush_transaction(self) -> None:
        """Wait until every record of the transaction is acknowledged; raise the first failure."""
        while self.queue.has_pending() or self.pending_partitions:
            remaining = await self.queue.flush(self.config["max.block.ms"] / 1000)
            if remaining:
                raise KafkaTimeoutError(f"{remaining} records not acknowledged within max.block.ms")
            if self.fatal is not None:
                raise self.fatal
        if self.fatal is not None:
            raise self.fatal
        if self._txn_failure is not None or self.txn.state is TxnState.ABORTABLE_ERROR:
            exc = self.txn.error or self._txn_failure
            assert exc is not None
            self.enter_abortable(exc)
            raise self.txn.error or exc

    async def prepare_transaction(self) -> PreparedTxnState:
        """KIP-939 prepare: flush, then hold the transaction open for an external decision."""
        self._require_transactional("prepare_transaction")
        if not self.two_phase_commit:
            raise InvalidTxnStateError(
                "prepare_transaction needs transaction.two.phase.commit.enable=true"
            )
        await self._flush_transaction()
        self.txn.fire(TxnEvent.PREPARE)
        self._prepared = PreparedTxnState(producer_id=self.producer_id, epoch=self.producer_epoch)
        logger.info("producer %r: prepared transaction %s", self.transactional_id, self._prepared)
        return self._prepared

    async def commit_transaction(self) -> None:
        self._require_transactional("commit_transaction")
        if self.txn.state is TxnState.IN_TRANSACTION:
            await self._flush_transaction()
        self.txn.fire(TxnEvent.COMMIT)
        await self._end_transaction(commit=True)

    async def abort_transaction(self) -> None:
        self._require_transactional("abort_transaction")
        self.txn.fire(TxnEvent.ABORT)
        # Unsent records of an aborted transaction are dropped; sent ones are awaited.
        aborted = TransactionAbortableError("transaction aborted before the record was sent")
        self.queue.fail_queued(aborted)
        self.pending_partitions.clear()
        if self.queue.has_pending():
            await self.queue.flush(self.config["request.timeout.ms"] / 1000)
        await self._end_transaction(commit=False)
        if self.need_epoch_bump:
            await self._bump_transactional_epoch()

    async def complete_transaction(self, state: PreparedTxnState | str) -> None:
        """Commit if ``state`` is the prepared transaction, abort otherwise (KIP-939)."""
        self.check_usable()
        if self.transactional_id is None:
            raise IllegalStateError("complete_transaction needs transactional.id")
        given = state if isinstance(state, PreparedTxnState) else PreparedTxnState(state)
        if self.txn.state is TxnState.READY and self._noop_complete:
            logger.info(
                "producer %r: no ongoing transaction, complete(%s) is a no-op",
                self.transactional_id,
                given,
            )
            return
        self.txn.check_call("complete_transaction")
        if self.txn.state is TxnState.COMMITTING_TRANSACTION:
            await self.commit_transaction()
        elif self.txn.state is TxnState.ABORTING_TRANSACTION:
            await self.abort_transaction()
        elif self._prepared is not None and given == self._prepared:
            logger.info("producer %r: completing %s by commit", self.transactional_id, given)
            await self.commit_transaction()
        else:
            logger.info(
                "producer %r: state %s does not match prepared %s; aborting",
                self.transactional_id,
                given,
                self._prepared,
            )
            await self.abort_transaction()

    @property
    def prepared_state(self) -> PreparedTxnState | None:
        return self._prepared

    async def _end_transaction(self, *, commit: bool) -> None:
        needs_end = bool(self._txn_partitions or self._txn_offsets_added or self._kept_prepared)
        what = "EndTxn(commit)" if commit else "EndTxn(abort)"
        if needs_end:

            def check(response: Any) -> None:
                code = ErrorCode(response.error_code)
                if code == ErrorCode.none:
                    if getattr(response, "producer_epoch", -1) >= 0:
                        # EndTxn v5 (transactions v2): the epoch is bumped for every
                        # transaction, or a new producer id given when it is exhausted.
                        self._set_producer_id(
                            int(response.producer_id), int(response.producer_epoch)
                        )
                    return
                exc = txn_error(code, what)
                if not commit and isinstance(exc, AbortableError):
                    raise FatalError(f"{what}: {exc}", code)
                raise exc

            try:
                await self._txn_coordinator_call(
                    api.END_TXN,
                    lambda v: request(
                        api.END_TXN,
                        v,
                        transactional_id=self.transactional_id,
                        producer_id=self.producer_id,
                        producer_epoch=self.producer_epoch,
                        committed=commit,
                    ),
                    what,
                    check,
                )
            except AbortableError as exc:
                self.enter_abortable(exc)
                raise
        self.txn.fire(TxnEvent.END_DONE)
        logger.info(
            "producer %r: transaction %s",
            self.transactional_id,
            "committed" if commit else "aborted",
        )
        self._reset_txn()
        self._prepared = None
        self._kept_prepared = False

    def _init_producer_id_request(self, version: int, two_pc: bool, keep_prepared: bool) -> Any:
        """InitProducerId for this transactional.id; from v3 on it names the current producer
        id and epoch, so that the coordinator bumps the epoch (KIP-360)."""
        return request(
            api.INIT_PRODUCER_ID,
            version,
            transactional_id=self.transactional_id,
            transaction_timeout=self.config["transaction.timeout.ms"],
            producer_id=self.producer_id if version >= 3 else -1,
            producer_epoch=self.producer_epoch if version >= 3 else -1,
            enable2_pc=two_pc,
            keep_prepared_txn=keep_prepared,
        )

    async def _bump_transactional_epoch(self) -> None:
        response = await self._txn_coordinator_call(
            api.INIT_PRODUCER_ID,
            lambda v: self._init_producer_id_request(v, self.two_phase_commit, False),
            "InitProducerId",
            lambda response: check_error_code(response, "InitProducerId (epoch bump)"),
        )
        self._set_producer_id(int(response.producer_id), int(response.producer_epoch))
        self.need_epoch_bump = False
