"""SASL/PLAIN (RFC 4616) as Kafka speaks it (PlainSaslServer), and the JAAS configuration
lines Kafka reads users and client credentials from, sans-IO.

The client message is ``[authzid] NUL username NUL password``: exactly three tokens; an
empty user or password is refused with its own message; an authzid, if given, must equal the
user name. The broker's users are the ``user_<name>="<password>"`` options of
``listener.name.<listener>.plain.sasl.jaas.config`` (Kafka's PlainServerCallbackHandler).
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Callable
from dataclasses import dataclass

from oncelog.security.sasl import AuthenticationFailed, IllegalSaslState

JAAS_USER_PREFIX = "user_"
PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"


def parse_plain(token: bytes) -> tuple[str, str, str]:
    """(authzid, username, password); AuthenticationFailed if not three tokens."""
    try:
        text = token.decode("utf-8")
    except UnicodeDecodeError:
        raise AuthenticationFailed("Invalid SASL/PLAIN response: not UTF-8") from None
    parts = text.split("\0")
    if len(parts) != 3:
        raise AuthenticationFailed(
            f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}")
    return parts[0], parts[1], parts[2]


def plain_message(username: str, password: str, authzid: str = "") -> bytes:
    return f"{authzid}\0{username}\0{password}".encode()


class PlainServer:
    """``verify(username, password)`` says whether the pair is a user of this listener."""

    def __init__(self, verify: Callable[[str, str], bool]) -> None:
        self._verify = verify
        self.username: str | None = None
        self.complete = False
        self._used = False

    def evaluate(self, token: bytes) -> bytes:
        if self._used:
            raise IllegalSaslState("SASL/PLAIN takes a single message")
        self._used = True
        authzid, username, password = parse_plain(token)
        if not username:
            raise AuthenticationFailed("Authentication failed: username not specified")
        if not password:
            raise AuthenticationFailed("Authentication failed: password not specified")
        if not self._verify(username, password):
            raise AuthenticationFailed("Authentication failed: Invalid username or password")
        if authzid and authzid != username:
            raise AuthenticationFailed("Authentication failed: Client requested an "
                                       "authorization id that is different from username")
        self.username = username
        self.complete = True
        return b""


def plain_users_verifier(users: dict[str, str]) -> Callable[[str, str], bool]:
    def verify(username: str, password: str) -> bool:
        expected = users.get(username)
        return expected is not None and hmac.compare_digest(expected.encode(),
                                                            password.encode())
    return verify


@dataclass(frozen=True, slots=True)
class JaasConfig:
    login_module: str
    options: dict[str, str]

    @property
    def plain_users(self) -> dict[str, str]:
        """The ``user_<name>`` options: name -> password."""
        return {key[len(JAAS_USER_PREFIX):]: value for key, value in self.options.items()
                if key.startswith(JAAS_USER_PREFIX)}

    def __repr__(self) -> str:  # never show passwords
        return f"JaasConfig({self.login_module!r}, options={sorted(self.options)})"


_JAAS = re.compile(r"\s*(?P<module>[\w.$]+)\s+(?P<flag>required|requisite|sufficient|optional)"
                   r"(?P<options>.*?);?\s*$", re.S)
_OPTION = re.compile(r"\s*(?P<key>[^\s=;]+)\s*=\s*(?:\"(?P<quoted>(?:[^\"\\]|\\.)*)\"|"
                     r"(?P<bare>[^\s;\"]+))")


def parse_jaas_config(text: str) -> JaasConfig:
    """One login module line, as ``sasl.jaas.config`` holds it; ValueError (never showing
    a value) if it does not parse."""
    found = _JAAS.fullmatch(text)
    if found is None:
        raise ValueError("sasl.jaas.config must be 'LoginModule required key=\"value\" ...;'")
    options: dict[str, str] = {}
    rest = found["options"]
    pos = 0
    while rest[pos:].strip():
        option = _OPTION.match(rest, pos)
        if option is None:
            raise ValueError(f"sasl.jaas.config: cannot parse the options of "
                             f"{found['module']} at character {pos}")
        quoted = option["quoted"]
        value = (re.sub(r"\\(.)", r"\1", quoted) if quoted is not None
                 else option["bare"])
        options[option["key"]] = value
        pos = option.end()
    return JaasConfig(found["module"], options)
