"""TLS as Kafka configures it: ``ssl.SSLContext``s built from Kafka's ``ssl.*`` config names
(broker listeners, the broker's own inter-broker connections, and clients), and the
principal of a TLS client certificate.

Only PEM stores are read (``ssl.keystore.type=PEM``: one file holding the certificate chain
and the private key, the key encrypted with ``ssl.key.password`` if it is;
``ssl.truststore.type=PEM``: a CA bundle). ``ssl.enabled.protocols`` bound the TLS versions
(``ssl.protocol`` caps them: TLSv1.2 leaves TLS 1.3 out, as a Java TLSv1.2 context does);
``ssl.cipher.suites`` restricts the TLS 1.2 suites (OpenSSL names; TLS 1.3 suites cannot be
restricted and are skipped). ``ssl.client.auth`` is none / requested / required.

The principal of a client certificate follows Kafka's ``ssl.principal.mapping.rules=DEFAULT``:
``User:`` and the certificate's subject distinguished name in RFC 2253 form
(``CN=alice,OU=eng,O=Example,C=US``; X500Principal.getName()). Building a context does file
I/O; every other function here is pure. Errors are ``TlsConfigError`` naming the config key.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from oncelog.security.principal import ANONYMOUS, KafkaPrincipal

__all__ = [
    "CLIENT_AUTH",
    "SslSettings",
    "TlsConfigError",
    "client_context",
    "principal_from_certificate",
    "rfc2253",
    "server_context",
]

CLIENT_AUTH = ("required", "requested", "none")
_VERSIONS = {
    "TLSv1": ssl.TLSVersion.TLSv1,
    "TLSv1.1": ssl.TLSVersion.TLSv1_1,
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}
_TLS13_SUITES = ("TLS_AES_", "TLS_CHACHA20_")


class TlsConfigError(ValueError):
    """A TLS setting that cannot be used; the message names the config key."""


@dataclass(frozen=True, slots=True)
class SslSettings:
    """The ``ssl.*`` settings of one listener (or of a client), Kafka's names."""

    keystore_location: str | None = None
    keystore_type: str = "JKS"
    key_password: str | None = None
    truststore_location: str | None = None
    truststore_type: str = "JKS"
    client_auth: str = "none"
    enabled_protocols: tuple[str, ...] = ("TLSv1.2", "TLSv1.3")
    protocol: str = "TLSv1.3"
    cipher_suites: tuple[str, ...] = ()
    endpoint_identification_algorithm: str = "https"
    # Kafka refuses store passwords with PEM stores (only ssl.key.password applies)
    keystore_password_set: bool = False
    truststore_password_set: bool = False
    prefix: str = ""  # "listener.name.ssl." for the keys a listener overrides
    overridden: frozenset[str] = frozenset()  # the keys set as prefix + key

    @classmethod
    def from_lookup(
        cls, get: Callable[[str], Any], prefix: str = "", overridden: frozenset[str] = frozenset()
    ) -> SslSettings:
        """The settings from ``get(name)`` (None when unset), ``name`` a Kafka ssl.* key."""

        def text(name: str, default: str | None) -> str | None:
            value = get(name)
            return default if value is None else str(value)

        def items(name: str, default: tuple[str, ...]) -> tuple[str, ...]:
            value = get(name)
            if value is None:
                return default
            return tuple(part.strip() for part in str(value).split(",") if part.strip())

        return cls(
            keystore_location=text("ssl.keystore.location", None) or None,
            keystore_type=text("ssl.keystore.type", "JKS") or "JKS",
            key_password=text("ssl.key.password", None),
            truststore_location=text("ssl.truststore.location", None) or None,
            truststore_type=text("ssl.truststore.type", "JKS") or "JKS",
            client_auth=(text("ssl.client.auth", "none") or "none").lower(),
            enabled_protocols=items("ssl.enabled.protocols", ("TLSv1.2", "TLSv1.3")),
            protocol=text("ssl.protocol", "TLSv1.3") or "TLSv1.3",
            cipher_suites=items("ssl.cipher.suites", ()),
            endpoint_identification_algorithm=text(
                "ssl.endpoint.identification.algorithm", "https") or "",
            keystore_password_set=get("ssl.keystore.password") is not None,
            truststore_password_set=get("ssl.truststore.password") is not None,
            prefix=prefix,
            overridden=overridden,
        )

    def key(self, name: str) -> str:
        """The config key ``name`` was read from (for error messages)."""
        return f"{self.prefix}{name}" if name in self.overridden else name


def server_context(settings: SslSettings) -> ssl.SSLContext:
    """The context of an SSL listener: its certificate from the keystore (required), the
    client certificates it trusts from the truststore (the system's CAs without one)."""
    if settings.keystore_location is None:
        raise TlsConfigError(
            f"{settings.key('ssl.keystore.location')} is required on an SSL listener")
    if settings.client_auth not in CLIENT_AUTH:
        raise TlsConfigError(
            f"Invalid value {settings.client_auth} for configuration "
            f"{settings.key('ssl.client.auth')}: String must be one of: {', '.join(CLIENT_AUTH)}")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _configure(context, settings)
    context.verify_mode = {
        "none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED,
    }[settings.client_auth]
    return context


