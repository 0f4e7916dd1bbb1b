"""The leader's side of replication for this broker's partitions (Kafka's ReplicaManager and
Partition, leader half): replica tracking, the high watermark, acks=all and ISR changes.

Per partition this broker leads, a ``LeaderReplicas`` (``oncelog.cluster.isr``, the rules)
is fed the local log end after each append and every follower's fetch offset; when its
high watermark moves, the partition's engine follows (``maybe_increment_high_watermark``),
which wakes waiting fetches, and waiting ``acks=all`` produces are re-checked.

ISR changes: ``maybe_shrink`` runs every ``replica.lag.time.max.ms`` / 2 (``run()``, a task
of the broker's TaskGroup, as Kafka's isr-expiration task) and ``maybe_expand`` after each
follower fetch. A proposal is written with ``compare_and_set_partition`` on the version of
the partition state this broker last saw; when the store refuses it the tracker keeps the
committed ISR until the watched state arrives (``on_partition_state``). A leader that is no
longer leader stops (``stop_leading``) when the metadata says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from oncelog.broker.partition import Partition
from oncelog.clock import Clock
from oncelog.cluster.isr import NO_BROKER_EPOCH, LeaderReplicas, ReplicationLimits
from oncelog.cluster.metadata import BrokerRegistration, MetadataStore, VersionedPartitionState
from oncelog.errors import ErrorCode, KafkaError

__all__ = ["ReplicaManager", "ReplicationStats"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class ReplicationStats:
    """Counters for the metrics endpoint."""

    isr_shrinks: int = 0
    isr_expands: int = 0
    under_replicated: int = 0


@dataclass(slots=True)
class _Led:
    partition: Partition
    tracker: LeaderReplicas
    state: VersionedPartitionState  # the state (and store version) ISR writes build on
    acks: asyncio.Event


class ReplicaManager:
    """The partitions this broker leads, with their followers."""

    def __init__(
        self,
        *,
        local_id: int,
        clock: Clock,
        store: MetadataStore | None,
        replica_lag_time_max_ms: int,
    ) -> None:
        self.local_id = local_id
        self._clock = clock
        self._store = store
        self._lag_ms = replica_lag_time_max_ms
        self._led: dict[tuple[str, int], _Led] = {}
        self._brokers: dict[int, BrokerRegistration] | None = None
        self._writes: set[asyncio.Task[None]] = set()
        self.stats = ReplicationStats()

    # -- leadership ----------------------------------------------------------------------------
    def become_leader(
        self,
        partition: Partition,
        state: VersionedPartitionState,
        replicas: tuple[int, ...],
    ) -> None:
        """Lead ``partition`` at the state's leader epoch (the engine's ``become_leader``
        is the caller's, before this)."""
        key = (partition.topic, partition.index)
        previous = self._led.get(key)
        tracker = LeaderReplicas.become_leader(
            partition=partition.name,
            local_id=self.local_id,
            leader_epoch=state.state.leader_epoch,
            leader_end=partition.log_end_offset,
            replicas=replicas,
            isr=state.state.isr,
            high_watermark=partition.high_watermark,
            now_ms=self._clock.monotonic_ms(),
            limits=ReplicationLimits(self._lag_ms, partition.config.min_insync_replicas),
            brokers=self._brokers,
            previous=None if previous is None else previous.tracker,
        )
        self._led[key] = _Led(partition, tracker, state,
                              asyncio.Event() if previous is None else previous.acks)
        self._push_high_watermark(self._led[key])

    def stop_leading(self, topic: str, index: int) -> None:
        led = self._led.pop((topic, index), None)
        if led is not None:
            _wake(led)  # waiting produces re-check and find no leader

    def on_partition_state(self, topic: str, index: int, state: VersionedPartitionState) -> None:
        """The watched state of a partition this broker leads (an ISR write came back, or
        another writer's change at the same leader epoch)."""
        led = self._led.get((topic, index))
        if led is None or state.state.leader_epoch != led.tracker.leader_epoch:
            return
        led.state = state
        if led.tracker.on_isr_committed(state.state.isr, self._clock.monotonic_ms()):
            self._push_high_watermark(led)
        _wake(led)

    def on_brokers(self, brokers: Mapping[int, BrokerRegistration]) -> None:
        self._brokers = dict(brokers)
        for led in self._led.values():
            if led.tracker.on_brokers(brokers, self._clock.monotonic_ms()):
                self._push_high_watermark(led)

    def under_replicated(self) -> int:
        """Partitions this broker leads whose ISR is smaller than their replica set."""
        return sum(led.tracker.is_under_replicated() for led in self._led.values())

    def tracker(self, topic: str, index: int) -> LeaderReplicas | None:
        led = self._led.get((topic, index))
        return None if led is None else led.tracker

    # -- the data path -------------------------------------------------------------------------
    def on_follower_fetch(
        self, partition: Partition, replica_id: int, fetch_offset: int, log_start_offset: int
    ) -> None:
        """A follower's fetch at ``fetch_offset``: NOT_LEADER_OR_FOLLOWER unless this broker
        leads the partition and ``replica_id`` holds a replica of it."""
        led = self._led.get((partition.topic, partition.index))
        if led is None:
            raise KafkaError(ErrorCode.not_leader_or_follower,
                             f"{partition.name}: this broker does not lead it")
        now = self._clock.monotonic_ms()
        if led.tracker.on_follower_fetch(
            replica_id, fetch_offset, now, partition.log_end_offset,
            broker_epoch=self._broker_epoch(replica_id),
            log_start_offset=log_start_offset,
        ):
            self._push_high_watermark(led)
        if led.tracker.maybe_expand() is not None:
            self._propose_isr(led)

    def _broker_epoch(self, replica_id: int) -> int:
        """The broker epoch a follower's fetch is taken to carry: its registration's as this
        broker sees it now (Fetch up to v12 has no ReplicaState; KIP-903's check works the
        same on it). A follower not registered in this broker's image fetches with none
        and cannot join the ISR until its registration arrives; a registration with a
        newer epoch than its fetches carried marks it restarted (``LeaderReplicas``)."""
        registration = None if self._brokers is None else self._brokers.get(replica_id)
        return NO_BROKER_EPOCH if registration is None else registration.epoch

    def check_min_isr(self, partition: Partition, acks: int) -> None:
        """Before an append: NOT_ENOUGH_REPLICAS for acks=all below min.insync.replicas."""
        led = self._led.get((partition.topic, partition.index))
        if led is not None:
            led.tracker.check_min_isr(acks)

    def on_leader_append(self, partition: Partition) -> None:
        """The leader's log grew (a produce, a coordinator's write, a marker)."""
        led = self._led.get((partition.topic, partition.index))
        if led is not None and led.tracker.on_leader_append(
            partition.log_end_offset, self._clock.monotonic_ms()
        ):
            self._push_high_watermark(led)

    async def wait_for_acks(
        self, partition: Partition, required_offset: int, timeout_ms: int
    ) -> ErrorCode:
        """Wait until the high watermark reaches ``required_offset`` (acks=all): none,
        NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR fell below min.insync.replicas,
        REQUEST_TIMED_OUT after ``timeout_ms``, NOT_LEADER_OR_FOLLOWER when leadership
        moved meanwhile."""
        self.on_leader_append(partition)
        key = (partition.topic, partition.index)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(timeout_ms, 0) / 1000
        while True:
            led = self._led.get(key)
            if led is None or led.partition is not partition:
                return ErrorCode.not_leader_or_follower
            check = led.tracker.check_enough_replicas(required_offset)
            if check.satisfied:
                return check.error
            remaining = deadline - loop.time()
            if remaining <= 0:
                return ErrorCode.request_timed_out
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await led.acks.wait()

    async def wait_for_all_acks(
        self, appends: Sequence[tuple[Partition, int]], timeout_ms: int
    ) -> list[ErrorCode]:
        """``wait_for_acks`` for several (partition, required offset) at once (Kafka's
        DelayedProduce over the partitions of one request): one error code each, in order."""
        return list(await asyncio.gather(*(
            self.wait_for_acks(partition, end, timeout_ms) for partition, end in appends
        )))

    def _push_high_watermark(self, led: _Led) -> None:
        led.partition.maybe_increment_high_watermark(led.tracker.high_watermark())
        _wake(led)

    # -- ISR changes ---------------------------------------------------------------------------
    async def run(self) -> None:
        """The ISR expiration check, every replica.lag.time.max.ms / 2 (a TaskGroup task)."""
        interval = max(self._lag_ms / 2, 10) / 1000
        try:
            while True:
                await asyncio.sleep(interval)
                self.maybe_shrink_isr()
        finally:
            for task in list(self._writes):
                task.cancel()

    def maybe_shrink_isr(self) -> None:
        now = self._clock.monotonic_ms()
        under = 0
        for led in list(self._led.values()):
            if led.tracker.maybe_shrink(now):
                self._propose_isr(led)
            under += led.tracker.is_under_replicated()
        self.stats.under_replicated = under

    def _propose_isr(self, led: _Led) -> None:
        proposal = led.tracker.pending_isr
        if proposal is None or self._store is None:
            return
        task = asyncio.get_running_loop().create_task(self._write_isr(led, proposal))
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    async def _write_isr(self, led: _Led, isr: tuple[int, ...]) -> None:
        assert self._store is not None
        tracker = led.tracker
        shrink = len(isr) < len(tracker.isr)
        based_on = led.state
        state = based_on.state.with_isr(isr)
        topic, index = led.partition.topic, led.partition.index
        try:
            version = await self._store.compare_and_set_partition(
                topic, index, state, based_on.version
            )
        except Exception as exc:  # the store failed: the proposal is dropped, retried later
            log.warning("%s: writing ISR %s failed: %s", led.partition.name, list(isr), exc)
            tracker.on_isr_rejected()
            return
        if version is None:
            log.info("%s: ISR %s refused (version %d is stale); waiting for the watched state",
                     led.partition.name, list(isr), based_on.version)
            tracker.on_isr_rejected()
            return
        if shrink:
            self.stats.isr_shrinks += 1
        else:
            self.stats.isr_expands += 1
        led.state = VersionedPartitionState(state, version)
        if tracker.on_isr_committed(isr, self._clock.monotonic_ms()):
            self._push_high_watermark(led)
        _wake(led)


def _wake(led: _Led) -> None:
    """Wake every acks=all waiter of ``led`` to re-check; later waiters wait on a fresh
    event. The notifier swaps the event, never a waiter: when waiters replaced it
    themselves, a woken waiter could replace the event another had just started waiting
    on, which then slept until its timeout (a coordinator's transition held for the
    transaction timeout)."""
    event, led.acks = led.acks, asyncio.Event()
    event.set()
