"""The marker channel on its own: a state manager over an in-memory log, a recording writer
and a fake timer. Retries with backoff, the DONE/RETRY/STOP classification, a partition
refusing a marker for its epoch, COMPLETE_* logged only once every partition is marked,
and transactions completing independently of one another."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
from txn_support import A0, A1, B0, FakeTimer, RecordingMarkerWriter, settle

from oncelog.clock import FakeClock
from oncelog.config import BrokerConfig
from oncelog.coordinator.transaction.log_codec import decode_key, decode_value
from oncelog.coordinator.transaction.marker_channel import (
    MarkerOutcome,
    TransactionMarkerChannel,
    classify_marker_error,
)
from oncelog.coordinator.transaction.metadata import (
    TopicPartition,
    TransactionMetadata,
    TxnTransitMetadata,
)
from oncelog.coordinator.transaction.state import TransactionState
from oncelog.coordinator.transaction.state_manager import TransactionStateManager
from oncelog.coordinator.transaction.store import InMemoryTxnLogStore
from oncelog.errors import ErrorCode

E = ErrorCode
S = TransactionState
PID = 7


class Harness:
    def __init__(self, backoff_ms: int = 20, backoff_max_ms: int = 1000) -> None:
        self.clock = FakeClock()
        self.store = InMemoryTxnLogStore(4)
        self.state = TransactionStateManager(BrokerConfig({}), self.store, self.clock)
        self.state.load(lambda _: None)
        self.writer = RecordingMarkerWriter()
        self.timer = FakeTimer(self.clock)
        self.sleeps: list[float] = []
        self.channel = TransactionMarkerChannel(
            self.state, self.writer, self.clock, sleep=self.sleep, end_txn_wait_ms=20,
            backoff_ms=backoff_ms, backoff_max_ms=backoff_max_ms,
        )

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        await self.timer.sleep(seconds)

    def prepare(
        self, transactional_id: str, partitions: set[TopicPartition], commit: bool = True,
        producer_id: int = PID,
    ) -> TransactionMetadata:
        """A transaction whose PREPARE_* is logged, as after EndTxn or a restart."""
        md = TransactionMetadata.from_transit(transactional_id, TxnTransitMetadata(
            state=S.PREPARE_COMMIT if commit else S.PREPARE_ABORT, producer_id=producer_id,
            producer_epoch=3, txn_timeout_ms=60_000, partitions=frozenset(partitions),
            txn_start_timestamp=0, txn_last_update_timestamp=0,
        ))
        self.state.put(md)
        return md

    def logged(self, transactional_id: str) -> list[S | None]:
        partition = self.state.partition_for(transactional_id)
        out: list[S | None] = []
        for key, value in self.store.partitions[partition]:
            if decode_key(key) == transactional_id:
                t = decode_value(value)
                out.append(None if t is None else t.state)
        return out

    def run(self, body: Callable[[], Awaitable[None]]) -> None:
        async def main() -> None:
            async with asyncio.TaskGroup() as tasks:
                self.channel.attach(tasks)
                try:
                    await asyncio.wait_for(body(), timeout=5)
                finally:
                    self.channel.detach()

        asyncio.run(main())


@pytest.mark.parametrize("code", [
    E.none, E.unknown_topic_or_partition, E.unsupported_for_message_format,
    E.unsupported_version,
])
def test_done_codes(code: ErrorCode) -> None:
    assert classify_marker_error(code) is MarkerOutcome.DONE


def test_a_fenced_coordinator_is_the_only_stop() -> None:
    assert classify_marker_error(E.transaction_coordinator_fenced) is MarkerOutcome.STOP


@pytest.mark.parametrize("code", [
    E.invalid_producer_epoch, E.producer_fenced, E.not_leader_or_follower,
    E.kafka_storage_error, E.request_timed_out, E.unknown_server_error,
    E.coordinator_load_in_progress,
])
def test_everything_else_is_retried(code: ErrorCode) -> None:
    assert classify_marker_error(code) is MarkerOutcome.RETRY


def test_retries_back_off_exponentially_up_to_the_cap() -> None:
    h = Harness(backoff_ms=20, backoff_max_ms=50)
    md = h.prepare("t", {A0})
    h.writer.plan[A0] = [E.not_leader_or_follower] * 4

    async def body() -> None:
        h.channel.start("t")
        await h.timer.advance(1000)

    h.run(body)
    assert h.sleeps == [0.02, 0.04, 0.05, 0.05]
    assert len(h.writer.calls) == 5
    assert h.channel.retries == 4
    assert md.state is S.COMPLETE_COMMIT
    assert h.logged("t") == [S.COMPLETE_COMMIT]


def test_complete_is_logged_only_when_every_partition_is_marked() -> None:
    h = Harness()
    md = h.prepare("t", {A0, A1, B0}, commit=False)
    h.writer.plan[A1] = [E.request_timed_out]

    async def body() -> None:
        h.channel.start("t")
        await settle()
        # A0 and B0 are marked; A1 is not: nothing is logged, the rest stays to do.
        assert md.state is S.PREPARE_ABORT
        assert md.partitions == {A1}
        assert h.logged("t") == []
        assert h.channel.in_flight == 1
        await h.timer.advance(20)

    h.run(body)
    assert [c.partitions for c in h.writer.calls] == [(A0, A1, B0), (A1,)]
    assert all(not c.commit for c in h.writer.calls)
    assert h.logged("t") == [S.COMPLETE_ABORT]
    assert h.channel.in_flight == 0


def test_a_partition_refusing_its_epoch_is_retried_never_counted() -> None:
    """Issue 9: INVALID_PRODUCER_EPOCH / PRODUCER_FENCED from a partition that still holds
    the producer's open transaction means that partition has no marker: it is retried."""
    h = Harness()
    md = h.prepare("t", {A0, A1})
    h.writer.plan[A0] = [E.invalid_producer_epoch, E.producer_fenced]

    async def body() -> None:
        h.channel.start("t")
        await settle()
        assert md.partitions == {A0}
        await h.timer.advance(20)
        assert md.partitions == {A0}
        assert h.logged("t") == []
        await h.timer.advance(40)

    h.run(body)
    assert [c.partitions for c in h.writer.calls] == [(A0, A1), (A0,), (A0,)]
    assert (A0, True, PID, 3) in h.writer.written
    assert h.logged("t") == [S.COMPLETE_COMMIT]


