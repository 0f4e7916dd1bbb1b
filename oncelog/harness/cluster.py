"""``ClusterProcess``: etcd plus N ``oncelog serve`` brokers on loopback, for cluster tests.

    with ClusterProcess(tmp_path, brokers=3) as cluster:   # waits for every ready line
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        cluster.kill(2)                  # kill -9 broker 2
        cluster.wait_until(lambda m: 2 not in m.brokers, "broker 2 gone")
        cluster.restart(2)               # same port, same data directory
        cluster.pause_etcd()             # SIGSTOP etcd (resume_etcd: SIGCONT)

``env`` adds to every broker's environment (e.g. ``{"ONCELOG_CRASH_AT": point}``: a crash
point of oncelog.faults, which only the broker that reaches it acts on).

Brokers are node ids 1..N, each with its own data directory under ``base_dir`` and a short
session (``broker.session.timeout.ms`` 2000 unless the test says otherwise), so a killed
broker is noticed in seconds. ``start()`` returns once every broker printed its ready line
and every broker's Metadata shows all N brokers and a controller. Conditions are waited for
with a deadline, by polling Metadata (never by sleeping for a guessed time). On failure,
``logs()`` is what the fixture prints.

Where it runs: on loopback by default; with ``network=`` (a ``oncelog.harness.netns.Network``)
etcd runs in host ``etcd`` and broker N in host ``bN`` (each listening on and advertising
its namespace address), so ``network.cut`` / ``isolate`` apply between them, and the test
reaches the cluster from host ``client``, which no fault touches: ``metadata()`` and
``wait_until`` do so themselves; build clients inside ``with cluster.reach():``.

    with ClusterProcess(tmp_path, network=net) as cluster:
        net.isolate(cluster.host(1), keep=("etcd", "client"))    # broker 1 alone with etcd
        with cluster.reach():
            producer = Producer({"bootstrap.servers": cluster.bootstrap})

With ``metrics=True`` (loopback only) each broker also serves ``--metrics`` on a port of its
own, kept across restarts: ``metrics_url(node_id)``.

With ``proxied=True`` (loopback only) each broker listens on its own port and advertises a
``FaultProxy`` in front of it (``proxies[node_id]``), so clients and the other brokers
reach it through the proxy, where ``oncelog verify`` cuts connections and drops responses.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from kio.schema.metadata.v12 import request as md

from oncelog.harness.broker import REPO_ROOT, BrokerProcess, ConfigValue, default_argv_prefix
from oncelog.harness.etcd import EtcdProcess, start_etcd, unique_prefix
from oncelog.harness.fault_proxy import FaultProxy
from oncelog.harness.net import LOOPBACK, free_port
from oncelog.harness.netns import Network
from oncelog.harness.rawkafka import request_once


@dataclass(frozen=True)
class PartitionView:
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True)
class MetadataView:
    """One broker's Metadata (v12, every topic) reduced to what cluster tests compare."""

    brokers: frozenset[int]
    controller_id: int
    topics: dict[str, dict[int, PartitionView]]

    def leaders(self, topic: str) -> dict[int, int]:
        return {i: p.leader for i, p in self.topics.get(topic, {}).items()}


def raw_metadata(bootstrap: str) -> MetadataView:
    """Metadata as the broker at ``bootstrap`` itself answers it (no client in between)."""
    response = request_once(bootstrap, md.MetadataRequest(
        topics=None, allow_auto_topic_creation=False,
        include_topic_authorized_operations=False))
    return MetadataView(
        brokers=frozenset(int(b.node_id) for b in response.brokers),
        controller_id=int(response.controller_id),
        topics={
            str(t.name): {
                int(p.partition_index): PartitionView(
                    int(p.leader_id), int(p.leader_epoch),
                    tuple(int(r) for r in p.replica_nodes), tuple(int(r) for r in p.isr_nodes))
                for p in t.partitions
            }
            for t in response.topics
        },
    )

# Short timeouts so faults are noticed within a test's time budget.
CLUSTER_TEST_CONFIGS: dict[str, ConfigValue] = {
    "broker.session.timeout.ms": 2000,
    "broker.heartbeat.interval.ms": 500,
    "controlled.shutdown.retry.backoff.ms": 5000,
    "auto.leader.rebalance.enable": False,
}

CLIENT_HOST = "client"  # the network host tests reach a namespaced cluster from
ETCD_HOST = "etcd"
ETCD_PORT = 2379
ETCD_PEER_PORT = 2380


