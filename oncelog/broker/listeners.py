"""The broker's listeners, as Kafka configures them: ``listeners`` (``NAME://HOST:PORT``,
comma-separated, one server each), ``advertised.listeners`` (what clients are told, per
listener name; default: ``listeners``), ``listener.security.protocol.map`` (a listener
name's security protocol; a name that is a protocol maps to itself unless the map says
otherwise) and the inter-broker listener: ``inter.broker.listener.name``, or the listener
named after ``security.inter.broker.protocol`` (default PLAINTEXT), never both set.

``oncelog serve --listen HOST:PORT`` is the PLAINTEXT listener (it replaces the address
of a PLAINTEXT entry of ``listeners``, or is added first) and ``--advertised HOST:PORT``
its advertised address. Validation follows KafkaConfig: each error is a ConfigError naming
the key, raised before anything is bound. SSL listeners get their ``ssl.SSLContext`` here
(oncelog.security.tls; per-listener overrides ``listener.name.<lowercase name>.ssl.*``).
SASL listeners authenticate each connection (oncelog.broker.sasl) with the mechanisms of
``sasl.enabled.mechanisms``, which must be ones oncelog implements.
"""

from __future__ import annotations

import re
import socket
import ssl
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from oncelog.config import BROKER_KEYS, BrokerConfig, ConfigError, ConfigSource
from oncelog.config_registry import LISTENER_PREFIX, SECURITY_PROTOCOLS
from oncelog.security.sasl import SUPPORTED_MECHANISMS
from oncelog.security.tls import SslSettings, TlsConfigError, client_context, server_context

__all__ = [
    "EndPoint",
    "ListenerPlan",
    "inter_broker_client_tls",
    "inter_broker_protocol",
    "plan_listeners",
    "protocol_map",
]


_ENDPOINT = re.compile(r"^(?P<name>[A-Za-z0-9_.-]+)://(?P<host>\[[^\]]*\]|[^:/]*):(?P<port>\d+)$")


