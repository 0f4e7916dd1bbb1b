"""The deployments ``oncelog verify`` runs against (deployment.Deployment), and what the
fault injector (nemesis.py) may do to them.

- ``SingleDeployment(directory)``: one ``oncelog serve`` (data in ``directory/data``, log in
  ``directory/logs``) behind a ``FaultProxy``; the broker advertises the proxy, so every
  client connection passes through it.
- ``ClusterDeployment(directory)``: etcd and three brokers (replication factor 3,
  ``min.insync.replicas=2``) — in network namespaces when this process can build them
  (root and ``ip``; the clients then run in host ``client`` through ``client_prefix``),
  else on loopback, each broker behind its own fault proxy.
- ``ExternalDeployment(bootstrap)``: somebody else's brokers; no faults but client crashes.

Brokers are numbered by node id (the single broker is 1). Nothing here prints on stdout:
processes log to files, this module to ``logging``.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from kio.schema.find_coordinator.v4 import request as fc
from kio.static.primitive import i8

from oncelog.harness.broker import BrokerProcess, ConfigValue
from oncelog.harness.cluster import ClusterProcess, MetadataView, raw_metadata
from oncelog.harness.fault_proxy import FaultProxy
from oncelog.harness.net import LOOPBACK, free_port
from oncelog.harness.netns import NetnsUnavailable, Network, require_netns
from oncelog.harness.rawkafka import request_once

logger = logging.getLogger(__name__)

CLUSTER_CONFIGS: dict[str, ConfigValue] = {
    "default.replication.factor": 3,
    "min.insync.replicas": 2,
    "transaction.state.log.replication.factor": 3,
    "transaction.state.log.min.isr": 2,
    "offsets.topic.replication.factor": 3,
}
TRANSACTION_KEY_TYPE = 1  # FindCoordinator key_type: 0 group, 1 transaction


class DeploymentError(RuntimeError):
    """A deployment could not start, or does not serve again after a fault."""


def _wait(predicate: Callable[[], bool], what: str, timeout: float) -> None:
    """Poll ``predicate()`` until true; DeploymentError after ``timeout`` (last error in it)."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except Exception as exc:  # a broker still starting
            last = exc
        time.sleep(0.2)  # polling interval, not synchronisation
    raise DeploymentError(f"no {what} within {timeout:.0f}s (last: {last!r})")


def serving(view: MetadataView, brokers: int) -> bool:
    """Every broker registered and every partition of every topic has a live leader."""
    return len(view.brokers) == brokers and all(
        p.leader in view.brokers for parts in view.topics.values() for p in parts.values())


class SingleDeployment:
    """One ``oncelog serve`` behind a fault proxy; see the module docstring."""

    kind = "single"
    broker = "oncelog"

    def __init__(self, directory: Path, configs: Mapping[str, ConfigValue] | None = None,
                 *, start_timeout: float = 30.0) -> None:
        self.directory = Path(directory)
        port = free_port(LOOPBACK)
        self.proxy = FaultProxy(LOOPBACK, port).start()
        self.process = BrokerProcess(
            self.directory / "data", port=port, advertised=self.proxy.bootstrap,
            configs=configs, node_id=1, log_path=self.directory / "logs" / "broker.log",
            start_timeout=start_timeout)
        self._paused: set[int] = set()
        try:
            self.process.start()
        except BaseException:
            self.proxy.stop()
            raise
        logger.info("verify single deployment: broker %s behind proxy %s",
                    self.process.bootstrap, self.proxy.bootstrap)

    @property
    def bootstrap(self) -> str:
        return self.proxy.bootstrap

    @property
    def client_prefix(self) -> list[str]:
        return []

    @property
    def broker_ids(self) -> list[int]:
        return [1]

    def _broker(self, node_id: int) -> BrokerProcess:
        if node_id != 1:
            raise KeyError(f"no broker {node_id} in a single deployment")
        return self.process

    def kill_broker(self, node_id: int) -> None:
        self._broker(node_id).kill()
        self._paused.discard(node_id)

    def restart_broker(self, node_id: int) -> None:
        broker = self._broker(node_id)
        if broker.is_running:
            broker.kill()
        self._paused.discard(node_id)
        broker.start()

    def pause_broker(self, node_id: int) -> None:
        self._broker(node_id)._signal(signal.SIGSTOP)
        self._paused.add(node_id)

    def resume_broker(self, node_id: int) -> None:
        self._broker(node_id)._signal(signal.SIGCONT)
        self._paused.discard(node_id)

    def proxy_of(self, node_id: int) -> FaultProxy | None:
        self._broker(node_id)
        return self.proxy

    def metadata(self) -> MetadataView:
        return raw_metadata(self.process.bootstrap)

    def wait_serving(self, timeout: float = 60.0) -> None:
        _wait(lambda: serving(self.metadata(), 1), "broker serving", timeout)

    def heal(self) -> None:
        self.proxy.set_rules(None)
        for node_id in list(self._paused):
            self.resume_broker(node_id)
        if not self.process.is_running:
            self.process.start()
        self.wait_serving()

    def close(self) -> None:
        self.process.kill()
        self.proxy.stop()


