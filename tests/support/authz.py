"""A broker with the StandardAuthorizer for the authorization tests (issue 17), shared by
every test module of the per-request checks.

One ``oncelog serve`` per test module (``authz_broker(request, tmp_path_factory)`` is the
body of a module-scoped fixture) with:

- a SASL_PLAINTEXT listener (``AuthzBroker.bootstrap``) taking PLAIN for the super user
  ``admin`` (``super.users=User:admin``) and SCRAM-SHA-256/512 for users created on demand
  (``user()``: a fresh SCRAM-SHA-512 user, so each test row has a principal of its own);
- the harness's own PLAINTEXT listener (``plaintext``), where every client is
  ``User:ANONYMOUS`` (no ACL names it, so it may do nothing);
- ``authorizer.class.name`` = StandardAuthorizer, ``allow.everyone.if.no.acl.found`` false.

ACLs are granted and revoked by ``admin`` with CreateAcls / DeleteAcls (``grant`` /
``revoke``); the broker applies them before it answers, so a request sent after ``grant``
returns sees them. Client settings for a user: ``confluent(user)`` (confluent-kafka),
``oncelog(user)`` (oncelog.client), ``java(user)`` / ``java_properties(user, path)`` (the
Java client and Kafka's tools), and ``raw(user)``: a raw protocol connection
(``oncelog.harness.rawkafka``) logged in with SCRAM, for what no client sends.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest
from confluent_kafka import KafkaError, KafkaException

from oncelog.client import Admin
from oncelog.client.admin import ScramUpsertion
from oncelog.client.errors import KafkaClientError
from oncelog.client.wire import request as wire_request
from oncelog.errors import ErrorCode
from oncelog.harness.broker import BrokerProcess
from oncelog.harness.net import LOOPBACK, free_port
from oncelog.harness.rawkafka import RawConnection
from oncelog.protocol import versions as api
from oncelog.security.acl import (
    AUTHORIZER_CLASS,
    CLUSTER_NAME,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from oncelog.security.credentials import MECHANISMS
from oncelog.security.scram import ScramClient
from tests.support.names import unique_name

ADMIN = "admin"
ADMIN_PASSWORD = "admin-pw"
MECHANISM = "SCRAM-SHA-512"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
PLAIN_JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
              f'user_{ADMIN}="{ADMIN_PASSWORD}";')


def password_of(user: str) -> str:
    return f"{user}-pw"


def principal(user: str) -> str:
    """``alice`` -> ``User:alice`` (a principal given whole is kept)."""
    return user if ":" in user else f"User:{user}"


@dataclass
class AuthzBroker:
    process: BrokerProcess
    bootstrap: str  # SASL_PLAINTEXT
    _admin: Admin | None = field(default=None, repr=False)

    @property
    def plaintext(self) -> str:
        """The harness's PLAINTEXT listener: every client there is ``User:ANONYMOUS``."""
        return self.process.bootstrap

    @property
    def admin(self) -> Admin:
        """oncelog.client's Admin logged in as the super user."""
        if self._admin is None:
            self._admin = Admin(self.oncelog(ADMIN, mechanism="PLAIN"))
        return self._admin

    def close(self) -> None:
        if self._admin is not None:
            self._admin.close()
            self._admin = None

    # ------------------------------------------------------------------ users

    def user(self, prefix: str = "u") -> str:
        """A new SCRAM-SHA-512 user (password ``password_of(name)``); its name."""
        name = unique_name(prefix)
        errors = self.admin.alter_user_scram_credentials(
            [ScramUpsertion(name, MECHANISM, password_of(name))])
        assert errors == {name: None}, errors
        return name

    # ------------------------------------------------------------------- ACLs

    def grant(self, user: str, resource_type: ResourceType, name: str,
              *operations: AclOperation, pattern: PatternType = PatternType.LITERAL,
              permission: AclPermissionType = AclPermissionType.ALLOW,
              host: str = "*") -> None:
        """Create an ACL per operation for ``user`` (a name or a principal) on the
        resource, as ``admin`` (CreateAcls)."""
        bindings = [AclBinding.of(resource_type, name, pattern, principal(user), host, op,
                                  permission) for op in operations]
        results = self.admin.create_acls(bindings)
        assert all(error is None for error in results.values()), results

    def revoke(self, user: str, resource_type: ResourceType, name: str,
               *operations: AclOperation, pattern: PatternType = PatternType.LITERAL,
               permission: AclPermissionType = AclPermissionType.ALLOW,
               host: str = "*") -> None:
        """Delete the ACLs ``grant`` with the same arguments created (DeleteAcls)."""
        filters = [AclBindingFilter(resource_type, name, pattern, principal(user), host, op,
                                    permission) for op in operations]
        for result in self.admin.delete_acls(filters):
            assert isinstance(result, list), result

    # --------------------------------------------------------- client configs

    def confluent(self, user: str, **extra: Any) -> dict[str, Any]:
        """confluent-kafka (librdkafka) settings logging in as ``user``."""
        return {"bootstrap.servers": self.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": MECHANISM, "sasl.username": user,
                "sasl.password": password_of(user), **extra}

    def oncelog(self, user: str, *, mechanism: str = MECHANISM,
                **extra: Any) -> dict[str, Any]:
        """oncelog.client settings logging in as ``user``."""
        password = ADMIN_PASSWORD if user == ADMIN else password_of(user)
        return {"bootstrap.servers": self.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password,
                **extra}

    def java(self, user: str) -> dict[str, str]:
        """The Java client's settings (bootstrap apart) logging in as ``user``."""
        return {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": MECHANISM,
                "sasl.jaas.config":
                    f'{SCRAM_MODULE} required username="{user}" '
                    f'password="{password_of(user)}";'}

    def java_properties(self, user: str, path: Path) -> Path:
        """``java(user)`` written as a properties file (``--command-config`` and the
        harness's client config argument)."""
        path.write_text("".join(f"{k}={v}\n" for k, v in self.java(user).items()))
        return path

    def raw(self, user: str, *, client_id: str = "raw") -> RawConnection:
        """A raw connection logged in as ``user`` (SaslHandshake v1, SaslAuthenticate v2
        with SCRAM-SHA-512); its requests carry ``client_id``."""
        conn = _RawConnection(self.bootstrap, client_id)
        try:
            handshake = conn.request(wire_request(api.SASL_HANDSHAKE, 1, mechanism=MECHANISM))
            assert handshake.error_code == ErrorCode.none, handshake
            scram = ScramClient(MECHANISMS[MECHANISM], user, password_of(user))
            token = scram.first()
            while not scram.complete:
                answer = conn.request(wire_request(api.SASL_AUTHENTICATE, 2, auth_bytes=token))
                assert answer.error_code == ErrorCode.none, answer
                token = scram.evaluate(bytes(answer.auth_bytes))
        except BaseException:
            conn.close()
            raise
        return conn


