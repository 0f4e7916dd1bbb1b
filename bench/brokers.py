"""Starting the brokers under test on loopback: oncelog (optionally profiled), Tansu and
Apache Kafka 4.4 (the reference broker of tests/support/kafka.py, one KRaft node), and the
three-broker clusters of issue 14: ``oncelog-cluster3`` (etcd and three ``oncelog serve``,
oncelog/harness/cluster.py's ClusterProcess) and ``kafka-cluster3`` (three Kafka 4.4 KRaft
nodes, each broker and controller, a static quorum of the three).

Broker CPU is the sum over a run's broker processes (``Running.servers``); processes the
brokers need besides (etcd) are in ``Running.side`` and their CPU is reported apart.

With ``profile``, py-spy attaches to the running oncelog once it is ready and is stopped
(SIGINT, which makes it write its output) before the broker is, so the profile covers the
benchmark and not the interpreter start-up. If py-spy cannot attach, the broker is started
again under ``python -m cProfile`` instead.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from oncelog.harness.broker import BrokerProcess
from oncelog.harness.cluster import ClusterProcess
from oncelog.harness.net import LOOPBACK, free_port
from oncelog.harness.process import ServerProcess
from tests.support.kafka import KafkaProcess
from tests.support.tansu import TansuProcess

logger = logging.getLogger(__name__)

BROKERS = ("oncelog", "tansu", "kafka", "oncelog-cluster3", "kafka-cluster3")
LABELS = {"oncelog": "oncelog", "tansu": "Tansu", "kafka": "Kafka",
          "oncelog-cluster3": "oncelog-3", "kafka-cluster3": "Kafka-3"}
SIZES = {"oncelog": 1, "tansu": 1, "kafka": 1, "oncelog-cluster3": 3, "kafka-cluster3": 3}
"""Brokers per run: a scenario's replication factor must not exceed it."""

CLUSTER_SIZE = 3
KAFKA_CLUSTER_CONFIGS: dict[str, str] = {
    # Kafka's defaults again where SINGLE_NODE_CONFIGS lowered them for one node.
    "offsets.topic.replication.factor": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "min.insync.replicas": "1",
}
ONCELOG_CLUSTER_CONFIGS: dict[str, str | int | bool] = {
    # Kafka's defaults instead of the cluster tests' 2 s session: a broker of a busy 2-core
    # machine must not lose its registration in the middle of a measurement.
    "broker.session.timeout.ms": 9000,
    "broker.heartbeat.interval.ms": 2000,
}


@dataclass
class Running:
    name: str
    servers: list[ServerProcess]
    """The broker processes: broker CPU is the sum over them."""
    bootstrap: str
    profile: Path | None = None
    profile_kind: str | None = None
    profiler: subprocess.Popen[bytes] | None = None
    cleanup: list[Path] = field(default_factory=list)
    side: dict[str, ServerProcess] = field(default_factory=dict)
    """Processes the brokers need that are not brokers (etcd); their CPU is reported apart."""
    kill_at_stop: bool = False
    """Clusters are killed (-9) at the end: the figures are taken before, and a three-node
    cluster stopped node by node would wait for controlled shutdowns and lost quorums."""
    keep_logs: dict[Path, Path] = field(default_factory=dict)
    """Logs inside ``cleanup`` dirs, copied (source -> destination) before those go."""


def py_spy() -> str | None:
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


def _attach_py_spy(pid: int, folded: Path, log_path: Path) -> subprocess.Popen[bytes] | None:
    """py-spy sampling ``pid`` into ``folded``; None if it could not attach."""
    spy = py_spy()
    if spy is None:
        return None
    argv = [spy, "record", "--pid", str(pid), "--format", "raw", "--function",
            "--nonblocking", "--rate", "100", "-o", str(folded)]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            logger.warning("py-spy could not attach (exit %s); see %s", proc.returncode, log_path)
            return None
        if b"Sampling process" in log_path.read_bytes():
            return proc
        time.sleep(0.05)
    return proc


