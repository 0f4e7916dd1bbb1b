"""Shared fixtures: real ``oncelog serve`` processes and a fault-injecting proxy.

- ``broker``: a fresh broker (own data dir under tmp_path) for one test.
- ``broker_factory(**kwargs)``: start several brokers or custom configs; see ``BrokerProcess``.
- ``shared_broker``: one broker for the whole session; isolate tests by ``unique_topic()``.
- ``proxied_broker``: a fresh broker whose clients go through a ``FaultProxy``.
- ``kafka_factory(**kwargs)`` / ``kafka_broker``: Apache Kafka 4.4 as a reference broker
  (``KafkaProcess``, tests/support/kafka.py). Without Java or the cache (``make reference``)
  they fail with a message saying so: they never skip.
- ``etcd``: one etcd for the test module (oncelog/harness/etcd.py); tests keep apart by key
  prefix (``unique_prefix()``). Fails, never skips, without etcd (``make etcd``).
- ``kafkajs_admin(bootstrap, operations)``: KafkaJS's admin client through
  tests/js/admin_runner.js (tests/support/kafkajs.py); fails, never skips, without node or
  ``make js``.

Under pytest-xdist (``make test`` runs ``pytest -n 3 --dist loadgroup``) each worker has its
own session: session fixtures (``shared_broker``, the Spark session) are per worker, ports
are free ports, data dirs are under each worker's tmp_path. Tests that must not run
concurrently with each other share an ``xdist_group`` (the reference Kafka's, below; the
Spark tests', tests/spark/conftest.py).

Every process a fixture started is killed (SIGKILL) at teardown, whatever the test did; when
the test failed, the broker's log is printed so it shows up in the report.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest

# Make ``tests.support`` importable however pytest was started (there is no tests/__init__.py,
# so pytest itself only puts this directory on sys.path, not the repository root).
_REPO_ROOT = str(Path(__file__).resolve().parents[1])
if _REPO_ROOT not in sys.path:
    sys.path.insert(0, _REPO_ROOT)

from oncelog.harness.broker import BrokerProcess  # noqa: E402
from oncelog.harness.etcd import EtcdMissing, EtcdProcess, start_etcd  # noqa: E402
from oncelog.harness.fault_proxy import FaultProxy  # noqa: E402
from tests.support.cpu_accounting import pytest_runtest_protocol  # noqa: E402, F401
from tests.support.kafka import (  # noqa: E402
    TEST_BROKER_JVM_OPTS,
    KafkaFactory,
    KafkaProcess,
    ReferenceKafkaMissing,
    require_reference,
)
from tests.support.kafka import XDIST_GROUP as KAFKA_XDIST_GROUP  # noqa: E402
from tests.support.kafkajs import KafkaJSAdmin, KafkaJSMissing  # noqa: E402
from tests.support.kafkajs import node_binary as kafkajs_node  # noqa: E402
from tests.support.kafkajs import run_admin as kafkajs_run_admin  # noqa: E402
from tests.support.names import unique_topic  # noqa: E402
from tests.support.tls import TlsMaterial  # noqa: E402

__all__ = ["unique_topic"]

@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Puts every test that starts the reference Kafka (``kafka_factory``, also behind
    ``kafka_broker``) in one pytest-xdist group: with ``--dist loadgroup`` (``make test``)
    they all run on one worker, so only one Kafka JVM runs at a time. First, so that
    xdist's own hook sees the mark when it names the groups."""
    for item in items:
        if "kafka_factory" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.xdist_group(KAFKA_XDIST_GROUP))


_REPORT_KEY = pytest.StashKey[dict[str, pytest.TestReport]]()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    item.stash.setdefault(_REPORT_KEY, {})[report.when] = report
    return report


def _test_failed(request: pytest.FixtureRequest) -> bool:
    reports = request.node.stash.get(_REPORT_KEY, {})
    return any(report.failed for report in reports.values())


def _dump_log(broker: BrokerProcess | KafkaProcess | EtcdProcess) -> None:
    print(f"\n===== {broker!r}: last lines of {broker.log_path} =====")
    print(broker.log_tail(300))


BrokerFactory = Callable[..., BrokerProcess]
P = TypeVar("P", BrokerProcess, KafkaProcess)


def _process_factory(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    cls: type[P],
    prefix: str,
    defaults: dict[str, Any] | None = None,
) -> Iterator[Callable[..., P]]:
    """The body of a ``*_factory`` fixture: ``make(start=True, data_dir=None, **kwargs)``
    builds ``cls(data_dir, **defaults, **kwargs)`` (a fresh data dir unless given), starts
    it; at teardown every process is killed and, if the test failed, its log printed."""
    started: list[P] = []

    def make(*, start: bool = True, data_dir: Path | None = None, **kwargs: Any) -> P:
        if data_dir is None:
            data_dir = tmp_path_factory.mktemp(prefix) / "data"
        server = cls(data_dir, **{**(defaults or {}), **kwargs})
        started.append(server)
        return server.start() if start else server

    yield make
    failed = _test_failed(request)
    for server in started:
        server.kill()
        if failed:
            _dump_log(server)


