"""Test certificates for TLS tests (issue 17), made with trustme: a test CA, a broker
certificate for 127.0.0.1 / localhost, client certificates, and an unrelated CA whose
certificates nobody trusts. Everything is written as PEM files under one directory, the
form oncelog (ssl.keystore.type=PEM / ssl.truststore.type=PEM), librdkafka and the Java
client (PEM stores) read.

Use the ``tls_material`` fixture (tests/conftest.py), or ``TlsMaterial.create(dir)``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import trustme

CLIENT_SUBJECT = "alice"
CLIENT_ORG = "Example Corp"
CLIENT_DN = f"CN={CLIENT_SUBJECT},OU=eng,O={CLIENT_ORG}"  # RFC 2253, as the broker names it


@dataclass(frozen=True)
class TlsMaterial:
    """PEM paths: ``ca`` (the trusted CA bundle), ``broker`` (chain + key of the broker),
    ``client`` (chain + key of a client whose subject is CLIENT_DN), and ``rogue_ca`` /
    ``rogue_client``: a CA and a client certificate nobody trusts."""

    directory: Path
    ca: Path
    broker: Path
    client: Path
    client_cert: Path
    client_key: Path
    rogue_ca: Path
    rogue_client: Path

    @classmethod
    def create(cls, directory: Path) -> TlsMaterial:
        directory.mkdir(parents=True, exist_ok=True)
        ca = trustme.CA(organization_name="oncelog test CA")
        rogue = trustme.CA(organization_name="rogue CA")
        broker = ca.issue_cert("127.0.0.1", "localhost", common_name="oncelog-broker")
        client = ca.issue_cert(
            "client.example", common_name=CLIENT_SUBJECT,
            organization_name=CLIENT_ORG, organization_unit_name="eng",
        )
        rogue_client = rogue.issue_cert("client.example", common_name="mallory")
        paths = {name: directory / f"{name}.pem" for name in (
            "ca", "broker", "client", "client-cert", "client-key", "rogue-ca", "rogue-client")}
        ca.cert_pem.write_to_path(str(paths["ca"]))
        rogue.cert_pem.write_to_path(str(paths["rogue-ca"]))
        broker.private_key_and_cert_chain_pem.write_to_path(str(paths["broker"]))
        client.private_key_and_cert_chain_pem.write_to_path(str(paths["client"]))
        rogue_client.private_key_and_cert_chain_pem.write_to_path(str(paths["rogue-client"]))
        paths["client-cert"].write_bytes(b"".join(b.bytes() for b in client.cert_chain_pems))
        client.private_key_pem.write_to_path(str(paths["client-key"]))
        return cls(directory, paths["ca"], paths["broker"], paths["client"],
                   paths["client-cert"], paths["client-key"], paths["rogue-ca"],
                   paths["rogue-client"])

    def broker_configs(self, **extra: str) -> dict[str, str]:
        """The ssl.* broker configs of an SSL listener with this material."""
        return {
            "ssl.keystore.location": str(self.broker),
            "ssl.keystore.type": "PEM",
            "ssl.truststore.location": str(self.ca),
            "ssl.truststore.type": "PEM",
            **extra,
        }
