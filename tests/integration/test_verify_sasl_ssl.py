"""``oncelog verify --bootstrap-server <SASL_SSL broker> --command-config FILE``: the setup,
every worker (oncelog.client and confluent-kafka, which gets the Java names translated) and
the final read log in with the file's client configs, so a secured deployment is verified
as any other."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from oncelog.verify.history import OK, read_history
from tests.conftest import BrokerFactory
from tests.support.cli import oncelog_cli
from tests.support.sasl_ssl import start_sasl_ssl_broker
from tests.support.tls import TlsMaterial

pytestmark = pytest.mark.integration


def test_verify_a_sasl_ssl_deployment(broker_factory: BrokerFactory,
                                      tls_material: TlsMaterial, tmp_path: Path) -> None:
    broker = start_sasl_ssl_broker(broker_factory, tls_material)
    broker.add_scram_user("verifier", "verifier-secret")
    config = tmp_path / "client.properties"
    config.write_text(broker.properties("verifier", "verifier-secret"))
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