class ClusterProcess:
    """An etcd (its own, or a shared one under a fresh key prefix) and N brokers, on
    loopback or, with ``network``, each in its own host of that network."""

    def __init__(
        self,
        base_dir: Path,
        *,
        brokers: int = 3,
        configs: Mapping[str, ConfigValue] | None = None,
        etcd: EtcdProcess | None = None,
        env: Mapping[str, str] | None = None,
        network: Network | None = None,
        log_level: str = "INFO",
        proxied: bool = False,
        scram_users: Mapping[str, tuple[str, str]] | None = None,
        metrics: bool = False,
    ) -> None:
        if network is not None and metrics:
            raise ValueError("metrics endpoints are served on loopback only")
        if network is not None and etcd is not None:
            raise ValueError("a namespaced cluster runs its own etcd in host 'etcd'")
        if network is not None and proxied:
            raise ValueError("a namespaced cluster is cut by routes, not by fault proxies")
        self.base_dir = Path(base_dir)
        self.network = network
        self.log_level = log_level
        self._own_etcd = etcd is None
        self.etcd = etcd
        self.prefix = unique_prefix()
        self.configs = {**CLUSTER_TEST_CONFIGS, **(configs or {})}
        self.count = brokers
        self.env = dict(env or {})
        self.brokers: dict[int, BrokerProcess] = {}
        self.proxied = proxied
        self.proxies: dict[int, FaultProxy] = {}
        self.scram_users = dict(scram_users or {})
        self.metrics = metrics
        self.metrics_ports: dict[int, int] = {}  # node id -> its --metrics port
        if self.scram_users and network is not None:
            raise ValueError("SCRAM users are seeded from loopback, not into a namespace")

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self, timeout: float = 60.0) -> Self:
        if self.network is not None:
            self._add_hosts(self.network)
        if self.etcd is None:
            self.etcd = self._start_etcd()
        if self.scram_users:
            self._seed_scram_users(self.etcd.endpoint)
        for node_id in range(1, self.count + 1):
            self.brokers[node_id] = self._broker(node_id, {
                **self.configs,
                "metadata.etcd.endpoints": self.etcd.endpoint,
                "metadata.etcd.prefix": self.prefix,
            }).start()
        self.wait_until(
            lambda m: len(m.brokers) == self.count and m.controller_id > 0
            and {"__consumer_offsets", "__transaction_state"} <= set(m.topics),
            f"{self.count} brokers and a controller", timeout=timeout,
        )
        return self

    def _seed_scram_users(self, endpoint: str) -> None:
        """``scram_users`` (user -> (mechanism, password)) written to the metadata store
        before any broker starts with ``oncelog users add --metadata-etcd-endpoints`` (as
        Kafka's ``kafka-storage format --add-scram``): the brokers' own SCRAM login on a
        SASL inter-broker listener needs it from the start."""
        for user, (mechanism, password) in self.scram_users.items():
            subprocess.run(
                [*default_argv_prefix(), "users", "add", user, "--mechanism", mechanism,
                 "--metadata-etcd-endpoints", endpoint, "--metadata-etcd-prefix", self.prefix],
                input=password + "\n", text=True, check=True, capture_output=True,
                cwd=REPO_ROOT, env=self._broker_env(), timeout=60)

    def _broker_env(self) -> dict[str, str] | None:
        """The brokers' environment: this process's (repository first on PYTHONPATH, as
        BrokerProcess does by default) plus ``env`` (e.g. ``ONCELOG_CRASH_AT``)."""
        if not self.env:
            return None
        path = os.environ.get("PYTHONPATH")
        return {**os.environ, "PYTHONPATH": str(REPO_ROOT) + (os.pathsep + path if path else ""),
                **self.env}

    def _add_hosts(self, network: Network) -> None:
        wanted = [ETCD_HOST, CLIENT_HOST, *(self.host(n) for n in range(1, self.count + 1))]
        for host in wanted:
            if host not in network.hosts:
                network.add_host(host)

    def _start_etcd(self) -> EtcdProcess:
        if self.network is None:
            return start_etcd(self.base_dir / "etcd")
        return EtcdProcess(
            self.base_dir / "etcd", host=self.network.address(ETCD_HOST), port=ETCD_PORT,
            peer_port=ETCD_PEER_PORT, argv_prefix=self.network.exec_prefix(ETCD_HOST),
        ).start()

    def _broker(self, node_id: int, configs: Mapping[str, ConfigValue]) -> BrokerProcess:
        data_dir = self.base_dir / f"broker-{node_id}"
        extra: list[str] = []
        if self.metrics:
            self.metrics_ports[node_id] = free_port(LOOPBACK)
            extra = ["--metrics", f"{LOOPBACK}:{self.metrics_ports[node_id]}"]
        if self.proxied:
            port = free_port(LOOPBACK)
            proxy = self.proxies[node_id] = FaultProxy(LOOPBACK, port).start()
            return BrokerProcess(data_dir, node_id=node_id, configs=configs, port=port,
                                 advertised=proxy.bootstrap, env=self._broker_env(),
                                 log_level=self.log_level, extra_args=extra)
        if self.network is None:
            return BrokerProcess(data_dir, node_id=node_id, configs=configs,
                                 env=self._broker_env(), log_level=self.log_level,
                                 extra_args=extra)
        return self.network.broker(self.host(node_id), data_dir, node_id=node_id,
                                   configs=configs, env=self._broker_env(),
                                   log_level=self.log_level)

    @staticmethod
    def host(node_id: int) -> str:
        """The network host broker ``node_id`` runs in (with ``network``)."""
        return f"b{node_id}"

    def reach(self) -> contextlib.AbstractContextManager[None]:
        """``with cluster.reach():`` the calling thread can connect to the brokers (inside
        host ``client`` for a namespaced cluster; nothing to do on loopback). Clients built
        in the block keep their sockets and threads there."""
        if self.network is None:
            return contextlib.nullcontext()
        return self.network.joined(CLIENT_HOST)

    def close(self) -> None:
        for broker in self.brokers.values():
            broker.kill()
        if self._own_etcd and self.etcd is not None:
            self.etcd.kill()
        for proxy in self.proxies.values():
            proxy.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # -- per broker ---------------------------------------------------------------------------
    @property
    def running(self) -> list[int]:
        return [n for n, b in self.brokers.items() if b.is_running]

    @property
    def bootstrap(self) -> str:
        """The running brokers' addresses, for ``bootstrap.servers`` (their proxies' when
        ``proxied``)."""
        if self.proxied:
            return ",".join(self.proxies[n].bootstrap for n in self.running)
        return ",".join(self.brokers[n].bootstrap for n in self.running)

    def metrics_url(self, node_id: int) -> str:
        """Broker ``node_id``'s Prometheus endpoint (``metrics=True``), for ``oncelog
        metrics --url``."""
        return f"http://{LOOPBACK}:{self.metrics_ports[node_id]}/metrics"

    def listener_port(self, node_id: int, listener: str) -> int:
        """The port broker ``node_id`` bound for ``listener`` (e.g. a ``NAME://HOST:0``
        entry of ``listeners``), from its log line ``listener NAME bound on HOST:PORT``."""
        found = re.findall(rf"listener {re.escape(listener.upper())} bound on [^\s]+:(\d+)",
                           self.brokers[node_id].log_path.read_text())
        if not found:
            raise AssertionError(f"broker {node_id} bound no listener {listener}\n"
                                 f"{self.logs()}")
        return int(found[-1])

    def listener_bootstrap(self, listener: str) -> str:
        """The running brokers' ``listener`` addresses, for clients of that listener (e.g.
        SASL_SSL) while the harness itself keeps the PLAINTEXT ``bootstrap``."""
        return ",".join(f"{self.brokers[n].host}:{self.listener_port(n, listener)}"
                        for n in self.running)

    def kill(self, node_id: int) -> None:
        """kill -9: the broker's lease lapses after the session timeout."""
        self.brokers[node_id].kill()

    def stop(self, node_id: int) -> int:
        """SIGTERM (a controlled shutdown); the exit code."""
        return self.brokers[node_id].stop()

    def pause(self, node_id: int) -> None:
        """SIGSTOP: the broker stops renewing its lease without exiting."""
        self.brokers[node_id]._signal(signal.SIGSTOP)

    def resume(self, node_id: int) -> None:
        self.brokers[node_id]._signal(signal.SIGCONT)

    def pause_etcd(self) -> None:
        """SIGSTOP of etcd: no lease is renewed, no metadata read or written, until
        ``resume_etcd``. A shared etcd (``etcd=``) stops for every cluster on it."""
        assert self.etcd is not None
        self.etcd._signal(signal.SIGSTOP)

    def resume_etcd(self) -> None:
        assert self.etcd is not None
        self.etcd._signal(signal.SIGCONT)

    def restart(self, node_id: int) -> BrokerProcess:
        """Start a stopped or killed broker again, same port and data directory."""
        broker = self.brokers[node_id]
        if broker.is_running:
            broker.kill()
        return broker.start()

    # -- observing ----------------------------------------------------------------------------
    def metadata(self, node_id: int | None = None) -> MetadataView:
        """Metadata as ``node_id`` (default: the first running broker) answers it."""
        node = node_id if node_id is not None else self.running[0]
        with self.reach():
            return raw_metadata(self.brokers[node].bootstrap)

    def wait_until(
        self,
        predicate: Callable[[MetadataView], bool],
        what: str,
        *,
        timeout: float = 30.0,
        node_id: int | None = None,
    ) -> MetadataView:
        """Poll Metadata (of ``node_id``, else of every running broker: all must agree)
        until ``predicate`` holds; AssertionError (with the logs) after ``timeout``."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            try:
                nodes = [node_id] if node_id is not None else self.running
                views = [self.metadata(n) for n in nodes]
                last = views[0]
                if all(predicate(v) for v in views):
                    return last
            except Exception as exc:  # a broker going away while asked
                last = exc
            time.sleep(0.2)  # polling interval, not synchronisation
        raise AssertionError(f"cluster: no {what} within {timeout:.0f}s (last: {last!r})\n"
                             f"{self.logs()}")

    def logs(self, lines: int = 80) -> str:
        parts = []
        for node_id, broker in self.brokers.items():
            parts.append(f"--- broker {node_id} ({broker.log_path}) ---\n"
                         f"{broker.log_tail(lines)}")
        if self.etcd is not None:
            parts.append(f"--- etcd ---\n{self.etcd.log_tail(20)}")
        return "\n".join(parts)
