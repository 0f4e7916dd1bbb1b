"""``KafkaProcess``: Apache Kafka 4.4 as a reference broker on loopback (one KRaft node).

The broker is assembled from Maven artifacts by tests/support/fetch_kafka.sh (``make
reference``) into ``.cache/kafka-4.4.0/libs``; see docs/reference-kafka.md. One process is
broker and controller (``process.roles=broker,controller``, ``node.id=1``, a static quorum
of itself on a second free port), with every log dir under ``data_dir``. The first start
formats the storage (``kafka.tools.StorageTool format``); later starts reuse it, so a
restart keeps the data. Ready when the log says ``[KafkaRaftServer nodeId=1] Kafka Server
started`` and the listener accepts connections.

Used by the ``kafka_factory`` / ``kafka_broker`` fixtures (tests/conftest.py) and by the
benchmark (bench/brokers.py): both start the JVM through this class. ``run_harness`` runs
one of the Java harness programs (tests/java/harness, kafka-clients 4.4). ``JavaClient``
runs a long-lived program of the streams module (tests/java/streams: Kafka Streams 4.3.1
and kafka-tools 4.3.1's system-test tools, with their own kafka-clients 4.3.x) and collects
the JSON lines it prints.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import json
import os
import re
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from oncelog.harness.net import LOOPBACK, free_port, wait_for_port
from oncelog.harness.process import ServerProcess, ServerStartError, ServerStopError

KAFKA_VERSION = "4.4.0"
# kafka-tools (TransactionsCommand, ...) and kafka-streams: 4.4.0 is not on Maven Central
# here, 4.3.1 is.
KAFKA_TOOLS_VERSION = "4.3.1"
STREAMS_VERSION = "4.3.1"
REPO = Path(__file__).resolve().parents[2]
READY = re.compile(r"\[KafkaRaftServer nodeId=(\d+)\] Kafka Server started")
LOG4J2_CONFIG = REPO / "tests" / "java" / "broker" / "log4j2.properties"
NODE_ID = 1

# The JVM settings of kafka-run-class.sh's KAFKA_JVM_PERFORMANCE_OPTS, with a smaller heap
# than kafka-server-start.sh's -Xms1G -Xmx1G (documented in docs/reference-kafka.md).
HEAP_OPTS: tuple[str, ...] = ("-Xms512m", "-Xmx512m")
JVM_PERFORMANCE_OPTS: tuple[str, ...] = (
    "-server",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-Djava.awt.headless=true",
)

BROKER_JVM_OPTS: tuple[str, ...] = (*HEAP_OPTS, *JVM_PERFORMANCE_OPTS)

# The tests' Kafka (the kafka_factory fixture; benchmarks keep BROKER_JVM_OPTS): C1 only and
# the serial collector. A broker that lives for one test never pays back C2's compilations
# or G1's threads: start, one transaction and stop took 23 s of CPU with BROKER_JVM_OPTS and
# 12 s with these. What the tests compare — Kafka's answers — does not depend on them.
TEST_BROKER_JVM_OPTS: tuple[str, ...] = (
    *HEAP_OPTS, "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Djava.awt.headless=true",
)

# A harness program is a short-lived client: a small heap, and the C1 compiler only
# (it starts faster and a client that runs for a second never reaches C2).
HARNESS_JVM_OPTS: tuple[str, ...] = (
    "-Xmx256m",
    "-XX:TieredStopAtLevel=1",
    "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
)

# Single-node settings on top of Kafka's defaults; ``configs`` overrides any of them.
SINGLE_NODE_CONFIGS: Mapping[str, str] = {
    "offsets.topic.replication.factor": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "min.insync.replicas": "1",
    "group.initial.rebalance.delay.ms": "0",
}

# A JVM killed by SIGTERM after its shutdown hooks ran exits with 128 + 15.
_SIGTERM_EXIT = 143


class ReferenceKafkaMissing(RuntimeError):
    """Java or the reference Kafka cache is not there; the message says how to get it."""


def cache_dir() -> Path:
    """Where fetch_kafka.sh puts the broker and the harness (``$ONCELOG_REFERENCE_CACHE``)."""
    return Path(os.environ.get("ONCELOG_REFERENCE_CACHE") or REPO / ".cache")


def java_binary() -> Path:
    """``$JAVA_HOME/bin/java`` or ``java`` on PATH; ``ReferenceKafkaMissing`` otherwise."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").is_file():
        return Path(java_home) / "bin" / "java"
    on_path = shutil.which("java")
    if on_path is None:
        raise ReferenceKafkaMissing(
            "no Java: the reference Kafka 4.4 broker needs Java 17+ (`java` on PATH or JAVA_HOME)"
        )
    return Path(on_path)


