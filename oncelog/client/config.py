"""Client configuration: a dict of Kafka's config names, as confluent-kafka takes it.

Defaults are the Java client's (Kafka 4.x), with one deliberate exception:
``isolation.level`` defaults to ``read_committed`` for this client's consumer, because
oncelog exists for exactly-once pipelines. Values may be given as Python values or as the
strings a properties file would hold (``"true"``, ``"5"``). Unknown names are logged and
ignored (so one dict can be shared with other Kafka clients); a bad value raises ConfigError.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from oncelog.client.errors import ConfigError
from oncelog.records.batch import Compression
from oncelog.security.tls import SslSettings, TlsConfigError, client_context

logger = logging.getLogger(__name__)

__all__ = ["ClientConfig", "parse_config"]

INT32_MAX = 2**31 - 1


def _bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes"):
        return True
    if text in ("false", "0", "no"):
        return False
    raise ValueError(f"not a boolean: {value!r}")


def _int(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError(f"not an integer: {value!r}")
    return int(value)


def _str(value: Any) -> str:
    return str(value)


def _opt_str(value: Any) -> str | None:
    return None if value is None or value == "" else str(value)


def _acks(value: Any) -> int:
    text = str(value).strip().lower()
    if text == "all":
        return -1
    acks = int(text)
    if acks not in (-1, 0, 1):
        raise ValueError(f"acks must be all, -1, 0 or 1, not {value!r}")
    return acks


def _compression(value: Any) -> int:
    text = str(value).strip().lower()
    try:
        return int(Compression[text.upper()])
    except KeyError:
        raise ValueError(f"unknown compression.type {value!r}") from None


def _isolation(value: Any) -> int:
    text = str(value).strip().lower()
    if text == "read_committed":
        return 1
    if text == "read_uncommitted":
        return 0
    raise ValueError(f"isolation.level must be read_committed or read_uncommitted: {value!r}")


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def _security_protocol(value: Any) -> str:
    text = str(value).strip().upper()
    if text not in SECURITY_PROTOCOLS:
        raise ValueError(f"security.protocol must be one of {', '.join(SECURITY_PROTOCOLS)}")
    return text


def _offset_reset(value: Any) -> str:
    text = str(value).strip().lower()
    aliases = {
        "earliest": "earliest",
        "smallest": "earliest",
        "beginning": "earliest",
        "latest": "latest",
        "largest": "latest",
        "end": "latest",
        "none": "none",
        "error": "none",
    }
    if text not in aliases:
        raise ValueError(f"auto.offset.reset must be earliest, latest or none: {value!r}")
    return aliases[text]


def _strategies(value: Any) -> tuple[str, ...]:
    items = value if isinstance(value, list | tuple) else str(value).split(",")
    names: list[str] = []
    for item in items:
        text = str(item).strip()
        short = text.rsplit(".", 1)[-1].lower()
        if short in ("range", "rangeassignor"):
            names.append("range")
        elif short in ("cooperative-sticky", "cooperativestickyassignor"):
            names.append("cooperative-sticky")
        elif text:
            raise ValueError(f"unknown partition.assignment.strategy {text!r}")
    if not names:
        raise ValueError("partition.assignment.strategy is empty")
    return tuple(names)


@dataclass(frozen=True)
class _Option:
    default: Any
    parse: Callable[[Any], Any]


# name -> (default, parser). Kafka's Java client defaults unless noted.
_OPTIONS: dict[str, _Option] = {
    # common
    "bootstrap.servers": _Option(None, _str),
    "client.id": _Option("oncelog", _str),
    "request.timeout.ms": _Option(30000, _int),
    "default.api.timeout.ms": _Option(60000, _int),
    "retry.backoff.ms": _Option(100, _int),
    "retry.backoff.max.ms": _Option(1000, _int),
    "reconnect.backoff.ms": _Option(50, _int),
    "reconnect.backoff.max.ms": _Option(1000, _int),
    "socket.connection.setup.timeout.ms": _Option(10000, _int),
    "metadata.max.age.ms": _Option(300000, _int),
    "allow.auto.create.topics": _Option(True, _bool),
    # security (TLS; PEM files, as the Java client's ssl.*.type=PEM)
    "security.protocol": _Option("PLAINTEXT", _security_protocol),
    "ssl.truststore.location": _Option(None, _opt_str),
    "ssl.truststore.type": _Option("PEM", _opt_str),
    "ssl.keystore.location": _Option(None, _opt_str),
    "ssl.keystore.type": _Option("PEM", _opt_str),
    "ssl.key.password": _Option(None, _opt_str),
    "ssl.endpoint.identification.algorithm": _Option("https", _str),
    "ssl.enabled.protocols": _Option("TLSv1.2,TLSv1.3", _str),
    "ssl.protocol": _Option("TLSv1.3", _str),
    "ssl.cipher.suites": _Option(None, _opt_str),
    # security (oncelog.client.sasl): librdkafka's sasl.username / sasl.password, or the
    # Java client's sasl.jaas.config; sasl.mechanisms is librdkafka's spelling.
    "sasl.mechanism": _Option("GSSAPI", _str),
    "sasl.mechanisms": _Option(None, _opt_str),
    "sasl.username": _Option(None, _opt_str),
    "sasl.password": _Option(None, _opt_str),
    "sasl.jaas.config": _Option(None, _opt_str),
    # producer
    "acks": _Option(-1, _acks),
    "linger.ms": _Option(5, _int),
    "batch.size": _Option(16384, _int),
    "buffer.memory": _Option(33554432, _int),
    "max.request.size": _Option(1048576, _int),
    "compression.type": _Option(0, _compression),
    "enable.idempotence": _Option(True, _bool),
    "max.in.flight.requests.per.connection": _Option(5, _int),
    "retries": _Option(INT32_MAX, _int),
    "delivery.timeout.ms": _Option(120000, _int),
    "max.block.ms": _Option(60000, _int),
    "partitioner.ignore.keys": _Option(False, _bool),
    "transactional.id": _Option(None, _opt_str),
    "transaction.timeout.ms": _Option(60000, _int),
    "transaction.two.phase.commit.enable": _Option(False, _bool),
    # consumer
    "group.id": _Option(None, _opt_str),
    "group.instance.id": _Option(None, _opt_str),
    "isolation.level": _Option(1, _isolation),  # oncelog: read_committed by default
    "auto.offset.reset": _Option("latest", _offset_reset),
    "enable.auto.commit": _Option(True, _bool),
    "auto.commit.interval.ms": _Option(5000, _int),
    "session.timeout.ms": _Option(45000, _int),
    "heartbeat.interval.ms": _Option(3000, _int),
    "max.poll.interval.ms": _Option(300000, _int),
    "max.poll.records": _Option(500, _int),
    "fetch.min.bytes": _Option(1, _int),
    "fetch.max.bytes": _Option(52428800, _int),
    "fetch.max.wait.ms": _Option(500, _int),
    "max.partition.fetch.bytes": _Option(1048576, _int),
    "check.crcs": _Option(True, _bool),
    "partition.assignment.strategy": _Option(("range", "cooperative-sticky"), _strategies),
}


class ClientConfig:
    """Parsed configuration; ``config["linger.ms"]`` returns the typed value or default."""

    def __init__(self, values: Mapping[str, Any]) -> None:
        self._values: dict[str, Any] = {}
        for name, raw in values.items():
            option = _OPTIONS.get(name)
            if option is None:
                logger.warning("ignoring unknown client config %r", name)
                continue
            try:
                self._values[name] = option.parse(raw)
            except (TypeError, ValueError) as exc:
                raise ConfigError(f"invalid value for {name}: {exc}") from None
        if not self._values.get("bootstrap.servers"):
            raise ConfigError("bootstrap.servers is required")

    def __getitem__(self, name: str) -> Any:
        if name in self._values:
            return self._values[name]
        return _OPTIONS[name].default

    def is_set(self, name: str) -> bool:
        return name in self._values

    def tls_context(self) -> ssl.SSLContext | None:
        """The TLS context of ``security.protocol=SSL`` or ``SASL_SSL`` (None otherwise): trust from
        ``ssl.truststore.location``, a client certificate from ``ssl.keystore.location``
        (mutual TLS), host names checked unless ``ssl.endpoint.identification.algorithm``
        is empty. ConfigError naming the setting when a file cannot be used."""
        if self["security.protocol"] not in ("SSL", "SASL_SSL"):
            return None
        settings = SslSettings.from_lookup(
            lambda name: self[name] if name in _OPTIONS else None)
        settings = replace(settings, truststore_type=str(self["ssl.truststore.type"]),
                           keystore_type=str(self["ssl.keystore.type"]))
        try:
            return client_context(settings)
        except TlsConfigError as exc:
            raise ConfigError(str(exc)) from None

    @property
    def bootstrap(self) -> list[tuple[str, int]]:
        servers: list[tuple[str, int]] = []
        for item in str(self["bootstrap.servers"]).split(","):
            item = item.strip()
            if not item:
                continue
            if "://" in item:
                item = item.split("://", 1)[1]
            host, _, port = item.rpartition(":")
            if not host or not port.isdigit():
                raise ConfigError(f"bootstrap.servers entry {item!r} is not HOST:PORT")
            servers.append((host.strip("[]"), int(port)))
        return servers


def parse_config(values: Mapping[str, Any]) -> ClientConfig:
    return ClientConfig(values)