def start_oncelog(
    out_dir: Path, tag: str, *, profile: bool, configs: Mapping[str, str] | None = None
) -> Running:
    data_parent = Path(tempfile.mkdtemp(prefix="oncelog-bench-"))
    data_dir = data_parent / "data"
    log_path = out_dir / f"oncelog-{tag}.log"

    def make(argv_prefix: list[str] | None = None) -> BrokerProcess:
        return BrokerProcess(data_dir, log_level="WARNING", log_path=log_path,
                             stop_timeout=120.0, argv_prefix=argv_prefix, configs=configs)

    broker = make().start()
    running = Running("oncelog", [broker], broker.bootstrap, cleanup=[data_parent])
    if not profile:
        return running
    folded = out_dir / f"oncelog-{tag}.folded"
    assert broker.pid is not None
    spy = _attach_py_spy(broker.pid, folded, out_dir / f"py-spy-{tag}.log")
    if spy is not None:
        running.profile, running.profile_kind, running.profiler = folded, "py-spy", spy
        return running
    broker.kill()
    shutil.rmtree(data_dir, ignore_errors=True)
    pstats_path = out_dir / f"oncelog-{tag}.pstats"
    broker = make([sys.executable, "-m", "cProfile", "-o", str(pstats_path), "-m",
                   "oncelog.cli.main"]).start()
    return Running("oncelog", [broker], broker.bootstrap, pstats_path, "cprofile",
                   cleanup=[data_parent])


def start_tansu(out_dir: Path, tag: str) -> Running:
    tansu = TansuProcess(out_dir / f"tansu-{tag}.log", stop_timeout=60.0)
    tansu.start()
    return Running("tansu", [tansu], tansu.bootstrap)


def start_kafka(out_dir: Path, tag: str, configs: Mapping[str, str] | None = None) -> Running:
    """Kafka 4.4 with its log dirs in a temporary dir (Kafka's defaults and ``configs``, JVM
    settings of tests/support/kafka.py: -Xms512m -Xmx512m and kafka-run-class.sh's G1
    options)."""
    data_parent = Path(tempfile.mkdtemp(prefix="kafka-bench-"))
    kafka = KafkaProcess(data_parent / "data", log_path=out_dir / f"kafka-{tag}.log",
                         stop_timeout=120.0, configs=configs)
    try:
        kafka.start()
    except BaseException:
        shutil.rmtree(data_parent, ignore_errors=True)
        raise
    return Running("kafka", [kafka], kafka.bootstrap, cleanup=[data_parent])


def start_oncelog_cluster(out_dir: Path, tag: str) -> Running:
    """etcd and three ``oncelog serve`` (log level WARNING, ONCELOG_CLUSTER_CONFIGS), data
    in a temporary dir; ready once every broker sees the three and the internal topics."""
    base = Path(tempfile.mkdtemp(prefix="oncelog-cluster-bench-"))
    cluster = ClusterProcess(base, brokers=CLUSTER_SIZE, configs=ONCELOG_CLUSTER_CONFIGS,
                             log_level="WARNING")
    try:
        cluster.start(timeout=120.0)
    except BaseException:
        cluster.close()
        _copy_logs(_cluster_logs(cluster, out_dir, tag))
        shutil.rmtree(base, ignore_errors=True)
        raise
    assert cluster.etcd is not None
    return Running("oncelog-cluster3", list(cluster.brokers.values()), cluster.bootstrap,
                   cleanup=[base], side={"etcd": cluster.etcd}, kill_at_stop=True,
                   keep_logs=_cluster_logs(cluster, out_dir, tag))


def _cluster_logs(cluster: ClusterProcess, out_dir: Path, tag: str) -> dict[Path, Path]:
    logs = {b.log_path: out_dir / f"oncelog-cluster3-{tag}-broker{n}.log"
            for n, b in cluster.brokers.items()}
    if cluster.etcd is not None:
        logs[cluster.etcd.log_path] = out_dir / f"oncelog-cluster3-{tag}-etcd.log"
    return logs


