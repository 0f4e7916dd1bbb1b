"""The broker side of a SASL conversation, sans-IO: which Kafka requests a connection may
send before it is authenticated, the mechanism it chose, and when its session expires.

Kafka's SaslServerAuthenticator, as a table of states (``TRANSITIONS``):

- ``HANDSHAKE_OR_VERSIONS``: the connection may send ApiVersions (once) or SaslHandshake.
  Anything else is an IllegalSaslState and the connection is closed without an answer.
- ``HANDSHAKE``: after ApiVersions, only SaslHandshake.
- ``AUTHENTICATE``: SaslHandshake chose a mechanism; only SaslAuthenticate (v1+ handshake)
  or raw tokens (v0 handshake) until the mechanism completes. Another request is answered
  with ILLEGAL_SASL_STATE and the connection is closed.
- ``COMPLETE``: every request is served; a SaslHandshake begins re-authentication (KIP-368)
  with the same mechanism, and must end with the same principal. A session that has lived
  past its lifetime (``connections.max.reauth.ms``) is closed at its next request that does
  not begin re-authentication.
- ``FAILED``: the failure was answered; the connection is closed.

A mechanism's failure is an ``AuthenticationFailed`` (message sent to the client, never a
secret) or ``InvalidCredentials`` (the client gets Kafka's generic message, so that it
cannot tell an unknown user from a wrong password).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

API_VERSIONS = 18
SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36

PLAIN = "PLAIN"
SCRAM_SHA_256 = "SCRAM-SHA-256"
SCRAM_SHA_512 = "SCRAM-SHA-512"
SUPPORTED_MECHANISMS = (PLAIN, SCRAM_SHA_256, SCRAM_SHA_512)


class SaslError(Exception):
    """A SASL exchange went wrong; ``message`` is what the client may be told."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class AuthenticationFailed(SaslError):
    """SASL_AUTHENTICATION_FAILED with this message (Kafka's SaslAuthenticationException)."""


class InvalidCredentials(SaslError):
    """SASL_AUTHENTICATION_FAILED with Kafka's generic message (a SaslException): the
    detail is for the broker's log only."""


class IllegalSaslState(SaslError):
    """A message out of order (ILLEGAL_SASL_STATE)."""


def invalid_credentials_message(mechanism: str, reauthenticating: bool) -> str:
    """Kafka's answer to a SaslException, which says nothing of the user."""
    what = "re-authentication" if reauthenticating else "authentication"
    return (f"Authentication failed during {what} due to invalid credentials with SASL "
            f"mechanism {mechanism}")


class ServerMechanism(Protocol):
    """One mechanism's server exchange: ``evaluate`` a client token, answer a token."""

    def evaluate(self, token: bytes) -> bytes: ...

    @property
    def complete(self) -> bool: ...

    @property
    def username(self) -> str | None:
        """The authenticated user once ``complete``."""
        ...


class State(enum.Enum):
    HANDSHAKE_OR_VERSIONS = "HANDSHAKE_OR_VERSIONS"
    HANDSHAKE = "HANDSHAKE"
    AUTHENTICATE = "AUTHENTICATE"
    COMPLETE = "COMPLETE"
    FAILED = "FAILED"


class Event(enum.Enum):
    API_VERSIONS = "API_VERSIONS"
    HANDSHAKE = "HANDSHAKE"
    AUTHENTICATE = "AUTHENTICATE"
    MECHANISM_COMPLETE = "MECHANISM_COMPLETE"
    FAIL = "FAIL"
    OTHER = "OTHER"  # a request that is not ApiVersions or SASL


# The transition table: a missing (state, event) is an IllegalSaslState.
TRANSITIONS: dict[State, dict[Event, State]] = {
    State.HANDSHAKE_OR_VERSIONS: {
        Event.API_VERSIONS: State.HANDSHAKE,
        Event.HANDSHAKE: State.AUTHENTICATE,
        Event.FAIL: State.FAILED,
    },
    State.HANDSHAKE: {Event.HANDSHAKE: State.AUTHENTICATE, Event.FAIL: State.FAILED},
    State.AUTHENTICATE: {
        Event.AUTHENTICATE: State.AUTHENTICATE,
        Event.MECHANISM_COMPLETE: State.COMPLETE,
        Event.FAIL: State.FAILED,
    },
    State.COMPLETE: {
        Event.API_VERSIONS: State.COMPLETE,
        Event.OTHER: State.COMPLETE,
        Event.AUTHENTICATE: State.COMPLETE,  # dispatched: its handler answers ILLEGAL_SASL_STATE
        Event.HANDSHAKE: State.AUTHENTICATE,  # KIP-368 re-authentication
        Event.FAIL: State.FAILED,
    },
    State.FAILED: {},
}