class ClusterDeployment:
    """etcd and N brokers; see the module docstring. ``netns``: True (fail without),
    False (loopback and proxies) or "auto" (namespaces when this process can build them)."""

    kind = "cluster"
    broker = "oncelog"

    def __init__(self, directory: Path, brokers: int = 3, *, netns: bool | str = "auto",
                 configs: Mapping[str, ConfigValue] | None = None,
                 start_timeout: float = 60.0) -> None:
        self.directory = Path(directory)
        self.network: Network | None = None
        if netns is True or (netns == "auto" and _netns_available()):
            self.network = Network()
        try:
            self.cluster = ClusterProcess(
                self.directory, brokers=brokers, configs={**CLUSTER_CONFIGS, **(configs or {})},
                network=self.network, proxied=self.network is None)
            self.cluster.start(timeout=start_timeout)
        except BaseException:
            self.close()
            raise
        self._paused: set[int] = set()
        logger.info("verify cluster deployment: %d brokers %s, bootstrap %s", brokers,
                    "in network namespaces" if self.network else "behind fault proxies",
                    self.bootstrap)

    @property
    def netns(self) -> bool:
        return self.network is not None

    @property
    def bootstrap(self) -> str:
        if self.cluster.proxied:
            return ",".join(p.bootstrap for p in self.cluster.proxies.values())
        return ",".join(b.bootstrap for b in self.cluster.brokers.values())

    @property
    def client_prefix(self) -> list[str]:
        if self.network is None:
            return []
        return self.network.exec_prefix("client")

    @property
    def broker_ids(self) -> list[int]:
        return sorted(self.cluster.brokers)

    def host(self, node_id: int) -> str:
        return self.cluster.host(node_id)

    def kill_broker(self, node_id: int) -> None:
        self.cluster.kill(node_id)
        self._paused.discard(node_id)

    def restart_broker(self, node_id: int) -> None:
        self._paused.discard(node_id)
        self.cluster.restart(node_id)

    def pause_broker(self, node_id: int) -> None:
        self.cluster.pause(node_id)
        self._paused.add(node_id)

    def resume_broker(self, node_id: int) -> None:
        self.cluster.resume(node_id)
        self._paused.discard(node_id)

    def proxy_of(self, node_id: int) -> FaultProxy | None:
        return self.cluster.proxies.get(node_id)

    def metadata(self) -> MetadataView:
        """Metadata as a running, unpaused broker answers it."""
        live = [n for n in self.cluster.running if n not in self._paused]
        return self.cluster.metadata(live[0] if live else None)

    def coordinator(self, transactional_id: str) -> int:
        """The node id of ``transactional_id``'s transaction coordinator (FindCoordinator
        to a running, unpaused broker)."""
        live = [n for n in self.cluster.running if n not in self._paused]
        request = fc.FindCoordinatorRequest(key_type=i8(TRANSACTION_KEY_TYPE),
                                            coordinator_keys=(transactional_id,))
        with self.cluster.reach():
            response = request_once(self.cluster.brokers[live[0]].bootstrap, request)
        found = response.coordinators[0]
        if int(found.error_code) != 0:
            raise DeploymentError(f"FindCoordinator({transactional_id}): error "
                                  f"{int(found.error_code)} {found.error_message}")
        return int(found.node_id)

    def wait_serving(self, timeout: float = 60.0) -> None:
        count = len(self.cluster.brokers)
        self.cluster.wait_until(lambda view: serving(view, count), "cluster serving",
                                timeout=timeout)

    def heal(self) -> None:
        for proxy in self.cluster.proxies.values():
            proxy.set_rules(None)
        if self.network is not None:
            self.network.heal_all()
        for node_id in list(self._paused):
            self.resume_broker(node_id)
        for node_id, broker in self.cluster.brokers.items():
            if not broker.is_running:
                self.restart_broker(node_id)
        self.wait_serving()

    def close(self) -> None:
        with contextlib.suppress(AttributeError):
            self.cluster.close()
        if self.network is not None:
            self.network.close()


class ExternalDeployment:
    """Brokers somebody else runs: the runner only connects; faults are the user's."""

    kind = "external"

    def __init__(self, bootstrap: str, broker: str = "unknown") -> None:
        self._bootstrap = bootstrap
        self.broker = broker

    @property
    def bootstrap(self) -> str:
        return self._bootstrap

    @property
    def client_prefix(self) -> list[str]:
        return []

    def heal(self) -> None:
        pass

    def close(self) -> None:
        pass


def _netns_available() -> bool:
    try:
        require_netns()
    except NetnsUnavailable as exc:
        logger.info("verify cluster: no network namespaces (%s); fault proxies instead", exc)
        return False
    return True
