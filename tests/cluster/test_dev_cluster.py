"""``oncelog dev-cluster`` (``make cluster``) run as a user runs it, a real process: one
broker's kill -9 leaves the other two serving a real client; the killed broker, started
again by hand with the command line dev-cluster printed for it, registers again and rejoins
every ISR; Ctrl-C stops everything with exit status 0 (the broker started by hand
included), and a Ctrl-C soon after a kill -9 leaves no partition led by the dead broker or
with it as the only in-sync replica (issue 25: every partition ended with leader -1 and ISR
{dead})."""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog.cluster.metadata import MetadataImage
from oncelog.cluster.metadata_store import EtcdMetadataStore
from oncelog.harness.broker import REPO_ROOT
from oncelog.harness.cluster import MetadataView, raw_metadata
from oncelog.harness.etcd import etcd_binary
from oncelog.harness.net import LOOPBACK
from oncelog.harness.process import ServerProcess
from tests.support.replicated import in_sync, read_all

pytestmark = pytest.mark.integration

BROKERS = 3
TOPIC = "dev"
PARTITIONS = 3
# Given to every broker with -c: a dead broker is noticed in seconds, a lagging follower
# leaves the ISR soon, few internal partitions, no rebalance moving leaders meanwhile.
SETTINGS = {
    "broker.session.timeout.ms": 2000,
    "broker.heartbeat.interval.ms": 500,
    "controlled.shutdown.retry.backoff.ms": 2000,
    "replica.lag.time.max.ms": 2000,
    "replica.fetch.backoff.ms": 200,
    "offsets.topic.num.partitions": 2,
    "transaction.state.log.num.partitions": 2,
    "auto.leader.rebalance.enable": "false",
}


def free_port_run(count: int) -> int:
    """The first of ``count`` consecutive loopback ports that were all free a moment ago."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind((LOOPBACK, 0))
            base: int = probe.getsockname()[1]
        if base + count > 65535:
            continue
        sockets = []
        try:
            for port in range(base, base + count):
                sock = socket.socket()
                sockets.append(sock)
                sock.bind((LOOPBACK, port))
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()
        return base
    raise RuntimeError(f"no {count} consecutive free ports")


def pid_of(data_dir: Path) -> int | None:
    """The process serving ``data_dir`` (an ``oncelog serve --data-dir DIR``), from /proc."""
    wanted = ["--data-dir", str(data_dir)]
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        words = [w.decode(errors="replace") for w in argv]
        if "serve" in words and any(words[i:i + 2] == wanted for i in range(len(words))):
            return int(entry.name)
    return None


def wait_for(condition: Callable[[], object], what: str, timeout: float,
             why: Callable[[], str] = lambda: "") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"no {what} within {timeout:.0f}s\n{why()}"
        time.sleep(0.2)  # polling a condition


class DevCluster:
    """``oncelog dev-cluster`` in a subprocess, its output in a file."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.port = free_port_run(BROKERS)
        self.etcd_port = free_port_run(2)
        self.out_path = base.parent / f"{base.name}-dev-cluster.out"
        self.env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PYTHONUNBUFFERED": "1"}
        argv = [sys.executable, "-m", "oncelog.cli.main", "dev-cluster", "--dir", str(base),
                "--port", str(self.port), "--etcd-port", str(self.etcd_port)]
        for key, value in SETTINGS.items():
            argv += ["-c", f"{key}={value}"]
        with open(self.out_path, "wb") as out:
            self.process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                            env=self.env, cwd=base.parent)
        wait_for(lambda: "cluster ready" in self.output() or self.process.poll() is not None,
                 "cluster ready line", 90, self.report)
        assert self.process.poll() is None, self.report()

    def output(self) -> str:
        return self.out_path.read_text(errors="replace")

    def report(self) -> str:
        logs = [f"--- dev-cluster output ---\n{self.output()}"]
        for path in sorted(self.base.glob("*.log")):
            tail = "\n".join(path.read_text(errors="replace").splitlines()[-60:])
            logs.append(f"--- {path.name} ---\n{tail}")
        return "\n".join(logs)

    def data_dir(self, node_id: int) -> Path:
        return self.base / f"broker-{node_id}"

    def bootstrap(self, *node_ids: int) -> str:
        return ",".join(f"{LOOPBACK}:{self.port + n - 1}" for n in node_ids)

    def metadata(self, node_id: int) -> MetadataView:
        return raw_metadata(self.bootstrap(node_id))

    def wait_metadata(self, node_ids: tuple[int, ...], check: Callable[[MetadataView], bool],
                      what: str, timeout: float = 30) -> None:
        def holds() -> bool:
            try:
                return all(check(self.metadata(n)) for n in node_ids)
            except Exception:  # a broker still starting or going away
                return False
        wait_for(holds, what, timeout, self.report)

    def command_of(self, node_id: int) -> list[str]:
        """The command line dev-cluster printed for broker ``node_id``."""
        found = re.search(rf"^broker {node_id} command: (.+)$", self.output(), re.MULTILINE)
        assert found is not None, self.report()
        return shlex.split(found.group(1))

    def interrupt(self, timeout: float = 90) -> int:
        """Ctrl-C: SIGINT to dev-cluster; its exit status."""
        self.process.send_signal(signal.SIGINT)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"dev-cluster still running {timeout:.0f}s after "
                                 f"Ctrl-C\n{self.report()}") from None

    def kill_all(self) -> None:
        self.process.kill()
        self.process.wait()
        for node_id in range(1, BROKERS + 1):
            pid = pid_of(self.data_dir(node_id))
            if pid is not None:
                os.kill(pid, signal.SIGKILL)
        for entry in Path("/proc").iterdir():  # its etcd
            try:
                argv = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if str(self.base / "etcd").encode() in argv and b"--data-dir" in argv:
                os.kill(int(entry.name), signal.SIGKILL)


