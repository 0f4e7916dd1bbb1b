"""Fixtures for cluster tests: ``network``, a fresh ``Network`` (oncelog/harness/netns.py);
``cluster`` / ``cluster_factory``, etcd plus N brokers (oncelog/harness/cluster.py);
``netns_cluster_factory``, the same with etcd and each broker in its own host of
``network`` (for network partitions between them).

Fails (never skips) with ``NetnsUnavailable`` when the run is not root or has no ``ip``.
Everything it made (namespaces, veth pairs, processes) is removed at teardown, whatever the
test did.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from oncelog.harness.broker import ConfigValue
from oncelog.harness.cluster import ClusterProcess
from oncelog.harness.etcd import EtcdProcess
from oncelog.harness.netns import Network
from tests.support.replicated import NumberedStream


@pytest.fixture
def network() -> Iterator[Network]:
    with Network() as net:
        yield net


ClusterFactory = Callable[..., ClusterProcess]


@pytest.fixture
def cluster_factory(
    request: pytest.FixtureRequest, tmp_path: Path, etcd: EtcdProcess
) -> Iterator[ClusterFactory]:
    """``cluster_factory(brokers=3, configs={...}, env={...}, **options)``: a started
    ClusterProcess on the module's etcd (its own key prefix), ``options`` (e.g.
    ``metrics=True``, ``proxied=True``) passed on; all killed at teardown, logs printed on
    failure."""
    yield from _clusters(request, lambda n, brokers, configs, env, options: ClusterProcess(
        tmp_path / f"cluster-{n}", brokers=brokers, configs=configs, etcd=etcd, env=env,
        **options))


@pytest.fixture
def netns_cluster_factory(
    request: pytest.FixtureRequest, tmp_path: Path, network: Network
) -> Iterator[ClusterFactory]:
    """``netns_cluster_factory(brokers=3, configs={...})``: a started ClusterProcess whose
    etcd and brokers each run in a host of ``network`` (hosts ``etcd``, ``b1``.., and
    ``client`` for the test); killed at teardown, logs printed on failure."""
    yield from _clusters(request, lambda n, brokers, configs, env, options: ClusterProcess(
        tmp_path / f"cluster-{n}", brokers=brokers, configs=configs, network=network,
        env=env, **options))


def _clusters(
    request: pytest.FixtureRequest,
    new: Callable[
        [int, int, Mapping[str, ConfigValue] | None, Mapping[str, str] | None,
         dict[str, Any]],
        ClusterProcess,
    ],
) -> Iterator[ClusterFactory]:
    made: list[ClusterProcess] = []

    def make(brokers: int = 3, configs: Mapping[str, ConfigValue] | None = None,
             env: Mapping[str, str] | None = None, **options: Any) -> ClusterProcess:
        cluster = new(len(made), brokers, configs, env, options)
        made.append(cluster)
        return cluster.start()

    failed_before = request.session.testsfailed
    try:
        yield make
    finally:
        failed = request.session.testsfailed > failed_before
        for cluster in made:
            if failed:
                print(cluster.logs())
            cluster.close()


@pytest.fixture
def cluster(cluster_factory: ClusterFactory) -> ClusterProcess:
    """Three brokers and etcd, with short session timeouts."""
    return cluster_factory()


@pytest.fixture
def streams() -> Iterator[list[NumberedStream]]:
    """Numbered producer streams a test starts; each one's thread is stopped at teardown."""
    made: list[NumberedStream] = []
    yield made
    for stream in made:
        stream._stop.set()
