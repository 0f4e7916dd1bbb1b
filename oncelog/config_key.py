"""One config key: its type, default, documentation and validation (Kafka's ConfigDef
with its Range / ValidString / ValidList validators), the enums DescribeConfigs numbers
(config types and sources), how a broker config may change at runtime, and ConfigError with
Kafka's wording. The keys themselves are listed in oncelog.config_registry; the layered
values a broker runs with are in oncelog.config.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

LONG_MAX = 2**63 - 1
LONG_MIN = -(2**63)
INT_MAX = 2**31 - 1
INT_MIN = -(2**31)


class ConfigType(enum.IntEnum):
    """DescribeConfigs' config_type (Kafka's ConfigDef.Type as the protocol numbers it)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class ConfigSource(enum.IntEnum):
    """Where a config value comes from (DescribeConfigs' config_source)."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


class Dynamic(enum.Enum):
    """How a broker config may be changed at runtime (Kafka's DynamicBrokerConfig)."""

    READ_ONLY = "read-only"  # only in server.properties / -c; a restart applies it
    PER_BROKER = "per-broker"  # AlterConfigs on broker "<node id>" only
    CLUSTER_WIDE = "cluster-wide"  # AlterConfigs on broker "<node id>" or "" (default)


class ConfigError(ValueError):
    """A config value Kafka would refuse; the message is Kafka's wording."""


_INTEGRAL = {
    ConfigType.SHORT: (-(2**15), 2**15 - 1),
    ConfigType.INT: (INT_MIN, INT_MAX),
    ConfigType.LONG: (LONG_MIN, LONG_MAX),
}


def _java_number(value: Any) -> str:
    """A number as Java prints it in ConfigException messages (2.0, not 2)."""
    return repr(float(value)) if isinstance(value, float) else str(value)


def _range_text(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() else str(bound)


@dataclass(frozen=True, slots=True)
class ConfigKey:
    """One config: its type, default (parsed; None when it has none), documentation and
    validation (Kafka's Range / ValidString / ValidList), and for topic configs the broker
    configs it defaults to (``synonyms``, first match wins), for broker configs whether it
    can change at runtime (``dynamic``)."""

    name: str
    type: ConfigType
    default: Any
    doc: str
    at_least: float | None = None
    at_most: float | None = None
    choices: tuple[str, ...] | None = None  # ValidString, or each item of a LIST
    validator: Callable[[Any], str | None] | None = None  # a Kafka message, or None if valid
    parser: Callable[[str], Any] | None = None  # replaces the type's parser
    synonyms: tuple[str, ...] = ()
    dynamic: Dynamic = Dynamic.READ_ONLY
    not_yet: str | None = None  # why oncelog stores this config but does not act on it
    sensitive: bool = False

    def error(self, value: Any, reason: str) -> ConfigError:
        return ConfigError(f"Invalid value {value} for configuration {self.name}: {reason}")

    def parse(self, text: str | None) -> Any:
        """``text`` as this config's type, validated; ConfigError with Kafka's words."""
        if text is None:
            return None
        trimmed = text.strip()
        value: Any
        if self.parser is not None:
            try:
                value = self.parser(trimmed)
            except ValueError as exc:
                raise self.error(text, str(exc)) from None
        elif self.type is ConfigType.BOOLEAN:
            if trimmed.lower() not in ("true", "false"):
                raise self.error(text, "Expected value to be either true or false")
            value = trimmed.lower() == "true"
        elif self.type in _INTEGRAL:
            low, high = _INTEGRAL[self.type]
            try:
                value = int(trimmed)
            except ValueError:
                value = None
            if value is None or not low <= value <= high:
                raise self.error(text, f"Not a number of type {self.type.name}")
        elif self.type is ConfigType.DOUBLE:
            try:
                value = float(trimmed)
            except ValueError:
                raise self.error(text, "Not a number of type DOUBLE") from None
        elif self.type is ConfigType.LIST:
            value = ",".join(item.strip() for item in trimmed.split(",") if item.strip())
        else:
            value = trimmed
        self.check(value)
        return value

    def check(self, value: Any) -> None:
        """ConfigError with Kafka's wording when a parsed ``value`` is not allowed."""
        if value is None:
            return
        if self.at_least is not None and value < self.at_least:
            raise self.error(
                _java_number(value), f"Value must be at least {_range_text(self.at_least)}"
            )
        if self.at_most is not None and value > self.at_most:
            raise self.error(
                _java_number(value), f"Value must be no more than {_range_text(self.at_most)}"
            )
        if self.choices is not None:
            items = value.split(",") if self.type is ConfigType.LIST else [value]
            for item in items:
                if item and item not in self.choices:
                    raise self.error(value, f"String must be one of: {', '.join(self.choices)}")
        if self.validator is not None:
            reason = self.validator(value)
            if reason is not None:
                raise self.error(value, reason)

    def format(self, value: Any) -> str | None:
        """A parsed value as DescribeConfigs shows it."""
        if value is None:
            return None
        if isinstance(value, bool):
            return "true" if value else "false"
        return str(value)
