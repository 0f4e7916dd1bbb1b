"""A broker whose only client listener is SASL_SSL (PLAIN for an ``admin``, SCRAM-SHA-256/512
for users the test adds), and the client settings that log in to it, for the tests of every
client over SASL_SSL (CLI, Java client, Spark connector, ``oncelog verify``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from oncelog.harness.broker import BrokerProcess
from oncelog.harness.net import LOOPBACK, free_port
from tests.support.tls import TlsMaterial

SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'user_admin="admin-secret";')
_MECHANISMS = {"SCRAM-SHA-256": ScramMechanism.SCRAM_SHA_256,
               "SCRAM-SHA-512": ScramMechanism.SCRAM_SHA_512}


@dataclass(frozen=True)
class SaslSslBroker:
    process: BrokerProcess
    bootstrap: str
    tls: TlsMaterial

    def add_scram_user(self, user: str, password: str,
                       mechanism: str = "SCRAM-SHA-512") -> None:
        """Create the user's SCRAM credential (as the PLAIN ``admin``, over SASL_SSL)."""
        admin = AdminClient({"bootstrap.servers": self.bootstrap,
                             "security.protocol": "SASL_SSL",
                             "ssl.ca.location": str(self.tls.ca), "sasl.mechanism": "PLAIN",
                             "sasl.username": "admin", "sasl.password": "admin-secret"})
        upsert = UserScramCredentialUpsertion(user, ScramCredentialInfo(
            _MECHANISMS[mechanism], 4096), password.encode())
        for future in admin.alter_user_scram_credentials([upsert]).values():
            future.result(timeout=30)

    def java_configs(self, user: str, password: str,
                     mechanism: str = "SCRAM-SHA-512") -> dict[str, str]:
        """The Java client's names (which oncelog.client and the CLI take too)."""
        return {"security.protocol": "SASL_SSL", "sasl.mechanism": mechanism,
                "sasl.jaas.config":
                    f'{SCRAM_MODULE} required username="{user}" password="{password}";',
                "ssl.truststore.type": "PEM", "ssl.truststore.location": str(self.tls.ca)}

    def properties(self, user: str, password: str, mechanism: str = "SCRAM-SHA-512") -> str:
        """``java_configs`` as a properties file's text (``--command-config``)."""
        return "".join(f"{k}={v}\n"
                       for k, v in self.java_configs(user, password, mechanism).items())


def start_sasl_ssl_broker(broker_factory: Callable[..., BrokerProcess], tls: TlsMaterial,
                          **configs: Any) -> SaslSslBroker:
    port = free_port(LOOPBACK)
    process = broker_factory(configs={
        **tls.broker_configs(),
        "listeners": f"SASL_SSL://{LOOPBACK}:{port}",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS, **configs})
    return SaslSslBroker(process, f"{LOOPBACK}:{port}", tls)