class StoredEtcd(ServerProcess):
    """dev-cluster's etcd started again on its data directory, to read what it keeps."""

    name = "etcd"

    def __init__(self, base: Path, port: int) -> None:
        import re as _re

        super().__init__(log_path=base / "etcd-reread.log",
                         ready_pattern=_re.compile(r"ready to serve client requests"))
        self.base = base
        self.port = port

    def argv(self) -> list[str]:
        client, peer = f"http://{LOOPBACK}:{self.port}", f"http://{LOOPBACK}:{self.port + 1}"
        return [etcd_binary(), "--name", "oncelog-dev", "--data-dir", str(self.base / "etcd"),
                "--listen-client-urls", client, "--advertise-client-urls", client,
                "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                "--initial-cluster", f"oncelog-dev={peer}"]


def stored_metadata(base: Path, port: int) -> MetadataImage:
    """The metadata dev-cluster left in etcd (under the default prefix) after it stopped."""
    etcd = StoredEtcd(base, port).start()
    try:
        async def load() -> MetadataImage:
            store = EtcdMetadataStore([(LOOPBACK, port)])
            try:
                return await store.load()
            finally:
                await store.close()
        return asyncio.run(load())
    finally:
        etcd.kill()


@pytest.fixture
def dev_cluster(tmp_path: Path) -> Iterator[Callable[[], DevCluster]]:
    started: list[DevCluster] = []

    def start() -> DevCluster:
        started.append(DevCluster(tmp_path / "cluster-data"))
        return started[-1]

    yield start
    for cluster in started:
        cluster.kill_all()


def create_topic(cluster: DevCluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap(1, 2, 3)})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3, config={"min.insync.replicas": "2"})],
                        operation_timeout=10)[TOPIC].result(timeout=30)
    cluster.wait_metadata((1, 2, 3), lambda m: in_sync(m, TOPIC, PARTITIONS, 3),
                          "the topic fully in sync")


def test_dev_cluster_outlives_a_killed_broker_which_restarts_by_hand(
    dev_cluster: Callable[[], DevCluster],
) -> None:
    cluster = dev_cluster()
    create_topic(cluster)
    victim, survivors = 2, (1, 3)
    pid = pid_of(cluster.data_dir(victim))
    assert pid is not None
    os.kill(pid, signal.SIGKILL)

    # The other brokers go on, and serve a real client once the dead broker's leaderships
    # have moved (its session times out): every acks=all write acknowledged, read back.
    cluster.wait_metadata(survivors, lambda m: victim not in m.brokers and all(
        p.leader in survivors for p in m.topics[TOPIC].values()), "leaders moved away")
    assert cluster.process.poll() is None, cluster.report()
    assert all(pid_of(cluster.data_dir(n)) is not None for n in survivors), cluster.report()
    producer = Producer({"bootstrap.servers": cluster.bootstrap(*survivors), "acks": "all",
                         "enable.idempotence": True, "message.timeout.ms": 20000})
    sent = [f"while {victim} is down {i}".encode() for i in range(30)]
    for i, value in enumerate(sent):
        producer.produce(TOPIC, value=value, partition=i % PARTITIONS)
    assert producer.flush(30) == 0
    assert sorted(read_all(cluster.bootstrap(*survivors), TOPIC, PARTITIONS)) == sorted(sent)
    wait_for(lambda: f"broker {victim} (pid {pid}) exited" in cluster.output(),
             "the exit reported", 10, cluster.report)

    # Started again by hand with the printed command line: ready, registered, in every ISR.
    with open(cluster.base / f"broker-{victim}.log", "ab") as log:
        again = subprocess.Popen(cluster.command_of(victim), stdout=log,
                                 stderr=subprocess.STDOUT, env=cluster.env)
    try:
        cluster.wait_metadata((1, 2, 3), lambda m: victim in m.brokers
                              and in_sync(m, TOPIC, PARTITIONS, 3),
                              f"broker {victim} back in every ISR")
        # Ctrl-C stops everything, the broker started by hand included, each cleanly.
        assert cluster.interrupt() == 0, cluster.report()
        assert again.wait(10) == 0, cluster.report()
    finally:
        again.kill()
        again.wait()
    for node_id in (1, 2, 3):
        assert pid_of(cluster.data_dir(node_id)) is None, cluster.report()
    stopped = cluster.output()
    assert all(f"broker {n} stopped" in stopped for n in (1, 2, 3)), stopped


def test_ctrl_c_right_after_a_kill_elects_no_dead_broker(
    dev_cluster: Callable[[], DevCluster],
) -> None:
    cluster = dev_cluster()
    create_topic(cluster)
    victim = 2
    pid = pid_of(cluster.data_dir(victim))
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    # Ctrl-C while the dead broker's lease still names it alive (for 2 s).
    assert cluster.interrupt() == 0, cluster.report()
    for node_id in (1, 2, 3):
        assert pid_of(cluster.data_dir(node_id)) is None, cluster.report()

    image = stored_metadata(cluster.base, cluster.etcd_port)
    assert image.partitions, image
    bad = {f"{topic}-{index}": (v.state.leader, v.state.isr)
           for (topic, index), v in image.partitions.items()
           if v.state.leader == victim or set(v.state.isr) <= {victim}}
    assert not bad, f"partitions left on the dead broker {victim}: {bad}\n{cluster.report()}"
