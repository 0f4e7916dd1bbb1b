"""``oncelog verify --bootstrap-server <SASL_SSL broker> --command-config FILE``: the setup,
every worker (oncelog.client and confluent-kafka, which gets the Java names translated) and
the final read log in with the file's client configs, so a secured deployment is verified
as any other."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from oncelog.client import Admin
from oncelog.verify import java_worker
from oncelog.verify.history import OK, Op, parse_lines, read_history
from tests.conftest import BrokerFactory
from tests.support.cli import oncelog_cli
from tests.support.sasl_ssl import SaslSslBroker, start_sasl_ssl_broker
from tests.support.tls import TlsMaterial

pytestmark = pytest.mark.integration


def verifier_broker(broker_factory: BrokerFactory, tls: TlsMaterial, tmp_path: Path
                    ) -> tuple[SaslSslBroker, Path]:
    """A SASL_SSL broker with the SCRAM user ``verifier`` and its client properties file."""
    broker = start_sasl_ssl_broker(broker_factory, tls)
    broker.add_scram_user("verifier", "verifier-secret")
    config = tmp_path / "client.properties"
    config.write_text(broker.properties("verifier", "verifier-secret"))
    return broker, config


def test_verify_a_sasl_ssl_deployment(broker_factory: BrokerFactory,
                                      tls_material: TlsMaterial, tmp_path: Path) -> None:
    broker, config = verifier_broker(broker_factory, tls_material, tmp_path)
    report = tmp_path / "report"
    done = oncelog_cli("verify", "--bootstrap-server", broker.bootstrap,
                       "--command-config", str(config), "--duration", "8s", "--seed", "3",
                       "--clients", "oncelog,confluent-kafka", "--concurrency", "2",
                       "--partitions", "2", "--report", str(report), timeout=120)
    logs = "".join(p.read_text(errors="replace") for p in (report / "logs").glob("*.log"))
    assert done.returncode == 0, done.stdout + done.stderr + logs[-4000:]
    assert json.loads((report / "results.json").read_text())["valid"] is True
    history = read_history(report / "history.jsonl")
    assert history.final is not None and history.final.complete
    assert {op.client for op in history.ops if op.outcome == OK} == {
        "oncelog", "confluent-kafka"}
    assert "on SASL_SSL authenticated as User:verifier (SCRAM-SHA-512)" in \
        broker.process.log_path.read_text()
    assert "verifier-secret" not in logs + done.stdout + done.stderr


def test_java_verify_worker_logs_in_with_command_config(
        broker_factory: BrokerFactory, tls_material: TlsMaterial, tmp_path: Path) -> None:
    """The Java worker (VerifyWorker, as the runner starts it for ``--clients java``) takes
    the same ``--command-config`` and commits transactions over SASL_SSL."""
    try:
        classpath = java_worker.classpath(None)
    except java_worker.JavaWorkerMissing as exc:
        pytest.fail(str(exc), pytrace=False)
    broker, config = verifier_broker(broker_factory, tls_material, tmp_path)
    prefix = f"verify-java-sasl-{uuid.uuid4().hex[:8]}"
    with Admin({"bootstrap.servers": broker.bootstrap,
                **broker.java_configs("verifier", "verifier-secret")}) as admin:
        admin.create_topic(f"{prefix}-in", 2)
        admin.create_topic(f"{prefix}-out", 2)
    out = tmp_path / "java.jsonl"
    argv = java_worker.argv([
        "--bootstrap", broker.bootstrap, "--command-config", str(config), "--process", "1",
        "--slot", "1", "--seed", "7", "--input", f"{prefix}-in", "--output", f"{prefix}-out",
        "--partitions", "2", "--group", f"{prefix}-group", "--transactional-id",
        f"{prefix}-tx-1", "--out", str(out), "--started-at", repr(time.time())], classpath)
    with open(tmp_path / "java.log", "wb") as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 60
        while not [op for op in _ops(out) if op.outcome == OK]:
            assert proc.poll() is None and time.monotonic() < deadline, \
                (tmp_path / "java.log").read_text()[-3000:]
            time.sleep(0.2)  # polling the worker's history file
    finally:
        proc.kill()
        proc.wait()
    assert {op.client for op in _ops(out)} == {"java"}


def _ops(path: Path) -> list[Op]:
    if not path.exists():
        return []
    return [x for x in parse_lines(path.read_text().splitlines()) if isinstance(x, Op)]