def _classpath(libs: Path, *, first: Sequence[Path] = ()) -> str:
    jars = sorted(libs.glob("*.jar"))
    if not jars:
        raise ReferenceKafkaMissing(
            f"the reference Kafka {KAFKA_VERSION} is not in {libs}: run `make reference` "
            "(tests/support/fetch_kafka.sh, Maven downloads it once)"
        )
    return os.pathsep.join(str(p) for p in [*first, *jars])


def broker_classpath() -> str:
    return _classpath(cache_dir() / f"kafka-{KAFKA_VERSION}" / "libs")


def _module_classpath(directory: str, jar_name: str, what: str) -> str:
    """A built module of tests/java: its jar first, then the libs/ copied next to it."""
    module = cache_dir() / directory
    jar = module / jar_name
    if not jar.is_file():
        raise ReferenceKafkaMissing(f"{what} is not built ({jar} is missing): run `make reference`")
    return _classpath(module / "libs", first=[jar])


def harness_classpath() -> str:
    return _module_classpath(f"harness-{KAFKA_VERSION}", "oncelog-harness.jar", "the Java harness")


def streams_classpath() -> str:
    """The streams module: oncelog-streams.jar, Kafka Streams and kafka-tools 4.3.1."""
    return _module_classpath(f"streams-{STREAMS_VERSION}", "oncelog-streams.jar",
                             "the Kafka Streams module")


def tools_classpath() -> str:
    """kafka-tools and its runtime dependencies (tests/java/tools), built by fetch_kafka.sh."""
    return _classpath(cache_dir() / f"tools-{KAFKA_TOOLS_VERSION}" / "libs")


def run_kafka_tool(
    main_class: str, *args: str, timeout: float = 60.0
) -> subprocess.CompletedProcess[str]:
    """Run one of Kafka's own tools (``org.apache.kafka.tools.<main_class>``, kafka-tools
    4.3.1) as its shell script would, and wait for it."""
    argv = [str(java_binary()), *HARNESS_JVM_OPTS, "-cp", tools_classpath(),
            f"org.apache.kafka.tools.{main_class}", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False,
                          stdin=subprocess.DEVNULL)


def harness_argv(main_class: str, *args: str) -> list[str]:
    """The command line of ``oncelog.harness.<main_class>`` (for tests that start it
    themselves, e.g. to kill it)."""
    return [str(java_binary()), *HARNESS_JVM_OPTS, "-cp", harness_classpath(),
            f"oncelog.harness.{main_class}", *args]


def require_reference() -> None:
    """Raise ``ReferenceKafkaMissing`` unless Java, the broker and the harness are there."""
    java_binary()
    broker_classpath()
    harness_classpath()


