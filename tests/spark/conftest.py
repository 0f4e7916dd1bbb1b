"""Fixtures of the Spark connector tests: one two-phase-commit broker and (for the tests that
need it) one local SparkSession for the whole session: the JVM takes seconds to start.

Every test here is marked ``spark``; run them with ``pytest tests/spark`` (or ``-m spark``).
Under pytest-xdist they are all in the ``spark`` group (one worker, one JVM).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from oncelog.harness.broker import BrokerProcess
from tests.support.kafka import cache_dir

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

# Every Spark JVM of the tests (the session's and each pipeline's spark-submit, which inherit
# this environment) runs with the C1 compiler only, as the Java harness programs do: a Spark
# application that lives for seconds to minutes never pays back C2's compilations — a
# session start and a small job took 45 s of CPU with both compilers, 25 s with C1 alone.
# Nothing a test checks depends on it; user applications keep their JVM's defaults.
TEST_SUBMIT_ARGS = "--conf spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1"
os.environ.setdefault("PYSPARK_SUBMIT_ARGS", f"{TEST_SUBMIT_ARGS} pyspark-shell")

# Spark's own Kafka connector, fetched by `make reference` (tests/spark/connector/pom.xml).
SPARK_KAFKA_VERSION = "4.2.0"


def spark_kafka_jars() -> list[Path]:
    """The connector's jars in the reference cache; empty when `make reference` has not run."""
    return sorted((cache_dir() / f"spark-kafka-{SPARK_KAFKA_VERSION}").glob("*.jar"))


TPC_CONFIGS = {
    "transaction.two.phase.commit.enable": True,
    "group.initial.rebalance.delay.ms": 0,
}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "spark: needs pyspark (and a JVM for most tests)")


# Under pytest-xdist (`make test`: `--dist loadgroup`) every Spark test runs on one worker:
# one SparkSession JVM for them all, and never two Spark JVMs (the session's and a
# pipeline's spark-submit) from different workers at once on the shared cores.
XDIST_GROUP = "spark"


@pytest.hookimpl(tryfirst=True)  # before xdist's hook, which names the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(pytest.mark.spark)
            item.add_marker(pytest.mark.xdist_group(XDIST_GROUP))


@pytest.fixture(scope="session")
def tpc_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker with two-phase commit enabled; tests use their own topics."""
    broker = BrokerProcess(tmp_path_factory.mktemp("spark-broker") / "data", configs=TPC_CONFIGS)
    try:
        broker.start()
        yield broker
    finally:
        broker.kill()


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """A ``local[2]`` SparkSession with the ``oncelog`` format registered, and Spark's own
    ``kafka`` format when its jars are in the cache: jars must be on the JVM's classpath
    from its start (``ADD JAR`` does not make a data source findable), and one JVM serves
    every Spark test."""
    from examples.payments.pipeline import build_spark

    jars = spark_kafka_jars()
    if jars:
        os.environ["PYSPARK_SUBMIT_ARGS"] = (
            f"{TEST_SUBMIT_ARGS} --jars {','.join(map(str, jars))} pyspark-shell"
        )

    session = build_spark("local[2]", shuffle_partitions=2)
    try:
        yield session
    finally:
        session.stop()