@pytest.fixture
def broker_factory(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BrokerFactory]:
    """``broker_factory(configs={...}, start=True, **BrokerProcess kwargs) -> BrokerProcess``.

    Each call gets its own data dir unless ``data_dir`` is given.
    """
    yield from _process_factory(request, tmp_path_factory, BrokerProcess, "broker")


@pytest.fixture
def broker(broker_factory: BrokerFactory) -> BrokerProcess:
    """A fresh ``oncelog serve`` with default configuration."""
    return broker_factory()


@pytest.fixture(scope="session")
def shared_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for the session: tests must use their own topics (``unique_topic()``).
    A group's first member starts at once (group.initial.rebalance.delay.ms=0, as the
    reference Kafka runs in tests/support/kafka.py and Kafka's own test harnesses), not 3 s
    later: the delay is the unit tests' subject (tests/unit/coordinator), not these tests'."""
    broker = BrokerProcess(tmp_path_factory.mktemp("shared-broker") / "data",
                           configs={"group.initial.rebalance.delay.ms": 0})
    try:
        broker.start()
        yield broker
    finally:
        broker.kill()


@dataclass
class ProxiedBroker:
    broker: BrokerProcess
    proxy: FaultProxy

    @property
    def bootstrap(self) -> str:
        """The proxy's address: what clients under test should connect to."""
        return self.proxy.bootstrap


@pytest.fixture
def proxied_broker(broker_factory: BrokerFactory) -> Iterator[ProxiedBroker]:
    """A fresh broker advertising a ``FaultProxy`` in front of it (see fault_proxy.py).

    The broker picks its own port (``BrokerProcess`` tries a second free port when another
    xdist worker took the first before the broker bound it); the proxy, whose listening
    port is its own from the start, is pointed at it before any client connects."""
    with FaultProxy("127.0.0.1", 0) as proxy:
        broker = broker_factory(advertised=proxy.bootstrap)
        proxy.upstream_port = broker.port
        yield ProxiedBroker(broker, proxy)


@pytest.fixture
def kafka_factory(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KafkaFactory]:
    """``kafka_factory(start=True, **KafkaProcess kwargs) -> KafkaProcess`` (Kafka 4.4).

    Each call gets its own data dir (log dirs, server.properties) unless ``data_dir`` is
    given. Fails the test, never skips it, when Java or the reference cache is missing.
    """
    try:
        require_reference()
    except ReferenceKafkaMissing as exc:
        pytest.fail(f"reference Kafka unavailable: {exc}", pytrace=False)
    yield from _process_factory(request, tmp_path_factory, KafkaProcess, "kafka",
                                {"jvm_opts": TEST_BROKER_JVM_OPTS})


@pytest.fixture
def kafka_broker(kafka_factory: KafkaFactory) -> KafkaProcess:
    """A fresh Apache Kafka 4.4 broker (single KRaft node) with the single-node defaults."""
    return kafka_factory()



@pytest.fixture(scope="module")
def etcd(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[EtcdProcess]:
    """One etcd member on loopback for the module, killed at teardown; its log is printed
    if a test of the module failed."""
    try:
        process = start_etcd(tmp_path_factory.mktemp("etcd"))
    except EtcdMissing as exc:
        pytest.fail(f"etcd unavailable: {exc}", pytrace=False)
    failed_before = request.session.testsfailed
    try:
        yield process
    finally:
        process.kill()
        if request.session.testsfailed > failed_before:
            _dump_log(process)


@pytest.fixture(scope="session")
def kafkajs_admin() -> KafkaJSAdmin:
    """``kafkajs_admin(bootstrap, operations) -> outcomes`` (``tests.support.kafkajs``).

    Fails the test, never skips it, when node or KafkaJS (``make js``) is missing.
    """
    try:
        kafkajs_node()
    except KafkaJSMissing as exc:
        pytest.fail(f"KafkaJS unavailable: {exc}", pytrace=False)
    return kafkajs_run_admin


@pytest.fixture(scope="session")
def tls_material(tmp_path_factory: pytest.TempPathFactory) -> TlsMaterial:
    """Test certificates as PEM files (``tests.support.tls``): a CA, a broker certificate
    for 127.0.0.1/localhost, a client certificate, and an untrusted CA and client."""
    return TlsMaterial.create(tmp_path_factory.mktemp("tls"))