def run_harness(
    main_class: str, *args: str, timeout: float = 60.0, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``oncelog.harness.<main_class>`` with kafka-clients 4.4 (``input`` on its stdin)
    and wait for it."""
    return subprocess.run(harness_argv(main_class, *args), capture_output=True, text=True,
                          timeout=timeout, check=False, input=input,
                          stdin=None if input is not None else subprocess.DEVNULL)


Json = dict[str, Any]


class JavaClient:
    """One long-lived JVM of the streams module (``main_class``, fully qualified, e.g.
    ``oncelog.streams.RunningTotals`` or ``org.apache.kafka.tools.VerifiableProducer``).

    Every stdout line that parses as a JSON object is kept in ``lines`` (a reader thread);
    stderr (the clients' WARN logs) goes to ``log_path``. ``wait_for`` polls the lines
    collected so far; ``kill()`` is SIGKILL, ``stop()`` SIGTERM (the JVM's shutdown hooks
    run). Killed at interpreter exit if still running.
    """

    def __init__(self, main_class: str, *args: str, log_path: Path,
                 jvm_opts: Sequence[str] = HARNESS_JVM_OPTS) -> None:
        self.argv = [str(java_binary()), *jvm_opts, "-cp", streams_classpath(),
                     main_class, *args]
        self.log_path = log_path
        self.lines: list[Json] = []
        self._lock = threading.Lock()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            log.write(f"===== {' '.join(self.argv)}\n".encode())
            log.flush()
            self._proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL,
                                          stdout=subprocess.PIPE, stderr=log, text=True)
        _LIVE_CLIENTS.add(self)
        self._reader = threading.Thread(target=self._read, name=f"stdout-{main_class}",
                                        daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for raw in self._proc.stdout:
            with contextlib.suppress(ValueError):
                line = json.loads(raw)
                if isinstance(line, dict):
                    with self._lock:
                        self.lines.append(line)

    def snapshot(self) -> list[Json]:
        with self._lock:
            return list(self.lines)

    @property
    def returncode(self) -> int | None:
        return self._proc.poll()

    def wait_for(self, predicate: Callable[[list[Json]], bool], timeout: float,
                 what: str) -> list[Json]:
        """Poll until ``predicate(lines)`` holds; AssertionError (with stderr) otherwise,
        also when the process exits first without it."""
        deadline = time.monotonic() + timeout
        while True:
            lines = self.snapshot()
            if predicate(lines):
                return lines
            exited = self._proc.poll()
            if exited is not None:
                self._reader.join(5)
                lines = self.snapshot()
                if predicate(lines):
                    return lines
            if exited is not None or time.monotonic() >= deadline:
                state = f"exited with {exited}" if exited is not None else f"after {timeout}s"
                raise AssertionError(f"{self.argv[-1]}...: no {what} ({state}); last lines "
                                     f"{lines[-3:]}\n{self.log_tail()}")
            time.sleep(0.05)

    def wait(self, timeout: float) -> int:
        """Wait for the program to exit by itself; returns its exit code."""
        code = self._proc.wait(timeout)
        self._reader.join(5)
        _LIVE_CLIENTS.discard(self)
        return code

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM and wait; the JVM's 143 (128 + SIGTERM, after its shutdown hooks ran) is
        a clean stop and returned as 0, as ``KafkaProcess.stop`` does."""
        if self._proc.poll() is None:
            self._proc.terminate()
        code = self.wait(timeout)
        return 0 if code == _SIGTERM_EXIT else code

    def kill(self) -> int:
        if self._proc.poll() is None:
            self._proc.kill()
        return self.wait(30)

    def log_tail(self, lines: int = 40) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


_LIVE_CLIENTS: set[JavaClient] = set()


@atexit.register
def _kill_clients() -> None:
    for client in list(_LIVE_CLIENTS):
        client.kill()


def describe(jvm_opts: Sequence[str] = BROKER_JVM_OPTS) -> str:
    """One line for reports: version, how it runs, the JVM settings."""
    return (f"Apache Kafka {KAFKA_VERSION} (assembled from Maven artifacts; one KRaft "
            f"broker+controller; JVM: {' '.join(jvm_opts)})")


class KafkaProcess(ServerProcess):
    """One Apache Kafka 4.4 JVM, broker and controller of a single-node KRaft cluster."""

    name = "kafka"

    def __init__(
        self,
        data_dir: Path,
        *,
        port: int | None = None,
        controller_port: int | None = None,
        host: str = LOOPBACK,
        configs: Mapping[str, str] | None = None,
        log_path: Path | None = None,
        jvm_opts: Sequence[str] = BROKER_JVM_OPTS,
        start_timeout: float = 60.0,
        stop_timeout: float = 60.0,
    ) -> None:
        self.data_dir = Path(data_dir)
        super().__init__(
            log_path=log_path or self.data_dir.parent / "kafka.log",
            ready_pattern=READY,
            start_timeout=start_timeout,
            stop_timeout=stop_timeout,
        )
        self.java = java_binary()
        self.classpath = broker_classpath()
        self.host = host
        self._auto_ports = port is None and controller_port is None
        self.port = free_port(host) if port is None else port
        self.controller_port = free_port(host) if controller_port is None else controller_port
        self.configs = dict(configs or {})
        self.jvm_opts = list(jvm_opts)
        self.cluster_id = _cluster_id()

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def log_dir(self) -> Path:
        return self.data_dir / "kraft"

    @property
    def properties_path(self) -> Path:
        return self.data_dir / "server.properties"

    def server_properties(self) -> dict[str, str]:
        """The broker's configuration: listeners, quorum, log dir, single-node settings."""
        return {
            "process.roles": "broker,controller",
            "node.id": str(NODE_ID),
            "controller.quorum.voters": f"{NODE_ID}@{self.host}:{self.controller_port}",
            "listeners": f"PLAINTEXT://{self.bootstrap},"
                         f"CONTROLLER://{self.host}:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{self.bootstrap}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(self.log_dir),
            **SINGLE_NODE_CONFIGS,
            **self.configs,
        }

    def _java(self, main_class: str, *args: str) -> list[str]:
        return [str(self.java), *self.jvm_opts,
                f"-Dlog4j2.configurationFile={LOG4J2_CONFIG}",
                "-cp", self.classpath, main_class, *args]

    def argv(self) -> list[str]:
        return self._java("kafka.Kafka", str(self.properties_path))

    def _write_properties(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        lines = [f"{key}={value}" for key, value in self.server_properties().items()]
        self.properties_path.write_text("\n".join(lines) + "\n")

    def _format(self) -> None:
        """``StorageTool format`` the log dir once; a formatted dir keeps its cluster id."""
        if (self.log_dir / "meta.properties").exists():
            return
        argv = self._java("kafka.tools.StorageTool", "format",
                          # '=': a random id may begin with '-', which would read as an option
                          f"--cluster-id={self.cluster_id}",
                          "--config", str(self.properties_path))
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            log.write(f"===== format: {' '.join(argv)}\n".encode())
            log.flush()
            code = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=log,
                                  stderr=subprocess.STDOUT, check=False).returncode
        if code != 0:
            raise ServerStartError(f"kafka StorageTool format exited with {code}",
                                   log=self.log_text(), address_in_use=False)

    def on_ready(self, match: re.Match[str]) -> None:
        if not wait_for_port(self.host, self.port, self.start_timeout):
            raise ServerStartError(
                f"kafka said it started but {self.bootstrap} does not accept connections",
                log=self.log_text(since_start=True),
                address_in_use=False,
            )

    def start(self, *, wait_ready: bool = True) -> KafkaProcess:
        self._write_properties()
        self._format()
        try:
            return super().start(wait_ready=wait_ready)
        except ServerStartError as exc:
            if not (exc.address_in_use and self._auto_ports and self.starts == 1):
                raise
            self.port = free_port(self.host)
            self.controller_port = free_port(self.host)
            self._write_properties()
            return super().start(wait_ready=wait_ready)

    def stop(self, *, timeout: float | None = None, check: bool = True) -> int:
        """SIGTERM, wait, and return 0 for a clean stop.

        Kafka shuts down in its JVM shutdown hook, after which the JVM reports the signal
        (exit code 143 = 128 + SIGTERM): that is a clean stop and is returned as 0, so that
        callers (fixtures, the benchmark) can treat Kafka like any other server.
        """
        code = super().stop(timeout=timeout, check=False)
        if code == _SIGTERM_EXIT:
            return 0
        if check and code != 0:
            raise ServerStopError(
                f"kafka exited with code {code} after SIGTERM (expected 0 or 143)\n"
                f"{self.log_text(since_start=True)}"
            )
        return code


# Under pytest-xdist (`make test`: `--dist loadgroup`) every test that starts a reference
# Kafka JVM runs on one worker, so at most one of these 512 MB JVMs runs at a time. The
# ``kafka_factory`` fixture puts its users in the group (tests/conftest.py); a test that
# gets Kafka another way (``request.getfixturevalue``) is marked with it explicitly.
XDIST_GROUP = "reference-kafka"

KafkaFactory = Callable[..., KafkaProcess]
"""The ``kafka_factory`` fixture: ``(start=True, data_dir=None, **KafkaProcess kwargs)``."""


def _cluster_id() -> str:
    """A random KRaft cluster id: 16 random bytes, URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