def event_of(api_key: int) -> Event:
    if api_key == API_VERSIONS:
        return Event.API_VERSIONS
    if api_key == SASL_HANDSHAKE:
        return Event.HANDSHAKE
    if api_key == SASL_AUTHENTICATE:
        return Event.AUTHENTICATE
    return Event.OTHER


@dataclass(slots=True)
class SaslSession:
    """One connection's authentication state (time in monotonic milliseconds, passed in)."""

    enabled_mechanisms: tuple[str, ...]
    max_reauth_ms: int = 0  # connections.max.reauth.ms; 0: sessions never expire
    state: State = State.HANDSHAKE_OR_VERSIONS
    mechanism: str | None = None
    username: str | None = None  # the authenticated user (kept across re-authentication)
    previous_username: str | None = None  # during re-authentication
    raw_tokens: bool = False  # SaslHandshake v0: tokens come without Kafka headers
    expires_at_ms: int | None = None

    @property
    def authenticated(self) -> bool:
        return self.state is State.COMPLETE

    @property
    def reauthenticating(self) -> bool:
        return self.previous_username is not None

    def on_request(self, api_key: int) -> None:
        """Check that ``api_key`` may come now; IllegalSaslState (and FAILED) if not."""
        event = event_of(api_key)
        target = TRANSITIONS[self.state].get(event)
        if target is None:
            where = "authentication" if self.state is State.AUTHENTICATE else "handshake"
            self.state = State.FAILED
            raise IllegalSaslState(f"Unexpected Kafka request of type {api_key} during SASL "
                                   f"{where}.")
        if event is Event.API_VERSIONS:
            self.state = target

    def expired(self, now_ms: int) -> bool:
        """A completed session past its lifetime (KIP-368)."""
        return (self.state is State.COMPLETE and self.expires_at_ms is not None
                and now_ms >= self.expires_at_ms)

    def on_handshake(self, mechanism: str, version: int) -> None:
        """SaslHandshake chose ``mechanism``: UNSUPPORTED (AuthenticationFailed subclass
        raised by the caller's check) if not enabled; during re-authentication it must be
        the mechanism of the first authentication."""
        if mechanism not in self.enabled_mechanisms:
            self.state = State.FAILED
            raise UnsupportedMechanism(mechanism, self.enabled_mechanisms)
        if self.state is State.COMPLETE:
            if mechanism != self.mechanism:
                self.state = State.FAILED
                raise AuthenticationFailed(
                    f"SASL mechanism '{mechanism}' requested by client is not supported for "
                    f"re-authentication of mechanism '{self.mechanism}'")
            self.previous_username = self.username
        self.mechanism = mechanism
        self.raw_tokens = version == 0
        self.state = State.AUTHENTICATE

    def on_mechanism_complete(self, username: str, now_ms: int) -> int:
        """The mechanism authenticated ``username``; the session lifetime to tell the
        client (0: none). Re-authentication must keep the principal."""
        if self.previous_username is not None and username != self.previous_username:
            self.state = State.FAILED
            raise AuthenticationFailed(
                "Cannot change principals during re-authentication from "
                f"User.{self.previous_username}: User.{username}")
        self.username = username
        self.previous_username = None
        self.state = State.COMPLETE
        if self.max_reauth_ms > 0:
            self.expires_at_ms = now_ms + self.max_reauth_ms
            return self.max_reauth_ms
        self.expires_at_ms = None
        return 0

    def fail(self) -> None:
        self.state = State.FAILED


class UnsupportedMechanism(SaslError):
    """UNSUPPORTED_SASL_MECHANISM: the handshake answers the enabled list, then closes."""

    def __init__(self, mechanism: str, enabled: tuple[str, ...]) -> None:
        super().__init__(f"Unsupported SASL mechanism {mechanism}")
        self.enabled = enabled
