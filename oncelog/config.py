"""Broker and topic configuration: the values a broker and its partition logs run with.

Broker settings come from a server.properties-style file and ``-c key=value`` flags (the
static layer); some of them can also be changed at runtime (the dynamic layers, cluster-wide
default and per-broker, see oncelog.broker.dynamic_config). Topic settings default to the
broker settings named by their synonyms (``retention.ms`` <- ``log.retention.ms`` /
``log.retention.minutes`` / ``log.retention.hours``) and may be overridden per topic.
The config keys (types, defaults, validation, documentation) are defined in
oncelog.config_key and listed in oncelog.config_registry; the names callers use are
re-exported here, so ``from oncelog.config import X`` keeps working.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from oncelog.config_key import (
    INT_MAX,
    INT_MIN,
    LONG_MAX,
    LONG_MIN,
    ConfigError,
    ConfigKey,
    ConfigSource,
    ConfigType,
    Dynamic,
)
from oncelog.config_registry import (
    BROKER_KEYS,
    LISTENER_PREFIX,
    STORAGE_ENGINE_SCHEMES,
    SYNONYM_UNIT_MS,
    TOPIC_CONFIGS,
    broker_key,
    split_log_dirs,
    storage_engine_scheme,
)
from oncelog.errors import ErrorCode, KafkaError

__all__ = [
    "BROKER_KEYS",
    "INT_MAX",
    "INT_MIN",
    "LONG_MAX",
    "LONG_MIN",
    "STORAGE_ENGINE_SCHEMES",
    "SYNONYM_UNIT_MS",
    "TOPIC_CONFIGS",
    "BrokerConfig",
    "ConfigError",
    "ConfigKey",
    "ConfigSource",
    "ConfigType",
    "Dynamic",
    "LogConfig",
    "Synonym",
    "log_dir_paths",
    "parse_properties",
    "parse_topic_configs",
    "split_log_dirs",
    "storage_engine_scheme",
]


def log_dir_paths(config: BrokerConfig, data_dir: Path) -> list[Path]:
    """Every log directory of this broker, absolute, ``data_dir`` first.

    ``data_dir`` (``--data-dir``, or the first entry of ``log.dirs``) holds the catalog and
    the broker's own files; a ``log.dirs`` set away from its default adds its entries."""
    dirs = [data_dir.absolute()]
    if config["log.dirs"] != BROKER_KEYS["log.dirs"].default:
        for entry in split_log_dirs(config["log.dirs"]):
            path = Path(entry).absolute()
            if path not in dirs:
                dirs.append(path)
    return dirs


def parse_properties(text: str) -> dict[str, str]:
    """Parse a server.properties-style text: key=value lines, # and ! comments."""
    result: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        sep = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if sep < 0:
            raise ValueError(f"not a key=value line: {raw!r}")
        result[line[:sep].strip()] = line[sep + 1 :].strip()
    return result


Synonym = tuple[str, str | None, ConfigSource]
"""(config name, value as text, where it comes from): one DescribeConfigs synonym."""