@dataclass(frozen=True, slots=True)
class EndPoint:
    """One listener: its name, address and security protocol (Kafka's EndPoint)."""

    name: str
    host: str
    port: int
    protocol: str

    def __str__(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class Listener:
    """A listener to bind: where, under which name and protocol, with which TLS context."""

    endpoint: EndPoint
    tls: ssl.SSLContext | None = None


@dataclass(frozen=True, slots=True)
class ListenerPlan:
    """What a broker binds and advertises."""

    listeners: tuple[Listener, ...]
    advertised: tuple[EndPoint, ...]
    inter_broker: str  # listener name

    def advertised_for(self, bound: Sequence[EndPoint]) -> tuple[EndPoint, ...]:
        """The advertised endpoints once bound: port 0 (any) becomes the bound port, an
        empty host this machine's name, when the advertised entry comes from ``listeners``."""
        by_name = {e.name: e for e in bound}
        out = []
        for e in self.advertised:
            actual = by_name.get(e.name)
            port = actual.port if e.port == 0 and actual is not None else e.port
            host = e.host or socket.getfqdn()
            out.append(replace(e, host=host, port=port))
        return tuple(out)


def protocol_map(text: str) -> dict[str, str]:
    """``listener.security.protocol.map``: listener name -> security protocol."""
    mapping: dict[str, str] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, colon, protocol = item.partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not colon or not name or protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(
                f"Invalid value {text} for configuration listener.security.protocol.map: "
                f"{item!r} is not NAME:PROTOCOL with PROTOCOL one of "
                f"{', '.join(SECURITY_PROTOCOLS)}")
        if name in mapping:
            raise ConfigError(
                f"Invalid value {text} for configuration listener.security.protocol.map: "
                f"listener name {name} appears more than once")
        mapping[name] = protocol
    return mapping


def parse_endpoints(
    text: str, protocols: dict[str, str], key: str, *, distinct_ports: bool
) -> list[EndPoint]:
    """``NAME://HOST:PORT,...`` (Kafka's listenerListToEndPoints)."""
    endpoints: list[EndPoint] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        match = _ENDPOINT.match(item)
        if match is None:
            raise ConfigError(f"Invalid value {text} for configuration {key}: {item!r} is "
                              "not NAME://HOST:PORT")
        name = match["name"].upper()
        protocol = protocols.get(name)
        if protocol is None:
            raise ConfigError(
                f"Invalid value {text} for configuration {key}: no security protocol "
                f"defined for listener {name} (listener.security.protocol.map)")
        port = int(match["port"])
        if not 0 <= port <= 65535:
            raise ConfigError(f"Invalid value {text} for configuration {key}: port {port}")
        endpoints.append(EndPoint(name, match["host"].strip("[]"), port, protocol))
    names = [e.name for e in endpoints]
    if len(set(names)) != len(names):
        raise ConfigError(f"Invalid value {text} for configuration {key}: Each listener "
                          "must have a different name")
    ports = [e.port for e in endpoints if e.port != 0]
    if distinct_ports and len(set(ports)) != len(ports):
        raise ConfigError(f"Invalid value {text} for configuration {key}: Each listener "
                          "must have a different port")
    if not endpoints:
        raise ConfigError(f"Invalid value {text} for configuration {key}: no listener")
    return endpoints


def _with_plaintext(
    endpoints: list[EndPoint], address: tuple[str, int] | None
) -> list[EndPoint]:
    """``--listen`` / ``--advertised``: the PLAINTEXT listener's address."""
    if address is None:
        return endpoints
    plaintext = EndPoint("PLAINTEXT", address[0], address[1], "PLAINTEXT")
    rest = [e for e in endpoints if e.name != "PLAINTEXT"]
    return [plaintext, *rest]


def plan_listeners(
    config: BrokerConfig,
    listen: tuple[str, int] | None = None,
    advertised: tuple[str, int] | None = None,
) -> ListenerPlan:
    """The listeners of ``config`` (with ``--listen``/``--advertised``), validated as Kafka
    validates them, SSL contexts built; ConfigError naming the key otherwise."""
    protocols = _protocols(config)
    bound = _with_plaintext(
        parse_endpoints(str(config["listeners"]), protocols, "listeners", distinct_ports=True),
        listen)
    advertised_text = config["advertised.listeners"]
    if advertised_text:
        shown = _with_plaintext(parse_endpoints(str(advertised_text), protocols,
                                                "advertised.listeners", distinct_ports=False),
                                advertised)
    else:
        shown = [e if e.name != "PLAINTEXT" or advertised is None
                 else replace(e, host=advertised[0], port=advertised[1]) for e in bound]
    names = {e.name for e in bound}
    extra = [e.name for e in shown if e.name not in names]
    if extra:
        raise ConfigError(
            "advertised.listeners listener names must be equal to or a subset of the ones "
            f"defined in listeners. Found {','.join(e.name for e in shown)}. The valid "
            f"options based on the current configuration are {','.join(sorted(names))}")
    for e in shown:
        if e.host == "0.0.0.0":
            raise ConfigError("advertised.listeners cannot use the nonroutable meta-address "
                              "0.0.0.0. Use a routable IP address.")
    inter = _inter_broker_listener(config, protocols)
    if inter not in {e.name for e in shown}:
        raise ConfigError(
            "inter.broker.listener.name must be a listener name defined in "
            "advertised.listeners. The valid options based on currently configured "
            f"listeners are {','.join(e.name for e in shown)}")
    return ListenerPlan(tuple(_listener(config, e) for e in bound), tuple(shown), inter)


def _protocols(config: BrokerConfig) -> dict[str, str]:
    """Listener name -> protocol: each protocol's own name, then the configured map."""
    protocols = {p: p for p in SECURITY_PROTOCOLS}
    protocols.update(protocol_map(str(config["listener.security.protocol.map"])))
    return protocols


def _inter_broker_listener(config: BrokerConfig, protocols: dict[str, str]) -> str:
    name = config["inter.broker.listener.name"]
    _, source = config.value_and_source("security.inter.broker.protocol")
    explicit_protocol = source is not ConfigSource.DEFAULT_CONFIG
    if name:
        if explicit_protocol:
            raise ConfigError("Only one of inter.broker.listener.name and "
                              "security.inter.broker.protocol should be set.")
        name = str(name).upper()
        if name not in protocols:
            raise ConfigError(f"Listener with name {name} defined in "
                              "inter.broker.listener.name not found in "
                              "listener.security.protocol.map.")
        return str(name)
    return str(config["security.inter.broker.protocol"])


def listener_settings(config: BrokerConfig, name: str) -> SslSettings:
    """The ``ssl.*`` settings of listener ``name``: ``listener.name.<name>.ssl.*`` where
    set, else the broker-wide value."""
    prefix = f"{LISTENER_PREFIX}{name.lower()}."

    def get(key: str) -> Any:
        value = config[prefix + key]
        return config[key] if value is None else value

    overridden = frozenset(key for key in BROKER_KEYS if key.startswith("ssl.")
                           and config[prefix + key] is not None)
    return SslSettings.from_lookup(get, prefix, overridden)


def _listener(config: BrokerConfig, endpoint: EndPoint) -> Listener:
    if endpoint.protocol.startswith("SASL_"):
        check_sasl_mechanisms(config, endpoint.name)
    if endpoint.protocol not in ("SSL", "SASL_SSL"):
        return Listener(endpoint)
    # the registry accepts only DEFAULT: User:<subject DN> (oncelog.security.tls)
    assert config["ssl.principal.mapping.rules"] == "DEFAULT"
    try:
        return Listener(endpoint, server_context(listener_settings(config, endpoint.name)))
    except TlsConfigError as exc:
        raise ConfigError(f"listener {endpoint.name}: {exc}") from None


def inter_broker_protocol(config: BrokerConfig) -> tuple[str, str]:
    """The inter-broker listener's name and security protocol."""
    protocols = _protocols(config)
    name = _inter_broker_listener(config, protocols)
    return name, protocols.get(name, name)


def inter_broker_client_tls(config: BrokerConfig) -> ssl.SSLContext | None:
    """The TLS context of this broker's connections to the others (replica fetches,
    markers, verifications) when the inter-broker listener's protocol uses TLS: trust from
    the truststore, this broker's certificate from its keystore; None for PLAINTEXT."""
    plan_protocols = _protocols(config)
    name = _inter_broker_listener(config, plan_protocols)
    if plan_protocols.get(name) not in ("SSL", "SASL_SSL"):
        return None
    try:
        return client_context(listener_settings(config, name))
    except TlsConfigError as exc:
        raise ConfigError(f"inter-broker listener {name}: {exc}") from None


def enabled_mechanisms(config: BrokerConfig, listener: str) -> tuple[str, ...]:
    """The SASL mechanisms of ``listener``: ``listener.name.<listener>.sasl.enabled.mechanisms``
    where set, else the broker-wide ``sasl.enabled.mechanisms`` (as Kafka)."""
    value = config[f"{LISTENER_PREFIX}{listener.lower()}.sasl.enabled.mechanisms"]
    if value is None:
        value = config["sasl.enabled.mechanisms"]
    return tuple(m.strip() for m in str(value).split(",") if m.strip())


def check_sasl_mechanisms(config: BrokerConfig, listener: str) -> None:
    """A SASL listener needs enabled mechanisms that oncelog implements (ConfigError)."""
    enabled = enabled_mechanisms(config, listener)
    unknown = [m for m in enabled if m not in SUPPORTED_MECHANISMS]
    if not enabled or unknown:
        raise ConfigError(
            f"sasl.enabled.mechanisms: {','.join(unknown) or '(none)'} for SASL listener "
            f"{listener}: oncelog implements {', '.join(SUPPORTED_MECHANISMS)}")
