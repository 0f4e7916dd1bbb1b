"""The fault injector of ``oncelog verify``: executes a schedule from ``faults.plan``
against a deployment from ``spawn.py`` and the runner's client workers
(deployment.FaultInjector).

Each planned fault starts at its time (late if healing the previous one took longer),
is held, then healed — and the injector waits until the deployment serves again (every
broker registered, every partition led) before the next one, so faults never pile up.
Every fault is recorded once, when it ends, with its target and what exactly was done, and
logged in one line. When ``stop`` is set the active fault is healed at once and
``Deployment.heal`` runs before ``run`` returns.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from oncelog.harness.fault_proxy import ApiKey, FaultRules
from oncelog.verify.deployment import Workers
from oncelog.verify.faults import PlannedFault, choose, cut_mode, partition_mode
from oncelog.verify.history import Fault, tp_key
from oncelog.verify.spawn import (
    ClusterDeployment,
    DeploymentError,
    ExternalDeployment,
    SingleDeployment,
)

logger = logging.getLogger(__name__)

Target = SingleDeployment | ClusterDeployment | ExternalDeployment
DROPPED_RESPONSES: dict[int, int] = {
    ApiKey.PRODUCE: 1, ApiKey.END_TXN: 1, ApiKey.ADD_PARTITIONS_TO_TXN: 1,
    ApiKey.TXN_OFFSET_COMMIT: 1,
}


@dataclass
class ActiveFault:
    fault: Fault
    heal: Callable[[], None]


class Nemesis:
    """A FaultInjector over ``schedule``; ``topics`` (leader kills) and
    ``transactional_ids`` (coordinator kills) are the run's; times are seconds since
    ``started_at`` on ``clock``."""

    def __init__(self, schedule: Sequence[PlannedFault], deployment: Target,
                 workers: Workers | None, *, started_at: float,
                 topics: Sequence[str] = (), transactional_ids: Sequence[str] = (),
                 clock: Callable[[], float] = time.time) -> None:
        self.schedule = list(schedule)
        self.deployment = deployment
        self.workers = workers
        self.started_at = started_at
        self.topics = list(topics)
        self.transactional_ids = list(transactional_ids)
        self.clock = clock

    def now(self) -> float:
        return self.clock() - self.started_at

    def run(self, stop: threading.Event, record: Callable[[Fault], None]) -> None:
        injected = False
        try:
            for planned in self.schedule:
                if stop.wait(max(0.0, planned.at_s - self.now())):
                    break
                active = self.start(planned)
                injected = True
                if planned.hold_s > 0:
                    stop.wait(max(0.0, planned.at_s + planned.hold_s - self.now()))
                self.end(active, record)
        finally:
            if injected:
                self.deployment.heal()

    # -- one fault -------------------------------------------------------------------------
    def start(self, planned: PlannedFault) -> ActiveFault:
        """Inject ``planned`` now; returns what ``end`` heals."""
        fault = Fault(kind=planned.kind, target="", start=round(self.now(), 3))
        heal = getattr(self, "_" + planned.kind.replace("-", "_"))(planned.pick, fault)
        logger.debug("verify fault %s started on %s: %s", fault.kind, fault.target, fault.detail)
        return ActiveFault(fault, heal)

    def end(self, active: ActiveFault, record: Callable[[Fault], None]) -> None:
        """Heal ``active``, wait until the deployment serves, record and log it."""
        fault = active.fault
        try:
            active.heal()
            fault.end = round(self.now(), 3)
        except DeploymentError as exc:
            fault.detail += f"; not serving after the heal: {exc}"
            raise
        finally:
            record(fault)
            logger.info("verify fault %s on %s from %.1fs to %ss: %s", fault.kind,
                        fault.target, fault.start, fault.end, fault.detail)

    def _instant(self) -> Callable[[], None]:
        def nothing() -> None:
            """An instantaneous fault: nothing to heal."""
        return nothing

    def _cluster(self, kind: str) -> ClusterDeployment:
        if not isinstance(self.deployment, ClusterDeployment):
            raise DeploymentError(f"{kind} needs a cluster deployment")
        return self.deployment

    def _broker_deployment(self, kind: str) -> SingleDeployment | ClusterDeployment:
        if isinstance(self.deployment, ExternalDeployment):
            raise DeploymentError(f"{kind} needs a deployment oncelog verify started")
        return self.deployment

    def _pick_broker(self, pick: int, kind: str) -> int:
        ids = self._broker_deployment(kind).broker_ids
        return ids[choose(pick, len(ids))]

    def _killed(self, node_id: int, fault: Fault) -> Callable[[], None]:
        deployment = self._broker_deployment(fault.kind)
        fault.target = f"broker-{node_id}"
        deployment.kill_broker(node_id)

        def restart() -> None:
            deployment.restart_broker(node_id)
            deployment.wait_serving()
        return restart

    # -- the kinds (faults.py) --------------------------------------------------------------
    def _kill(self, pick: int, fault: Fault) -> Callable[[], None]:
        fault.detail = "kill -9, restarted after the hold"
        return self._killed(self._pick_broker(pick, fault.kind), fault)

    def _pause(self, pick: int, fault: Fault) -> Callable[[], None]:
        deployment = self._broker_deployment(fault.kind)
        node_id = self._pick_broker(pick, fault.kind)
        fault.target, fault.detail = f"broker-{node_id}", "SIGSTOP, SIGCONT after the hold"
        deployment.pause_broker(node_id)

        def resume() -> None:
            deployment.resume_broker(node_id)
            deployment.wait_serving()
        return resume

    def _client_crash(self, pick: int, fault: Fault) -> Callable[[], None]:
        crashed = self.workers.crash_one(random.Random(pick)) if self.workers else None
        fault.target = crashed or "none"
        fault.detail = "kill -9 of a client worker" if crashed else "no worker was running"
        return self._instant()

    def _cut(self, pick: int, fault: Fault) -> Callable[[], None]:
        deployment = self._broker_deployment(fault.kind)
        node_id = self._pick_broker(pick, fault.kind)
        fault.target = f"broker-{node_id}"
        proxy = deployment.proxy_of(node_id)
        if proxy is None:  # a cluster in network namespaces: cut the clients off the broker
            cluster = self._cluster(fault.kind)
            assert cluster.network is not None
            network, host = cluster.network, cluster.host(node_id)
            network.cut(host, "client")
            fault.detail = f"clients cut from {host} by routes"

            def heal_route() -> None:
                network.heal(host, "client")
                deployment.wait_serving()
            return heal_route
        mode = cut_mode(pick)
        if mode == "drop-responses":
            rules = FaultRules(drop_next=DROPPED_RESPONSES)
            fault.detail = ("dropping the next Produce, AddPartitionsToTxn, EndTxn and "
                            "TxnOffsetCommit responses")
        elif mode == "cut-after-bytes":
            limit = 1000 + pick % 8000
            rules = FaultRules(cut_after_bytes=limit)
            fault.detail = f"every connection cut after {limit} bytes"
        else:
            rules = FaultRules(refuse=True)
            fault.detail = "new connections refused"
        proxy.set_rules(rules)
        cut = proxy.cut_all()
        fault.detail = f"{cut} connections cut, then {fault.detail}"

        def heal_proxy() -> None:
            proxy.set_rules(None)
            deployment.wait_serving()
        return heal_proxy

    def _leader_kill(self, pick: int, fault: Fault) -> Callable[[], None]:
        cluster = self._cluster(fault.kind)
        view = cluster.metadata()
        topics = [t for t in self.topics if t in view.topics] or sorted(
            t for t in view.topics if not t.startswith("__"))
        led = sorted((t, p, part.leader) for t in topics for p, part in view.topics[t].items()
                     if part.leader in view.brokers)
        if not led:
            raise DeploymentError(f"leader-kill: no led partition of {topics}")
        topic, partition, leader = led[choose(pick, len(led))]
        fault.detail = f"kill -9 of the leader of {tp_key(topic, partition)}"
        return self._killed(leader, fault)

    def _coordinator_kill(self, pick: int, fault: Fault) -> Callable[[], None]:
        cluster = self._cluster(fault.kind)
        if not self.transactional_ids:
            raise DeploymentError("coordinator-kill: the run has no transactional ids")
        txid = self.transactional_ids[choose(pick, len(self.transactional_ids))]
        fault.detail = f"kill -9 of the transaction coordinator of {txid}"
        return self._killed(cluster.coordinator(txid), fault)

    def _partition(self, pick: int, fault: Fault) -> Callable[[], None]:
        cluster = self._cluster(fault.kind)
        network = cluster.network
        if network is None:
            raise DeploymentError("partition needs the cluster in network namespaces")
        ids = cluster.broker_ids
        node_id = ids[choose(pick, len(ids))]
        if partition_mode(pick) == "isolate":
            network.isolate(cluster.host(node_id), keep=("client",))
            fault.target = f"broker-{node_id}"
            fault.detail = f"{cluster.host(node_id)} isolated from the brokers and etcd"
        else:
            others = [n for n in ids if n != node_id]
            peer = others[choose(pick, len(others), salt=1)]
            network.cut(cluster.host(node_id), cluster.host(peer))
            fault.target = f"broker-{node_id}+broker-{peer}"
            fault.detail = f"{cluster.host(node_id)} <-> {cluster.host(peer)} cut"

        def heal() -> None:
            network.heal_all()
            cluster.wait_serving()
        return heal