def client_context(settings: SslSettings) -> ssl.SSLContext:
    """A client's context: trusts the truststore (the system's CAs without one), presents
    the keystore's certificate if there is one (mutual TLS), and checks the server's host
    name when ``ssl.endpoint.identification.algorithm`` is ``https`` ("" turns it off)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    algorithm = settings.endpoint_identification_algorithm.lower()
    if algorithm not in ("https", ""):
        raise TlsConfigError(
            f"{settings.key('ssl.endpoint.identification.algorithm')}: unknown algorithm "
            f"{settings.endpoint_identification_algorithm!r} (https, or empty for none)")
    context.check_hostname = algorithm == "https"
    context.verify_mode = ssl.CERT_REQUIRED
    _configure(context, settings)
    return context


def _configure(context: ssl.SSLContext, settings: SslSettings) -> None:
    low, high = _versions(settings)
    context.minimum_version, context.maximum_version = low, high
    if settings.keystore_location is not None:
        _require_pem(settings, "ssl.keystore.type", settings.keystore_type)
        if settings.keystore_password_set:
            raise TlsConfigError(
                f"{settings.key('ssl.keystore.password')}: SSL key store password cannot be "
                "specified with PEM format, only key password may be specified.")
        try:
            context.load_cert_chain(settings.keystore_location, password=settings.key_password)
        except (OSError, ssl.SSLError) as exc:
            raise TlsConfigError(
                f"{settings.key('ssl.keystore.location')}: cannot load the certificate chain "
                f"and private key from {settings.keystore_location}: {_reason(exc)}") from None
    if settings.truststore_location is not None:
        _require_pem(settings, "ssl.truststore.type", settings.truststore_type)
        if settings.truststore_password_set:
            raise TlsConfigError(
                f"{settings.key('ssl.truststore.password')}: SSL trust store password cannot "
                "be specified for PEM format.")
        try:
            context.load_verify_locations(cafile=settings.truststore_location)
        except (OSError, ssl.SSLError) as exc:
            raise TlsConfigError(
                f"{settings.key('ssl.truststore.location')}: cannot load the trusted "
                f"certificates from {settings.truststore_location}: {_reason(exc)}") from None
    else:
        context.load_default_certs(
            ssl.Purpose.CLIENT_AUTH if context.protocol == ssl.PROTOCOL_TLS_SERVER
            else ssl.Purpose.SERVER_AUTH)
    suites = [s for s in settings.cipher_suites if not s.startswith(_TLS13_SUITES)]
    if suites:
        try:
            context.set_ciphers(":".join(suites))
        except ssl.SSLError:
            raise TlsConfigError(
                f"{settings.key('ssl.cipher.suites')}: no usable cipher suite in "
                f"{','.join(settings.cipher_suites)} (OpenSSL names)") from None


def _versions(settings: SslSettings) -> tuple[ssl.TLSVersion, ssl.TLSVersion]:
    if not settings.enabled_protocols:
        raise TlsConfigError(f"{settings.key('ssl.enabled.protocols')} is empty")
    for name in settings.enabled_protocols:
        if name not in _VERSIONS:
            raise TlsConfigError(
                f"{settings.key('ssl.enabled.protocols')}: unknown protocol {name!r} "
                f"(one of {', '.join(_VERSIONS)})")
    if settings.protocol not in (*_VERSIONS, "TLS"):
        raise TlsConfigError(
            f"{settings.key('ssl.protocol')}: unknown protocol {settings.protocol!r} "
            f"(TLS, or one of {', '.join(_VERSIONS)})")
    enabled = sorted(_VERSIONS[name] for name in settings.enabled_protocols)
    high = enabled[-1]
    if settings.protocol != "TLS":
        high = min(high, _VERSIONS[settings.protocol])
    if high < enabled[0]:
        raise TlsConfigError(
            f"{settings.key('ssl.protocol')}={settings.protocol} allows none of "
            f"{settings.key('ssl.enabled.protocols')}={','.join(settings.enabled_protocols)}")
    return enabled[0], high


def _require_pem(settings: SslSettings, name: str, value: str) -> None:
    if value.upper() != "PEM":
        raise TlsConfigError(
            f"{settings.key(name)}={value} is not supported: oncelog reads PEM stores "
            f"(set {settings.key(name)}=PEM)")


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError):
        return exc.reason or str(exc)
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc)


# -- principals ---------------------------------------------------------------------------

# Attribute keywords X500Principal.getName() (RFC 2253) prints; others print as an OID.
_KEYWORDS = {
    "commonName": "CN",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}
_OIDS = {
    "emailAddress": "1.2.840.113549.1.9.1",
    "serialNumber": "2.5.4.5",
    "title": "2.5.4.12",
    "surname": "2.5.4.4",
    "givenName": "2.5.4.42",
    "initials": "2.5.4.43",
    "pseudonym": "2.5.4.65",
    "generationQualifier": "2.5.4.44",
    "dnQualifier": "2.5.4.46",
    "businessCategory": "2.5.4.15",
    "postalCode": "2.5.4.17",
}


def _escape(value: str) -> str:
    out = []
    for i, char in enumerate(value):
        if char in ',+"\\<>;' or (i == 0 and char in "# ") or (
            i == len(value) - 1 and char == " "
        ):
            out.append("\\" + char)
        else:
            out.append(char)
    return "".join(out)


def rfc2253(subject: Sequence[Sequence[tuple[str, str]]]) -> str:
    """A subject as ``SSLSocket.getpeercert()`` gives it (RDNs, most significant first) in
    RFC 2253 form: RDNs reversed, ``,`` between them, ``+`` inside a multi-valued one."""
    rdns = []
    for rdn in reversed(subject):
        rdns.append("+".join(
            f"{_KEYWORDS.get(name) or _OIDS.get(name) or name}={_escape(value)}"
            for name, value in rdn
        ))
    return ",".join(rdns)


def principal_from_certificate(peer_certificate: dict[str, Any] | None) -> KafkaPrincipal:
    """``User:<subject DN>`` of a verified client certificate (``getpeercert()``), else
    ``User:ANONYMOUS`` (no certificate presented)."""
    if not peer_certificate or not peer_certificate.get("subject"):
        return ANONYMOUS
    return KafkaPrincipal("User", rfc2253(peer_certificate["subject"]))
