"""The cluster's controller: one broker, elected through the metadata store, that writes
leadership and ISR changes for everyone.

Every broker runs a ``Controller``; it campaigns (``MetadataStore.campaign_controller``) and
only the winner acts. The role is held by the winner's lease: when the lease goes (the
broker stops, is paused past ``broker.session.timeout.ms``, or closes its store), the
``controller`` key disappears, every other broker sees that through its watch and campaigns
again. A controller that sees the key go, or another broker hold it, stops acting at once.

While controller, after every watched change (and once on winning, so a new controller
finishes what a previous one left), it decides from its image with
``oncelog.cluster.controller_decisions``: partitions whose leader or ISR members are gone
(``fence``), brokers that restarted between two reads (their broker epoch changed:
``restarted``), brokers asking for a controlled shutdown, the internal topics once enough
brokers are alive; and every ``leader.imbalance.check.interval.seconds`` the preferred-leader
rebalance (``auto.leader.rebalance.enable``). Decisions are written with
``compare_and_set_partition`` on the version they were decided from; a refused write means
the image was stale: the newer state arrives through the watch and is decided again.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

from oncelog.broker.metrics import ControllerStats
from oncelog.cluster import controller_decisions as decide
from oncelog.cluster.controller_decisions import ElectionType, PartitionChange, PartitionKey
from oncelog.cluster.metadata import (
    NO_LEADER,
    MetadataEvent,
    MetadataImage,
    MetadataStore,
    MetadataStoreError,
    SessionLost,
)
from oncelog.errors import ErrorCode, KafkaError
from oncelog.internal_topics import InternalTopicSpec, internal_topic_specs

log = logging.getLogger(__name__)


class _Config(Protocol):
    def __getitem__(self, name: str) -> Any: ...


@dataclass(frozen=True, slots=True)
class ControllerSettings:
    """The broker configs the controller acts on (Kafka's names and defaults)."""

    unclean_leader_election: bool = False
    auto_leader_rebalance: bool = True
    imbalance_check_interval_s: float = 300.0
    imbalance_percentage: int = 10
    internal_topics: Mapping[str, InternalTopicSpec] | None = None

    @classmethod
    def from_config(cls, config: _Config) -> ControllerSettings:
        return cls(
            unclean_leader_election=bool(config["unclean.leader.election.enable"]),
            auto_leader_rebalance=bool(config["auto.leader.rebalance.enable"]),
            imbalance_check_interval_s=float(config["leader.imbalance.check.interval.seconds"]),
            imbalance_percentage=int(config["leader.imbalance.per.broker.percentage"]),
            internal_topics=internal_topic_specs(config),
        )


class Controller:
    """Campaigns for the controller role and, while holding it, writes the decisions."""

    def __init__(
        self,
        store: MetadataStore,
        node_id: int,
        settings: ControllerSettings,
        *,
        stats: ControllerStats | None = None,
        rng: random.Random | None = None,
        retry_backoff_s: float = 1.0,
    ) -> None:
        self.store = store
        self.retry_backoff_s = retry_backoff_s
        self.node_id = node_id
        self.settings = settings
        self.stats = stats or ControllerStats()
        self.image = MetadataImage()
        self.epoch: int | None = None  # the controller epoch while this broker holds the role
        self._rng = rng or random.Random()
        self._lock = asyncio.Lock()
        self._changed = asyncio.Condition()
        # Versions this controller wrote that the image has not seen yet: no decision is
        # taken on those partitions until the watch brings the write back.
        self._written: dict[PartitionKey, int] = {}
        # The broker epoch of each registered broker as this controller last decided on it:
        # a different one is a broker that went and came back between two reads.
        self._broker_epochs: dict[int, int] = {}

    @property
    def is_active(self) -> bool:
        return self.epoch is not None

    async def run(self) -> None:
        """Load the metadata, campaign, and follow the watch until the store is closed or
        the task is cancelled. A failing store (etcd slow or out of reach: the load, the
        watch or a write) does not end it: it loads the image again after
        ``retry_backoff_s`` and decides from there (a write it did not make is still due)."""
        try:
            async with asyncio.TaskGroup() as tasks:
                watch = tasks.create_task(self._follow())
                if self.settings.auto_leader_rebalance:
                    rebalance = tasks.create_task(self._rebalance_loop())
                    watch.add_done_callback(lambda _: rebalance.cancel())
        finally:
            self._resign("stopped")

    async def wait_for(self, predicate: Any, timeout_s: float) -> None:
        """Wait until ``predicate(self)`` holds (checked after every watched change)."""
        async with asyncio.timeout(timeout_s):
            async with self._changed:
                await self._changed.wait_for(lambda: predicate(self))

    # -- the watch ----------------------------------------------------------------------------
    async def _follow(self) -> None:
        while True:
            try:
                await self._load_and_watch()
                return
            except MetadataStoreError as exc:
                log.warning("controller: node %d: the metadata store failed (%s); loading "
                            "again in %.1fs", self.node_id, exc, self.retry_backoff_s)
            await asyncio.sleep(self.retry_backoff_s)

    async def _load_and_watch(self) -> None:
        self.image = await self.store.load()
        self._forget_seen_writes()
        if self.epoch is not None and self.image.controller != (self.node_id, self.epoch):
            self._resign(f"the controller key is now {self.image.controller}")
        await self._maybe_campaign()
        if self.is_active:
            await self.decide()
        async for event in self.store.watch(self.image.revision):
            self.image.apply(event)
            self._forget_seen_writes()
            if event.kind == "controller":
                self._check_role(event)
            # After any event, not only a controller one: a campaign refused while this
            # broker's session was lost (SessionLost) is tried again while nobody holds the
            # role (``on_registered`` tries it at once once registered again).
            await self._maybe_campaign()
            if self.is_active:
                await self.decide()
            async with self._changed:
                self._changed.notify_all()

    def _check_role(self, event: MetadataEvent) -> None:
        if self.epoch is None:
            return
        if event.deleted or event.controller != (self.node_id, self.epoch):
            self._resign(f"the controller key is now {event.controller}")

    def on_session_lost(self) -> None:
        """This broker's session is lost: its controller key went (or goes) with the lease,
        so it stops acting at once (Kafka's controller resignation on session expiry)."""
        self._resign("the broker's session is lost")

    async def on_registered(self) -> None:
        """This broker registered again: campaign if nobody holds the role."""
        try:
            await self._maybe_campaign()
        except MetadataStoreError as exc:  # the watch loop decides again after its reload
            log.warning("controller: node %d: deciding after the campaign failed: %s",
                        self.node_id, exc)
        async with self._changed:
            self._changed.notify_all()

    async def _maybe_campaign(self) -> None:
        if self.is_active or self.image.controller is not None:
            return
        try:
            epoch = await self.store.campaign_controller(self.node_id)
        except SessionLost as exc:
            log.info("controller: node %d cannot campaign until it registers again: %s",
                     self.node_id, exc)
            return
        if epoch is None:
            log.info("controller: node %d lost the campaign", self.node_id)
            return
        self.epoch = epoch
        self.stats.active = True
        self._written.clear()
        self._broker_epochs.clear()
        log.info("controller: node %d is the controller at epoch %d", self.node_id, epoch)
        await self.decide()

    def _resign(self, why: str) -> None:
        if self.epoch is None:
            return
        log.info("controller: node %d gives up the role of epoch %d (%s)",
                 self.node_id, self.epoch, why)
        self.epoch = None
        self.stats.active = False

    def _forget_seen_writes(self) -> None:
        for key, version in list(self._written.items()):
            current = self.image.partitions.get(key)
            if current is None or current.version >= version:
                del self._written[key]

    # -- decisions ----------------------------------------------------------------------------
    async def decide(self) -> None:
        """Everything the image asks of the controller now (a no-op when not controller)."""
        async with self._lock:
            if self.epoch is None:
                return
            epoch = self.epoch
            await self._handle_restarts(epoch)
            changes = decide.fence(
                self.image, unclean_default=self.settings.unclean_leader_election,
                controller_epoch=epoch,
            )
            await self._write(changes, "broker change")
            for node_id, registration in sorted(self.image.brokers.items()):
                if registration.shutting_down:
                    await self._controlled_shutdown(node_id, epoch)
            await self._maybe_create_internal_topics(epoch)

    async def _handle_restarts(self, epoch: int) -> None:
        brokers = self.image.brokers
        again = {n for n, reg in brokers.items()
                 if self._broker_epochs.get(n, reg.epoch) != reg.epoch}
        stale = decide.restarted_leaders(self.image) - again
        if again or stale:
            log.info("controller: broker(s) %s registered with a new broker epoch (restarted): "
                     "out of the ISRs until caught up, leaderships moved", sorted(again | stale))
        changes = decide.restarted(self.image, stale, controller_epoch=epoch, leaders_only=True)
        changes.update(decide.restarted(self.image, again, controller_epoch=epoch))
        written = await self._write(changes, "broker restarted")
        if written != set(changes):
            return  # decided again from the next image
        self._broker_epochs = {n: reg.epoch for n, reg in brokers.items()}

    async def _controlled_shutdown(self, node_id: int, epoch: int) -> None:
        result = decide.controlled_shutdown(self.image, node_id, controller_epoch=epoch)
        if result.changes:
            self.stats.controlled_shutdowns += 1
            await self._write(result.changes, f"controlled shutdown of broker {node_id}")
        if result.still_led:
            log.info("controller: broker %d shutting down still leads %d partition(s) "
                     "(no live in-sync replica to move them to)",
                     node_id, len(result.still_led))

    async def _maybe_create_internal_topics(self, epoch: int) -> None:
        live = len(decide.usable_brokers(self.image))
        for name, spec in sorted((self.settings.internal_topics or {}).items()):
            if name in self.image.topics or live < spec.replication_factor:
                continue
            try:
                topic = decide.new_topic(
                    self.image, name, spec.partitions, spec.replication_factor,
                    controller_epoch=epoch, configs=spec.configs, rng=self._rng,
                )
            except KafkaError as exc:
                log.warning("controller: cannot create %s yet: %s", name, exc)
                continue
            created = await self.store.create_topic(topic.assignment, topic.states)
            log.info("controller: %s %s with %d partitions, replication factor %d",
                     "created" if created else "found", name, spec.partitions,
                     spec.replication_factor)

    async def rebalance(self) -> None:
        """The preferred-leader check once (Kafka's auto leader rebalance)."""
        async with self._lock:
            if self.epoch is None:
                return
            changes = decide.preferred_leader_rebalance(
                self.image, imbalance_percentage=self.settings.imbalance_percentage,
                controller_epoch=self.epoch,
            )
            await self._write(changes, "preferred leader rebalance")

    async def elect_leaders(
        self, election: ElectionType, partitions: Sequence[PartitionKey] | None,
        timeout_s: float,
    ) -> dict[PartitionKey, ErrorCode] | None:
        """ElectLeaders (KIP-460) decided over the controller's image and written with
        compare-and-swap as a controller write; each partition's error code (every partition
        of the image when ``partitions`` is None), or None when this broker is not the
        controller. A partition whose state changed under the decision is decided again
        once the watch brings the change (until ``timeout_s``: REQUEST_TIMED_OUT)."""
        errors: dict[PartitionKey, ErrorCode] = {}
        pending = list(self.image.partitions) if partitions is None else list(partitions)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while pending:
            async with self._lock:
                if self.epoch is None:
                    return None
                result = decide.elect_leaders(self.image, election, pending,
                                              controller_epoch=self.epoch)
                errors.update(result.errors)
                written = await self._write(result.changes, f"{election.name} election")
            conflicts = [k for k in result.changes if k not in written]
            pending = []
            if conflicts:
                seen = {k: result.changes[k].expected_version for k in conflicts}
                try:
                    await self.wait_for(partial(_moved_past, seen),
                                        max(0.0, deadline - loop.time()))
                    pending = conflicts
                except TimeoutError:
                    errors.update(dict.fromkeys(conflicts, ErrorCode.request_timed_out))
        return errors

    async def _rebalance_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.imbalance_check_interval_s)
            try:
                await self.rebalance()
            except MetadataStoreError as exc:
                log.warning("controller: preferred leader rebalance failed: %s", exc)

    async def _write(
        self, changes: Mapping[PartitionKey, PartitionChange], why: str,
    ) -> set[PartitionKey]:
        """Write ``changes`` (CAS, fenced as this controller); the keys written."""
        written: set[PartitionKey] = set()
        for (topic, partition), change in sorted(changes.items()):
            key = (topic, partition)
            if key in self._written or self.epoch is None:
                continue
            old = self.image.state(topic, partition)
            new = change.state
            version = await self.store.compare_and_set_partition(
                topic, partition, new, change.expected_version,
                as_controller=(self.node_id, self.epoch),
            )
            if version is None:
                self.stats.cas_conflicts += 1
                log.info("controller: %s-%d changed since version %d; deciding again when "
                         "the watch brings it", topic, partition, change.expected_version)
                continue
            self._written[key] = version
            written.add(key)
            if old is not None and new.leader != old.leader:
                self.stats.leader_elections += 1
                if new.leader != NO_LEADER and new.leader not in old.isr:
                    self.stats.unclean_leader_elections += 1
            log.info("controller: %s-%d leader %s→%s epoch %d isr %s (%s)", topic, partition,
                     None if old is None else old.leader, new.leader, new.leader_epoch,
                     list(new.isr), why)
        return written


def _moved_past(versions: Mapping[PartitionKey, int], controller: Controller) -> bool:
    """Whether the controller's image has seen a newer version of each partition (or the
    partition is gone)."""
    image = controller.image
    return all(image.partitions[k].version > v for k, v in versions.items()
               if k in image.partitions)