class _RawConnection(RawConnection):
    """A RawConnection whose requests carry ``client_id`` (a broker's, to test that a
    client id proves nothing)."""

    def __init__(self, bootstrap: str, client_id: str) -> None:
        super().__init__(bootstrap)
        self.client_id = client_id

    def header(self, api_key: int, version: int, flexible: bool,
               client_id: str = "raw") -> bytes:
        return super().header(api_key, version, flexible, self.client_id)


def authz_broker(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                 **configs: Any) -> Iterator[AuthzBroker]:
    """The body of a module-scoped fixture (``yield from authz_broker(request,
    tmp_path_factory)``): the broker above, with extra ``configs``; killed at the end, its
    log printed if a test of the module failed."""
    port = free_port(LOOPBACK)
    process = BrokerProcess(tmp_path_factory.mktemp("authz") / "data", configs={
        "authorizer.class.name": AUTHORIZER_CLASS,
        "super.users": principal(ADMIN),
        "listeners": f"SASL_PLAINTEXT://{LOOPBACK}:{port}",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        **configs})
    failed_before = request.session.testsfailed
    broker = AuthzBroker(process, f"{LOOPBACK}:{port}")
    try:
        process.start()
        yield broker
    finally:
        broker.close()
        process.kill()
        if request.session.testsfailed > failed_before:
            print(f"\n===== {process!r}: last lines of {process.log_path} =====")
            print(process.log_tail(300))


# -- what the test tables share -------------------------------------------------------

@dataclass
class Names:
    """A row's own user and resources."""

    user: str
    topic: str = field(default_factory=lambda: unique_name("t"))
    txn: str = field(default_factory=lambda: unique_name("tx"))
    group: str = field(default_factory=lambda: unique_name("g"))

    def resource(self, rtype: ResourceType) -> str:
        return {ResourceType.TOPIC: self.topic, ResourceType.TRANSACTIONAL_ID: self.txn,
                ResourceType.GROUP: self.group, ResourceType.CLUSTER: CLUSTER_NAME}[rtype]


def raised(call: Callable[[], Any]) -> KafkaError | KafkaClientError | None:
    """The error a client call ended with (None: it succeeded).

    confluent-kafka 2.16 raises a fatal error met while serving delivery callbacks (in
    ``flush``) as a SystemError caused by it (tests/integration/txn_clients.py): its cause
    is the error."""
    try:
        call()
    except KafkaClientError as exc:
        return exc
    except (KafkaException, SystemError) as exc:
        seen: object = exc
        while seen is not None:
            if isinstance(seen, KafkaException):
                return cast(KafkaError, seen.args[0])
            seen = getattr(seen, "__cause__", None) or getattr(seen, "__context__", None)
        raise
    return None


def error_name(err: KafkaError | KafkaClientError | None) -> str:
    """Kafka's name of a client's error (librdkafka's own for its local errors)."""
    if err is None:
        return "NONE"
    if isinstance(err, KafkaClientError):
        assert err.code is not None, err
        return err.code.name.upper()
    code = int(err.code())
    return ErrorCode(code).name.upper() if code >= 0 else str(err.name())


def outcome(call: Callable[[], Any]) -> str:
    """The Kafka error name a client call ended with ("NONE": it succeeded)."""
    return error_name(raised(call))


def admin_conf(b: AuthzBroker, **extra: Any) -> dict[str, Any]:
    """confluent-kafka settings of the super user (PLAIN)."""
    return b.confluent(ADMIN, **{"sasl.mechanism": "PLAIN", "sasl.password": ADMIN_PASSWORD,
                                 **extra})
