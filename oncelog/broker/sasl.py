"""SASL on the broker's SASL_PLAINTEXT / SASL_SSL listeners: the per-connection gate in front
of request dispatch (the state table is oncelog.security.sasl; mechanisms in
oncelog.security.scram and oncelog.security.sasl_plain).

``SaslConnection.on_frame(frame)`` returns ``None`` for a request of an authenticated
session (the server dispatches it as usual, as ``session``), or a ``Reply``: a frame to write
(or none) and whether to close afterwards. As Kafka's SaslServerAuthenticator and
SocketServer do:

- before authentication only ApiVersions (once) and SaslHandshake; anything else closes
  the connection without an answer; during the exchange anything but SaslAuthenticate is
  answered ILLEGAL_SASL_STATE and closed;
- an unknown mechanism is answered UNSUPPORTED_SASL_MECHANISM with the enabled list, then
  closed; a failed exchange is answered SASL_AUTHENTICATION_FAILED (a message without
  secrets; Kafka's generic one for bad credentials, so an unknown user looks like a wrong
  password), then closed;
- SaslHandshake v0 is followed by raw tokens without Kafka headers;
- with ``connections.max.reauth.ms`` the SaslAuthenticate answer carries the session
  lifetime; a request other than SaslHandshake after it ends closes the connection; a
  SaslHandshake re-authenticates with the same mechanism and principal (KIP-368);
- the whole authentication must end within ``connections.max.idle.ms`` of the connection
  being accepted (``deadline``), and before it no frame may exceed
  ``sasl.server.max.receive.size``.

Users: PLAIN from ``listener.name.<listener>.plain.sasl.jaas.config`` (``user_<name>``
options), SCRAM from the credential store.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from oncelog.broker.api import SUPPORTED
from oncelog.broker.listeners import enabled_mechanisms, inter_broker_protocol
from oncelog.config import BrokerConfig, ConfigError
from oncelog.errors import ErrorCode, KafkaError
from oncelog.protocol.build import make, response_module
from oncelog.protocol.codec import decode_request, encode_response, parse_request_header
from oncelog.protocol.error_response import error_response
from oncelog.security.credentials import MECHANISMS, CredentialStore
from oncelog.security.principal import KafkaPrincipal, Session
from oncelog.security.sasl import (
    API_VERSIONS,
    PLAIN,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    SUPPORTED_MECHANISMS,
    AuthenticationFailed,
    IllegalSaslState,
    InvalidCredentials,
    SaslError,
    SaslSession,
    ServerMechanism,
    State,
    UnsupportedMechanism,
    invalid_credentials_message,
)
from oncelog.security.sasl_plain import PlainServer, parse_jaas_config, plain_users_verifier
from oncelog.security.scram import ScramServer

if TYPE_CHECKING:  # the client's SASL login: only a broker of a cluster logs in to its peers
    from oncelog.client.sasl import SaslCredentials

log = logging.getLogger(__name__)

SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")


@dataclass(frozen=True, slots=True)
class Reply:
    frame: bytes | None
    close: bool


CLOSE = Reply(None, True)


def _handshake_response(version: int) -> type:
    return response_module(SASL_HANDSHAKE, version).SaslHandshakeResponse


def _authenticate_response(version: int) -> type:
    return response_module(SASL_AUTHENTICATE, version).SaslAuthenticateResponse


def jaas_config_name(listener: str, mechanism: str) -> str:
    return f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"


def plain_users(config: BrokerConfig, listener: str) -> dict[str, str]:
    """The PLAIN users of ``listener`` (none when its JAAS line is unset)."""
    text = config[jaas_config_name(listener, PLAIN)]
    return parse_jaas_config(text).plain_users if text else {}


def inter_broker_client_sasl(config: BrokerConfig) -> SaslCredentials | None:
    """This broker's SASL login towards the others (replica fetches, markers, forwarded
    requests) when the inter-broker listener is SASL_PLAINTEXT / SASL_SSL: the mechanism
    ``sasl.mechanism.inter.broker.protocol``, user and password from the ``username`` and
    ``password`` options of that listener's
    ``listener.name.<listener>.<mechanism>.sasl.jaas.config`` (as Kafka's login modules);
    None for a listener without SASL. ConfigError when they are missing."""
    listener, protocol = inter_broker_protocol(config)
    if protocol not in SASL_PROTOCOLS:
        return None
    mechanism = str(config["sasl.mechanism.inter.broker.protocol"])
    if mechanism not in SUPPORTED_MECHANISMS:
        raise ConfigError(f"sasl.mechanism.inter.broker.protocol: {mechanism} is not one of "
                          f"{', '.join(SUPPORTED_MECHANISMS)}")
    name = jaas_config_name(listener, mechanism)
    text = config[name]
    options = parse_jaas_config(text).options if text else {}
    if "username" not in options or "password" not in options:
        raise ConfigError(f"{name} must give username and password: this broker's login on "
                          f"the inter-broker listener {listener}")
    from oncelog.client.sasl import SaslCredentials

    return SaslCredentials(mechanism, options["username"], options["password"])


def _monotonic_ms() -> int:
    return int(time.monotonic() * 1000)


class SaslConnection:
    """One connection of a SASL listener."""

    def __init__(self, config: BrokerConfig, credentials: CredentialStore, listener: str,
                 protocol: str, host: str, clock_ms: Callable[[], int] = _monotonic_ms) -> None:
        self.listener = listener
        self.protocol = protocol
        self.host = host
        self._config = config
        self._credentials = credentials
        self._clock_ms = clock_ms
        self.state = SaslSession(enabled_mechanisms(config, listener),
                                 int(config["connections.max.reauth.ms"]))
        self.deadline_ms = clock_ms() + int(config["connections.max.idle.ms"])
        self.max_receive = int(config["sasl.server.max.receive.size"])
        self._failed_delay_s = int(config["connection.failed.authentication.delay.ms"]) / 1000
        self._authenticated_once = False
        self._mechanism: ServerMechanism | None = None

    @property
    def authenticated(self) -> bool:
        return self.state.authenticated

    def session(self) -> Session:
        assert self.state.username is not None
        return Session(KafkaPrincipal("User", self.state.username), self.host, self.listener,
                       self.protocol)

    def read_timeout_s(self, idle_s: float) -> float:
        """How long the next read may wait: until the authentication deadline if the
        connection is not authenticated yet."""
        if self.authenticated:
            return idle_s
        return max(0.0, (self.deadline_ms - self._clock_ms()) / 1000)

    def frame_limit(self, max_bytes: int) -> int:
        return max_bytes if self.authenticated else min(max_bytes, self.max_receive)

    async def on_frame(self, frame: bytes) -> Reply | None:
        """The gate's answer to a frame (None: the broker serves it). A connection closed
        for failing to authenticate, before it ever authenticated, gets its answer and its
        close ``connection.failed.authentication.delay.ms`` late, as Kafka's Selector delays
        them (a client retrying bad credentials in a loop is slowed down); a failed
        re-authentication is not delayed."""
        reply = await self._on_frame(frame)
        if self.state.authenticated:
            self._authenticated_once = True
        elif (reply is not None and reply.close and not self._authenticated_once
              and self._failed_delay_s > 0):
            await asyncio.sleep(self._failed_delay_s)
        return reply

    async def _on_frame(self, frame: bytes) -> Reply | None:
        if self.state.state is State.AUTHENTICATE and self.state.raw_tokens:
            return self._on_raw_token(frame)
        try:
            head = parse_request_header(frame)
        except KafkaError:
            return CLOSE
        if self.state.state is State.COMPLETE and head.api_key != SASL_HANDSHAKE:
            if self.state.expired(self._clock_ms()):
                log.info("closing connection from %s (User:%s): its SASL session expired "
                         "(connections.max.reauth.ms)", self.host, self.state.username)
                return CLOSE
            return None
        if head.api_key == API_VERSIONS and self.state.state is not State.AUTHENTICATE:
            low, high = SUPPORTED.get(API_VERSIONS, (0, 0))
            if not low <= head.api_version <= high:
                return None  # answered UNSUPPORTED_VERSION: the client retries lower (Kafka)
        during_exchange = self.state.state is State.AUTHENTICATE
        try:
            self.state.on_request(head.api_key)
        except IllegalSaslState as exc:
            log.warning("closing connection from %s: %s", self.host, exc.message)
            if during_exchange:
                return self._error_reply(frame, ErrorCode.illegal_sasl_state, exc.message)
            return CLOSE
        if head.api_key == API_VERSIONS:
            return None  # the broker's own ApiVersions answer
        try:
            header, request = decode_request(frame)
        except KafkaError as exc:
            log.warning("closing connection from %s: malformed SASL request: %s", self.host,
                        exc)
            return CLOSE
        if head.api_key == SASL_HANDSHAKE:
            return await self._on_handshake(header.api_version, header.correlation_id,
                                            request)
        return self._on_authenticate(header.api_version, header.correlation_id, request)

    async def _on_handshake(self, version: int, correlation_id: int, request: Any) -> Reply:
        enabled = list(self.state.enabled_mechanisms)
        mechanism = str(request.mechanism)
        try:
            self.state.on_handshake(mechanism, version)
        except UnsupportedMechanism:
            log.warning("closing connection from %s: unsupported SASL mechanism %r (enabled: "
                        "%s)", self.host, mechanism[:64], ",".join(enabled))
            return Reply(self._encode(SASL_HANDSHAKE, version, correlation_id, make(
                _handshake_response(version), error_code=ErrorCode.unsupported_sasl_mechanism,
                mechanisms=enabled)), close=True)
        except AuthenticationFailed as exc:  # re-authentication with another mechanism
            log.warning("closing connection from %s: %s", self.host, exc.message)
            return CLOSE
        if mechanism != PLAIN:
            await self._refresh_credentials()
        self._mechanism = self._new_mechanism(mechanism)
        answer: Any = make(_handshake_response(version), error_code=ErrorCode.none,
                           mechanisms=enabled)
        return Reply(self._encode(SASL_HANDSHAKE, version, correlation_id, answer), close=False)

    async def _refresh_credentials(self) -> None:
        """The latest SCRAM credentials (a cluster's may have changed at another broker);
        if the store cannot be read, the ones known so far."""
        try:
            await self._credentials.refresh()
        except Exception as exc:
            log.warning("SCRAM credentials not refreshed (%s); using the ones known", exc)

    def _new_mechanism(self, mechanism: str) -> ServerMechanism:
        if mechanism == PLAIN:
            return PlainServer(plain_users_verifier(plain_users(self._config, self.listener)))
        scram = MECHANISMS[mechanism]
        store = self._credentials
        return ScramServer(scram, lambda user: store.lookup(user, scram.name))

    def _evaluate(self, token: bytes) -> tuple[bytes, int]:
        """The mechanism's answer and, once complete, the session lifetime."""
        assert self._mechanism is not None
        answer = self._mechanism.evaluate(token)
        lifetime = 0
        if self._mechanism.complete:
            assert self._mechanism.username is not None
            again = self.state.reauthenticating
            lifetime = self.state.on_mechanism_complete(self._mechanism.username,
                                                        self._clock_ms())
            log.info("connection from %s on %s %s as User:%s (%s)%s", self.host,
                     self.listener, "re-authenticated" if again else "authenticated",
                     self._mechanism.username, self.state.mechanism,
                     f", session lifetime {lifetime} ms" if lifetime else "")
            self._mechanism = None
        return answer, lifetime

    def _failure_message(self, exc: SaslError) -> str:
        if isinstance(exc, InvalidCredentials):
            return invalid_credentials_message(str(self.state.mechanism),
                                               self.state.reauthenticating)
        return exc.message

    def _on_authenticate(self, version: int, correlation_id: int, request: Any) -> Reply:
        try:
            answer, lifetime = self._evaluate(bytes(request.auth_bytes))
        except SaslError as exc:
            self.state.fail()
            message = self._failure_message(exc)
            log.warning("closing connection from %s: SASL %s failed with %s: %s", self.host,
                        "re-authentication" if self.state.reauthenticating else
                        "authentication", self.state.mechanism, exc.message)
            return Reply(self._encode(SASL_AUTHENTICATE, version, correlation_id, make(
                _authenticate_response(version), error_code=ErrorCode.sasl_authentication_failed,
                error_message=message, auth_bytes=b"", session_lifetime=0)), close=True)
        return Reply(self._encode(SASL_AUTHENTICATE, version, correlation_id, make(
            _authenticate_response(version), error_code=ErrorCode.none, error_message=None,
            auth_bytes=answer, session_lifetime=lifetime)), close=False)

    def _on_raw_token(self, token: bytes) -> Reply:
        """After a v0 SaslHandshake: a token without a header; a failure just closes."""
        try:
            answer, _ = self._evaluate(token)
        except SaslError as exc:
            self.state.fail()
            log.warning("closing connection from %s: SASL authentication failed with %s: %s",
                        self.host, self.state.mechanism, exc.message)
            return CLOSE
        return Reply(len(answer).to_bytes(4, "big") + answer, close=False)

    def _error_reply(self, frame: bytes, code: ErrorCode, message: str) -> Reply:
        try:
            header, request = decode_request(frame)
            body = error_response(header.api_key, header.api_version, request, code, message)
            return Reply(self._encode(header.api_key, header.api_version,
                                      header.correlation_id, body), close=True)
        except Exception:  # no answer can be built: just close, as Kafka would
            return CLOSE

    @staticmethod
    def _encode(api_key: int, version: int, correlation_id: int, body: Any) -> bytes:
        return encode_response(api_key, version, correlation_id, body)
