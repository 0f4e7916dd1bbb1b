"""The reference Java client (kafka-clients 4.4) as an ``oncelog verify`` worker.

The worker is ``oncelog.harness.VerifyWorker`` (tests/java/harness), built with the rest of
the Java harness by ``make reference`` (tests/support/fetch_kafka.sh) into
``$ONCELOG_REFERENCE_CACHE`` or the repository's ``.cache``: ``harness-4.4.0/`` holds
``oncelog-harness.jar`` and its runtime classpath in ``libs/``. It takes the ``work`` flags
of ``python -m oncelog.verify.worker work`` except ``--client`` and writes the same
``invoke`` / ``op`` lines (client ``"java"``).
"""

from __future__ import annotations

import os
from pathlib import Path

KAFKA_CLIENTS_VERSION = "4.4.0"
# A small heap and the serial collector: four workers fit next to the brokers on a laptop
# (the default heap is a quarter of the machine's memory and a parallel collector per JVM).
JVM_OPTIONS = ("-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")
MAIN_CLASS = "oncelog.harness.VerifyWorker"
CLIENT = "java"
_REPO = Path(__file__).resolve().parents[2]


class JavaWorkerMissing(RuntimeError):
    """The Java harness is not built; the message says how to build it."""


def harness_dir() -> Path:
    cache = os.environ.get("ONCELOG_REFERENCE_CACHE") or str(_REPO / ".cache")
    return Path(cache) / f"harness-{KAFKA_CLIENTS_VERSION}"


def classpath(given: str | None) -> str:
    """``--java-classpath`` when given, else the built harness: its jar and ``libs/*``."""
    if given:
        return given
    harness = harness_dir()
    jar = harness / "oncelog-harness.jar"
    libs = harness / "libs"
    if not jar.is_file() or not any(libs.glob("kafka-clients-*.jar")):
        raise JavaWorkerMissing(
            f"the Java verify worker is not built ({jar} or {libs}/kafka-clients-*.jar is "
            "missing): run `make reference` in the oncelog repository (Java 17+ and Maven), "
            "or pass --java-classpath")
    return os.pathsep.join([str(jar), str(libs / "*")])


def argv(work_args: list[str], classpath: str) -> list[str]:
    """The worker's command line: the ``work`` flags of the Python worker minus ``--client``."""
    return ["java", *JVM_OPTIONS, "-cp", classpath, MAIN_CLASS, "work", *work_args]
