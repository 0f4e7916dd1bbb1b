"""Who is on a connection, as Kafka names it: a ``KafkaPrincipal`` (``User:alice``; the
anonymous principal of an unauthenticated PLAINTEXT listener is ``User:ANONYMOUS``) and the
``Session`` of one connection (principal, client host, the listener it came in on and that
listener's security protocol). The server fills a connection's session once it is
authenticated (TLS client certificate or SASL) and hands it to every request's context."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    type: str
    name: str

    def __str__(self) -> str:
        return f"{self.type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> KafkaPrincipal:
        """``"User:alice"`` -> KafkaPrincipal("User", "alice"); ValueError without a type."""
        kind, sep, name = text.partition(":")
        if not sep or not kind or not name:
            raise ValueError(f"a principal is TYPE:NAME, e.g. User:alice (got {text!r})")
        return cls(kind, name)


ANONYMOUS = KafkaPrincipal("User", "ANONYMOUS")


@dataclass(frozen=True, slots=True)
class Session:
    principal: KafkaPrincipal
    client_host: str
    listener: str = "PLAINTEXT"
    security_protocol: str = "PLAINTEXT"


def anonymous_session(client_host: str) -> Session:
    return Session(ANONYMOUS, client_host)
