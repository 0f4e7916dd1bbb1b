"""Client-side SASL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) on a SASL_PLAINTEXT / SASL_SSL
connection: SaslHandshake v1, then SaslAuthenticate with the mechanism's tokens (the
mechanisms' state machines are oncelog.security.sasl_plain and oncelog.security.scram).

Credentials come from ``sasl.username`` / ``sasl.password`` (librdkafka's names) or the Java
client's ``sasl.jaas.config`` (``...LoginModule required username="..." password="...";``);
the mechanism from ``sasl.mechanism`` (or librdkafka's ``sasl.mechanisms``). When the broker
gives the session a lifetime (``connections.max.reauth.ms``, KIP-368) the connection
re-authenticates before it ends (``BrokerConnection`` calls ``authenticate`` again).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from oncelog.client.config import ClientConfig
from oncelog.client.errors import AuthenticationError, ConfigError
from oncelog.client.wire import request
from oncelog.errors import ErrorCode
from oncelog.protocol import versions as api
from oncelog.security.credentials import MECHANISMS
from oncelog.security.sasl import PLAIN, SaslError
from oncelog.security.sasl_plain import parse_jaas_config, plain_message
from oncelog.security.scram import ScramClient

SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")


@dataclass(frozen=True, slots=True)
class SaslCredentials:
    mechanism: str
    username: str
    password: str = field(repr=False)


def sasl_credentials(config: ClientConfig) -> SaslCredentials | None:
    """The SASL login of a SASL security protocol (None for PLAINTEXT / SSL)."""
    if config["security.protocol"] not in SASL_PROTOCOLS:
        return None
    mechanism = str(config["sasl.mechanisms"] or config["sasl.mechanism"]).upper()
    if mechanism != PLAIN and mechanism not in MECHANISMS:
        raise ConfigError(f"sasl.mechanism {mechanism} is not supported by oncelog.client "
                          "(PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)")
    username, password = config["sasl.username"], config["sasl.password"]
    jaas = config["sasl.jaas.config"]
    if (username is None or password is None) and jaas:
        try:
            options = parse_jaas_config(jaas).options
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        username = options.get("username", username)
        password = options.get("password", password)
    if username is None or password is None:
        raise ConfigError(f"{config['security.protocol']} needs sasl.username and "
                          "sasl.password (or sasl.jaas.config)")
    return SaslCredentials(mechanism, username, password)


# Sends one request and returns its response: a BrokerConnection's ``send``.
Send = Callable[[Any], Awaitable[Any]]


async def authenticate(send: Send, credentials: SaslCredentials,
                       authenticate_version: int) -> int:
    """Run one SASL exchange; the session lifetime in ms the broker gave (0: none).
    AuthenticationError if the broker refuses."""
    handshake = await send(request(api.SASL_HANDSHAKE, 1, mechanism=credentials.mechanism))
    if handshake.error_code != ErrorCode.none:
        enabled = ", ".join(handshake.mechanisms)
        raise AuthenticationError(
            f"SASL mechanism {credentials.mechanism} is not enabled on the broker "
            f"(enabled: {enabled})", ErrorCode(handshake.error_code))

    async def step(token: bytes) -> tuple[bytes, int]:
        response = await send(request(api.SASL_AUTHENTICATE, authenticate_version,
                                      auth_bytes=token))
        if response.error_code != ErrorCode.none:
            raise AuthenticationError(response.error_message or "",
                                      ErrorCode(response.error_code))
        lifetime = getattr(response, "session_lifetime", None)
        lifetime_ms = int(lifetime.total_seconds() * 1000) if lifetime is not None else 0
        return bytes(response.auth_bytes), lifetime_ms

    if credentials.mechanism == PLAIN:
        _, lifetime_ms = await step(plain_message(credentials.username, credentials.password))
        return lifetime_ms
    client = ScramClient(MECHANISMS[credentials.mechanism], credentials.username,
                         credentials.password)
    try:
        server_first, _ = await step(client.first())
        server_final, lifetime_ms = await step(client.evaluate(server_first))
        client.evaluate(server_final)
    except SaslError as exc:
        raise AuthenticationError(f"SCRAM exchange failed: {exc.message}") from None
    return lifetime_ms