def test_a_fenced_coordinator_stops_without_completing() -> None:
    h = Harness()
    md = h.prepare("t", {A0, A1})
    h.writer.plan[A0] = [E.transaction_coordinator_fenced]

    async def body() -> None:
        h.channel.start("t")
        await h.timer.advance(1000)

    h.run(body)
    assert len(h.writer.calls) == 1
    assert md.state is S.PREPARE_COMMIT
    assert h.logged("t") == []
    assert h.channel.in_flight == 0


def test_a_writer_exception_is_retried() -> None:
    h = Harness()
    md = h.prepare("t", {A0})
    h.writer.raise_times = 1

    async def body() -> None:
        h.channel.start("t")
        await settle()
        assert md.state is S.PREPARE_COMMIT
        await h.timer.advance(20)

    h.run(body)
    assert len(h.writer.calls) == 2
    assert h.logged("t") == [S.COMPLETE_COMMIT]


def test_concurrent_transactions_complete_independently() -> None:
    h = Harness()
    slow = h.prepare("slow", {A0}, producer_id=1)
    fast = h.prepare("fast", {B0}, producer_id=2, commit=False)
    h.writer.plan[A0] = [E.not_leader_or_follower] * 3

    async def body() -> None:
        h.channel.start("slow")
        h.channel.start("fast")
        h.channel.start("slow")  # a no-op while its completion runs
        await settle()
        assert fast.state is S.COMPLETE_ABORT
        assert slow.state is S.PREPARE_COMMIT
        assert h.channel.in_flight == 1
        await h.timer.advance(20 + 40 + 80)
        await h.channel.wait_all()

    h.run(body)
    assert slow.state is S.COMPLETE_COMMIT
    assert [c.producer_id for c in h.writer.calls].count(1) == 4
    assert [c.producer_id for c in h.writer.calls].count(2) == 1
    assert h.logged("fast") == [S.COMPLETE_ABORT]
    assert h.logged("slow") == [S.COMPLETE_COMMIT]


def test_a_failed_complete_append_is_retried() -> None:
    h = Harness()
    md = h.prepare("t", {A0})
    h.store.fail_next = [E.not_leader_or_follower]

    async def body() -> None:
        h.channel.start("t")
        await settle()
        assert md.state is S.PREPARE_COMMIT and not md.pending_transition
        await h.timer.advance(20)

    h.run(body)
    assert h.logged("t") == [S.COMPLETE_COMMIT]


def test_completions_started_before_attach_wait_for_it() -> None:
    h = Harness()
    md = h.prepare("t", {A0})
    h.channel.start("t")  # e.g. from load(), before run()
    assert h.writer.calls == []

    async def body() -> None:
        await settle()

    h.run(body)
    assert md.state is S.COMPLETE_COMMIT