class BrokerConfig:
    """Typed broker settings in Kafka's layers: per-broker dynamic, cluster-wide dynamic
    default, static (file and flags), and the defaults. Unknown keys are refused."""

    def __init__(self, overrides: Mapping[str, str] | None = None) -> None:
        self._layers: dict[ConfigSource, dict[str, Any]] = {
            ConfigSource.DYNAMIC_BROKER_CONFIG: {},
            ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG: {},
            ConfigSource.STATIC_BROKER_CONFIG: {},
        }
        for name, text in (overrides or {}).items():
            key = broker_key(name)
            if key is None:
                raise ValueError(f"unknown broker config {name!r}")
            try:
                self._layers[ConfigSource.STATIC_BROKER_CONFIG][name] = key.parse(text)
            except ConfigError as exc:
                raise ValueError(f"bad value for {name}: {text!r} ({exc})") from None
        single_node = not self["metadata.etcd.endpoints"]  # a cluster may replicate
        for name in ("default.replication.factor", "offsets.topic.replication.factor"):
            if single_node and self[name] > 1 and name in (overrides or {}):
                raise ValueError(
                    f"Invalid value {self[name]} for configuration {name}: "
                    "replication factor larger than the 1 available broker "
                    "(oncelog serve runs a single node)"
                )

    @classmethod
    def from_sources(
        cls, config_file: Path | None = None, pairs: Iterable[str] = ()
    ) -> BrokerConfig:
        values: dict[str, str] = {}
        if config_file is not None:
            values.update(parse_properties(config_file.read_text()))
        for pair in pairs:
            if "=" not in pair:
                raise ValueError(f"expected key=value, got {pair!r}")
            name, _, value = pair.partition("=")
            values[name.strip()] = value.strip()
        return cls(values)

    # -- values and their sources -------------------------------------------------------
    def value_and_source(self, name: str) -> tuple[Any, ConfigSource]:
        for source, layer in self._layers.items():
            if name in layer:
                return layer[name], source
        key = broker_key(name)
        if key is None:
            raise KeyError(name)
        return key.default, ConfigSource.DEFAULT_CONFIG

    def __getitem__(self, name: str) -> Any:
        return self.value_and_source(name)[0]

    def items(self) -> Iterable[tuple[str, Any]]:
        return [(name, self[name]) for name in BROKER_KEYS]

    def listener_overrides(self) -> list[str]:
        """The per-listener settings that are set (``listener.name.<listener>.<config>``,
        in any layer), sorted: Kafka's DescribeConfigs lists them beside the registered
        configs."""
        return sorted({name for layer in self._layers.values() for name in layer
                       if name.startswith(LISTENER_PREFIX)})

    def set_static(self, name: str, value: Any) -> None:
        """Record a setting the broker was started with other than by a config
        (``--listen`` becomes ``listeners``)."""
        self._layers[ConfigSource.STATIC_BROKER_CONFIG][name] = value

    def dynamic(self, level: ConfigSource) -> dict[str, Any]:
        """The dynamic layer ``level`` (per-broker or cluster-wide default), a copy."""
        return dict(self._layers[level])

    def set_dynamic(self, level: ConfigSource, values: Mapping[str, Any]) -> None:
        """Replace the dynamic layer ``level`` (already validated values)."""
        self._layers[level] = dict(values)

    def synonyms(self, names: tuple[str, ...], primary: str) -> list[Synonym]:
        """Kafka's synonym list: every layer, most specific first, each listing ``names``
        in order, starting at the first entry for ``primary`` (none if it has none)."""
        found: list[Synonym] = []
        for source, layer in self._layers.items():
            found += [(n, BROKER_KEYS[n].format(layer[n]), source) for n in names if n in layer]
        found += [
            (n, BROKER_KEYS[n].format(BROKER_KEYS[n].default), ConfigSource.DEFAULT_CONFIG)
            for n in names
            if BROKER_KEYS[n].default is not None
        ]
        while found and found[0][0] != primary:
            found.pop(0)
        return found

    def broker_synonym_names(self, name: str) -> tuple[str, ...]:
        """A broker config and the ones that stand in for it (log.retention.ms <-
        log.retention.minutes <- log.retention.hours)."""
        for topic_key in TOPIC_CONFIGS.values():
            if topic_key.synonyms and topic_key.synonyms[0] == name:
                return topic_key.synonyms
        return (name,)

    def topic_default(self, key: ConfigKey) -> tuple[Any, ConfigSource]:
        """A topic config's value when the topic does not set it: the first of its broker
        synonyms that has a value (in ms for the minutes/hours ones), else Kafka's
        default."""
        for name in key.synonyms:
            value, source = self.value_and_source(name)
            if value is not None:
                unit = SYNONYM_UNIT_MS.get(name)
                return (value if unit is None else value * unit), source
        return key.default, ConfigSource.DEFAULT_CONFIG

    def topic_defaults(self) -> dict[str, str]:
        """Topic-level config values as strings, as DescribeConfigs shows them."""
        return {
            name: key.format(self.topic_default(key)[0]) or ""
            for name, key in TOPIC_CONFIGS.items()
        }

    # Derived values, resolved the way Kafka resolves them.
    @property
    def log_roll_ms(self) -> int:
        return int(self.topic_default(TOPIC_CONFIGS["segment.ms"])[0])

    @property
    def log_retention_ms(self) -> int:
        return int(self.topic_default(TOPIC_CONFIGS["retention.ms"])[0])

    @property
    def log_flush_ms(self) -> int:
        return int(self.topic_default(TOPIC_CONFIGS["flush.ms"])[0])


def parse_topic_configs(configs: Mapping[str, str | None]) -> dict[str, Any]:
    """Validated topic config overrides; KafkaError(INVALID_CONFIG) with Kafka's message
    for an unknown name or a bad value."""
    parsed: dict[str, Any] = {}
    for name, text in configs.items():
        key = TOPIC_CONFIGS.get(name)
        if key is None:
            raise KafkaError(ErrorCode.invalid_config, f"Unknown topic config name: {name}")
        try:
            parsed[name] = key.parse(text)
        except ConfigError as exc:
            raise KafkaError(ErrorCode.invalid_config, str(exc)) from None
    return parsed


@dataclass(frozen=True, slots=True)
class LogConfig:
    """The settings one partition log runs with."""

    segment_bytes: int = 1073741824
    segment_ms: int = 168 * 3_600_000
    retention_ms: int = 168 * 3_600_000
    retention_bytes: int = -1
    cleanup_policy: str = "delete"
    log_append_time: bool = False
    max_message_bytes: int = 1048588
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    index_interval_bytes: int = 4096
    segment_index_bytes: int = 10485760
    compression_type: str = "producer"
    min_insync_replicas: int = 1
    # Compaction (cleanup.policy=compact; oncelog.storage.cleaner), Kafka's defaults.
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    delete_retention_ms: int = 86_400_000

    @property
    def compact(self) -> bool:
        """Whether ``cleanup.policy`` includes compact (alone or with delete)."""
        return "compact" in self.cleanup_policy

    @classmethod
    def resolve(cls, broker: BrokerConfig, topic_overrides: Mapping[str, str]) -> LogConfig:
        """Merge broker defaults with per-topic overrides; bad values raise KafkaError."""
        values = {name: broker.topic_default(key)[0] for name, key in TOPIC_CONFIGS.items()}
        values.update(parse_topic_configs(topic_overrides))
        return cls(
            segment_bytes=int(values["segment.bytes"]),
            segment_ms=int(values["segment.ms"]),
            retention_ms=int(values["retention.ms"]),
            retention_bytes=int(values["retention.bytes"]),
            cleanup_policy=str(values["cleanup.policy"]),
            log_append_time=values["message.timestamp.type"] == "LogAppendTime",
            max_message_bytes=int(values["max.message.bytes"]),
            flush_messages=int(values["flush.messages"]),
            flush_ms=int(values["flush.ms"]),
            index_interval_bytes=int(values["index.interval.bytes"]),
            segment_index_bytes=int(values["segment.index.bytes"]),
            compression_type=str(values["compression.type"]),
            min_insync_replicas=int(values["min.insync.replicas"]),
            min_cleanable_dirty_ratio=float(values["min.cleanable.dirty.ratio"]),
            min_compaction_lag_ms=int(values["min.compaction.lag.ms"]),
            max_compaction_lag_ms=int(values["max.compaction.lag.ms"]),
            delete_retention_ms=int(values["delete.retention.ms"]),
        )