def kafka_cluster_nodes(data_parent: Path, out_dir: Path, tag: str) -> list[KafkaProcess]:
    """Three Kafka 4.4 KRaft nodes, each broker and controller (node ids 1-3, a static
    quorum of the three, one cluster id), each with tests/support/kafka.py's JVM settings
    (-Xms512m -Xmx512m, so 1.5 GiB of heap in all) and Kafka's replication defaults."""
    ports = [(free_port(LOOPBACK), free_port(LOOPBACK)) for _ in range(CLUSTER_SIZE)]
    voters = ",".join(f"{n}@{LOOPBACK}:{controller}"
                      for n, (_, controller) in enumerate(ports, start=1))
    nodes = [
        KafkaProcess(data_parent / f"node-{n}", port=port, controller_port=controller,
                     configs={**KAFKA_CLUSTER_CONFIGS, "node.id": str(n),
                              "controller.quorum.voters": voters},
                     log_path=out_dir / f"kafka-cluster3-{tag}-node{n}.log",
                     start_timeout=120.0, stop_timeout=120.0)
        for n, (port, controller) in enumerate(ports, start=1)
    ]
    for node in nodes[1:]:
        node.cluster_id = nodes[0].cluster_id
    return nodes


def start_kafka_cluster(out_dir: Path, tag: str) -> Running:
    """The three nodes of ``kafka_cluster_nodes`` started at once: a node's broker only
    says it started once the controller quorum (two of three) has a leader."""
    data_parent = Path(tempfile.mkdtemp(prefix="kafka-cluster-bench-"))
    nodes = kafka_cluster_nodes(data_parent, out_dir, tag)
    try:
        with ThreadPoolExecutor(len(nodes)) as pool:
            for started in [pool.submit(node.start) for node in nodes]:
                started.result()
    except BaseException:
        for node in nodes:
            node.kill()
        shutil.rmtree(data_parent, ignore_errors=True)
        raise
    return Running("kafka-cluster3", list(nodes), ",".join(n.bootstrap for n in nodes),
                   cleanup=[data_parent], kill_at_stop=True)


def start(
    name: str, out_dir: Path, tag: str, *, profile: bool,
    configs: Mapping[str, str] | None = None,
) -> Running:
    """Start broker ``name``; ``configs`` are broker configs for oncelog and Kafka (single
    node; Tansu has no such configs and runs as it is)."""
    if name == "oncelog":
        return start_oncelog(out_dir, tag, profile=profile, configs=configs)
    if name == "tansu":
        return start_tansu(out_dir, tag)
    if name == "kafka":
        return start_kafka(out_dir, tag, configs)
    if name == "oncelog-cluster3":
        return start_oncelog_cluster(out_dir, tag)
    if name == "kafka-cluster3":
        return start_kafka_cluster(out_dir, tag)
    raise ValueError(f"unknown broker {name!r}; known: {', '.join(BROKERS)}")


def _copy_logs(logs: dict[Path, Path]) -> None:
    for source, destination in logs.items():
        with contextlib.suppress(OSError):
            shutil.copyfile(source, destination)


def stop(running: Running) -> int | None:
    """Stop the profiler (it writes its output), then the broker; returns the exit code."""
    if running.profiler is not None:
        with contextlib.suppress(ProcessLookupError):
            running.profiler.send_signal(signal.SIGINT)
        try:
            running.profiler.wait(60)
        except subprocess.TimeoutExpired:
            running.profiler.kill()
            running.profiler.wait()
    code: int | None = None
    if running.kill_at_stop:
        for server in [*running.servers, *running.side.values()]:
            server.kill()
    else:
        server = running.servers[0]
        try:
            code = server.stop(check=False)
        except AssertionError as exc:
            logger.warning("%s did not stop cleanly: %s", running.name,
                           str(exc).splitlines()[0])
            code = server.kill()
    _copy_logs(running.keep_logs)
    for path in running.cleanup:
        shutil.rmtree(path, ignore_errors=True)
    return code
