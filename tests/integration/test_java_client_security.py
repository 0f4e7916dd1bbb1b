"""Apache Kafka's Java client (kafka-clients 4.4, oncelog.harness.TxnClient with a client
properties file) commits and reads back a transaction over SASL_SSL (SCRAM-SHA-512) and over
SSL, trusting the broker's CA from a PEM file (``ssl.truststore.type=PEM``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from java_txn import line_with, need_reference, run_txn_client

from oncelog.harness.net import LOOPBACK, free_port
from tests.conftest import BrokerFactory
from tests.support.names import unique_name, unique_topic
from tests.support.sasl_ssl import start_sasl_ssl_broker
from tests.support.tls import TlsMaterial

pytestmark = pytest.mark.integration

def java_transaction(bootstrap: str, client_config: Path) -> list[str]:
    """Commit one transaction of three records, abort one, and read back read_committed."""
    topic = unique_topic("java-sec")
    lines = run_txn_client("transactions", bootstrap, {
        "transactionalId": unique_name("java-sec"),
        "transactions": [{"records": [[topic, 0, f"v{i}"] for i in range(3)], "end": "commit"},
                         {"records": [[topic, 0, "aborted"]], "end": "abort"}],
    }, client_config=client_config)
    assert [line["end"] for line in lines if "transaction" in line] == ["commit", "abort"]
    lines = run_txn_client("consume", bootstrap, {"topics": [topic],
                                                  "isolation": "read_committed"},
                           client_config=client_config)
    return [value for _t, _p, _o, value in line_with(lines, "records")["records"]]


def truststore(tls: TlsMaterial) -> str:
    return f"ssl.truststore.type=PEM\nssl.truststore.location={tls.ca}\n"


def test_java_client_transaction_over_sasl_ssl(broker_factory: BrokerFactory,
                                               tls_material: TlsMaterial,
                                               tmp_path: Path) -> None:
    need_reference()
    broker = start_sasl_ssl_broker(broker_factory, tls_material)
    broker.add_scram_user("erik", "erik-secret")
    config = tmp_path / "client.properties"
    config.write_text(broker.properties("erik", "erik-secret"))
    assert java_transaction(broker.bootstrap, config) == ["v0", "v1", "v2"]
    assert "on SASL_SSL authenticated as User:erik (SCRAM-SHA-512)" in \
        broker.process.log_path.read_text()


def test_java_client_transaction_over_ssl_with_pem_truststore(
        broker_factory: BrokerFactory, tls_material: TlsMaterial, tmp_path: Path) -> None:
    need_reference()
    port = free_port(LOOPBACK)
    broker_factory(configs={**tls_material.broker_configs(),
                            "listeners": f"SSL://{LOOPBACK}:{port}"})
    config = tmp_path / "client.properties"
    config.write_text("security.protocol=SSL\n" + truststore(tls_material))
    assert java_transaction(f"{LOOPBACK}:{port}", config) == ["v0", "v1", "v2"]
