"""Broker and topic configuration, with Kafka's names and defaults.

Broker settings come from a server.properties-style file and ``-c key=value`` flags.
Topic settings default to the broker's ``log.*`` settings and may be overridden per topic.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from oncelog.errors import ErrorCode, KafkaError

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1


def _bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise ValueError(f"not a boolean: {text!r}")


def _nullable_int(text: str) -> int | None:
    stripped = text.strip()
    if stripped in ("", "null", "None"):
        return None
    return int(stripped)


STORAGE_ENGINE_SCHEMES = ("file", "memory")
"""Partition engines ``storage.engine`` may name (see oncelog.storage.engines)."""


def storage_engine_scheme(url: str) -> str:
    """The scheme of a ``storage.engine`` URL (``file:``, ``memory:``); ValueError naming
    the known ones for any other."""
    scheme, colon, _rest = url.partition(":")
    if not colon or scheme not in STORAGE_ENGINE_SCHEMES:
        known = ", ".join(f"{s}:" for s in STORAGE_ENGINE_SCHEMES)
        raise ValueError(f"unknown storage engine {url!r}; known engines: {known}")
    return scheme


def _log_dirs_text(text: str) -> str:
    if not split_log_dirs(text):
        raise ValueError("log.dirs names no directory")
    return text


def split_log_dirs(text: str) -> list[str]:
    """The directories of a ``log.dirs`` value (comma-separated, blanks dropped)."""
    return [part.strip() for part in text.split(",") if part.strip()]


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


def _engine_url(text: str) -> str:
    storage_engine_scheme(text)
    return text


@dataclass(frozen=True, slots=True)
class ConfigKey:
    name: str
    parse: Callable[[str], Any]
    default: Any
    doc: str
    at_least: int | None = None  # Kafka's ConfigDef.Range.atLeast
    choices: tuple[str, ...] | None = None  # Kafka's ConfigDef.ValidString.in

    def check(self, value: Any) -> None:
        """ValueError with Kafka's wording when ``value`` is out of range."""
        if value is None:
            return
        if self.at_least is not None and value < self.at_least:
            raise ValueError(
                f"Invalid value {value} for configuration {self.name}: "
                f"Value must be at least {self.at_least}"
            )
        if self.choices is not None and value not in self.choices:
            raise ValueError(
                f"Invalid value {value} for configuration {self.name}: "
                f"String must be one of: {', '.join(self.choices)}"
            )


def _key(
    name: str,
    parse: Callable[[str], Any],
    default: Any,
    doc: str,
    *,
    at_least: int | None = None,
    choices: tuple[str, ...] | None = None,
) -> ConfigKey:
    return ConfigKey(name, parse, default, doc, at_least, choices)


# Broker configuration keys: Kafka's names and defaults.
BROKER_KEYS: dict[str, ConfigKey] = {
    k.name: k
    for k in [
        _key("node.id", int, 1, "The node id of this broker.", at_least=0),
        _key(
            "log.dirs",
            _log_dirs_text,
            "./data",
            "Comma-separated directories for partition data; new partitions go to the one "
            "holding the fewest partitions. The first (or --data-dir) also holds topics.json.",
        ),
        _key(
            "storage.engine",
            _engine_url,
            "file:",
            "Partition engine: file: (segments on disk) or memory: (lost on stop).",
        ),
        _key("auto.create.topics.enable", _bool, True, "Create topics on first use."),
        _key(
            "num.partitions", int, 1, "Default partition count of auto-created topics.", at_least=1
        ),
        _key(
            "default.replication.factor", int, 1, "Replication factor (1 on one node).", at_least=1
        ),
        _key("delete.topic.enable", _bool, True, "Allow DeleteTopics."),
        _key("log.segment.bytes", int, 1073741824, "Maximum size of a log segment.", at_least=14),
        _key("log.roll.ms", _nullable_int, None, "Roll a segment after this long.", at_least=1),
        _key("log.roll.hours", int, 168, "Roll a segment after this long (hours).", at_least=1),
        _key("log.retention.ms", _nullable_int, None, "Delete segments older than this."),
        _key("log.retention.minutes", _nullable_int, None, "Retention in minutes."),
        _key("log.retention.hours", int, 168, "Retention in hours."),
        _key("log.retention.bytes", int, -1, "Delete old segments past this size."),
        _key(
            "log.retention.check.interval.ms", int, 300000, "How often retention runs.", at_least=1
        ),
        _key(
            "log.cleanup.policy",
            str,
            "delete",
            "delete or compact.",
            choices=("delete", "compact", "compact,delete", "delete,compact"),
        ),
        _key("log.index.interval.bytes", int, 4096, "Bytes between index entries.", at_least=0),
        _key("log.index.size.max.bytes", int, 10485760, "Maximum index file size.", at_least=4),
        _key(
            "log.flush.interval.messages",
            int,
            LONG_MAX,
            "fsync after this many messages.",
            at_least=1,
        ),
        _key("log.flush.interval.ms", _nullable_int, None, "fsync after this long."),
        _key("log.flush.scheduler.interval.ms", int, LONG_MAX, "How often to check flushes."),
        _key(
            "log.message.timestamp.type",
            str,
            "CreateTime",
            "CreateTime or LogAppendTime.",
            choices=("CreateTime", "LogAppendTime"),
        ),
        _key("message.max.bytes", int, 1048588, "Largest record batch accepted.", at_least=0),
        _key("socket.request.max.bytes", int, 104857600, "Largest request accepted.", at_least=1),
        _key("max.connections", int, INT_MAX, "Maximum open client connections.", at_least=0),
        _key("connections.max.idle.ms", int, 600000, "Close idle connections after this long."),
        _key("queued.max.requests", int, 500, "Requests handled at once, all connections.",
             at_least=1),
        _key(
            "offsets.topic.num.partitions", int, 50, "Partitions of __consumer_offsets.", at_least=1
        ),
        _key(
            "offsets.topic.replication.factor",
            int,
            1,
            "Replication of __consumer_offsets.",
            at_least=1,
        ),
        _key(
            "offsets.topic.segment.bytes",
            int,
            104857600,
            "Segment size of offsets topic.",
            at_least=1,
        ),
        _key(
            "offsets.retention.minutes",
            int,
            10080,
            "Keep offsets of empty groups so long.",
            at_least=1,
        ),
        _key("offset.metadata.max.bytes", int, 4096, "Largest commit metadata string."),
        _key("group.initial.rebalance.delay.ms", int, 3000, "Wait for more members."),
        _key("group.min.session.timeout.ms", int, 6000, "Smallest session timeout."),
        _key("group.max.session.timeout.ms", int, 1800000, "Largest session timeout."),
        _key("group.max.size", int, INT_MAX, "Members per group.", at_least=1),
        _key("producer.id.expiration.ms", int, 86400000, "Forget idle producer ids.", at_least=1),
        _key(
            "producer.id.expiration.check.interval.ms",
            int,
            600000,
            "How often producer ids are expired.",
            at_least=1,
        ),
        _key("transaction.state.log.num.partitions", int, 50, "Partitions of txn log.", at_least=1),
        _key(
            "transaction.state.log.segment.bytes",
            int,
            104857600,
            "Txn log segment size.",
            at_least=1,
        ),
        _key("transaction.max.timeout.ms", int, 900000, "Largest transaction timeout.", at_least=1),
        _key(
            "transactional.id.expiration.ms",
            int,
            604800000,
            "Forget idle transactional ids.",
            at_least=1,
        ),
        _key(
            "transaction.abort.timed.out.transaction.cleanup.interval.ms",
            int,
            10000,
            "How often timed-out transactions are aborted.",
            at_least=1,
        ),
        _key(
            "transaction.remove.expired.transaction.cleanup.interval.ms",
            int,
            3600000,
            "How often expired transactional ids are removed.",
            at_least=1,
        ),
        _key("transaction.two.phase.commit.enable", _bool, False, "Allow KIP-939 2PC."),
        _key("min.insync.replicas", int, 1, "Minimum in-sync replicas.", at_least=1),
    ]
}

# Topic-level keys and the broker key each defaults to.
TOPIC_KEYS: dict[str, str | None] = {
    "segment.bytes": "log.segment.bytes",
    "segment.ms": None,
    "retention.ms": None,
    "retention.bytes": "log.retention.bytes",
    "cleanup.policy": "log.cleanup.policy",
    "message.timestamp.type": "log.message.timestamp.type",
    "max.message.bytes": "message.max.bytes",
    "flush.messages": "log.flush.interval.messages",
    "flush.ms": None,
    "index.interval.bytes": "log.index.interval.bytes",
    "segment.index.bytes": "log.index.size.max.bytes",
    "min.insync.replicas": "min.insync.replicas",
}


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


class BrokerConfig:
    """Typed broker settings; unknown keys are rejected with a clear message."""

    def __init__(self, overrides: Mapping[str, str] | None = None) -> None:
        self._values: dict[str, Any] = {k.name: k.default for k in BROKER_KEYS.values()}
        for name, text in (overrides or {}).items():
            key = BROKER_KEYS.get(name)
            if key is None:
                raise ValueError(f"unknown broker config {name!r}")
            try:
                self._values[name] = key.parse(text)
            except ValueError as exc:
                raise ValueError(f"bad value for {name}: {text!r} ({exc})") from None
            key.check(self._values[name])
        for name in ("default.replication.factor", "offsets.topic.replication.factor"):
            if self._values[name] > 1:
                raise ValueError(
                    f"Invalid value {self._values[name]} for configuration {name}: "
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

    def __getitem__(self, name: str) -> Any:
        return self._values[name]

    def items(self) -> Iterable[tuple[str, Any]]:
        return self._values.items()

    # Derived values, resolved the way Kafka resolves them.
    @property
    def log_roll_ms(self) -> int:
        roll = self["log.roll.ms"]
        return roll if roll is not None else self["log.roll.hours"] * 3_600_000

    @property
    def log_retention_ms(self) -> int:
        if self["log.retention.ms"] is not None:
            return int(self["log.retention.ms"])
        if self["log.retention.minutes"] is not None:
            return int(self["log.retention.minutes"]) * 60_000
        return int(self["log.retention.hours"]) * 3_600_000

    @property
    def log_flush_ms(self) -> int:
        flush = self["log.flush.interval.ms"]
        return flush if flush is not None else self["log.flush.scheduler.interval.ms"]

    def topic_defaults(self) -> dict[str, str]:
        """Topic-level config values as strings, as DescribeConfigs shows them."""
        out: dict[str, str] = {}
        for topic_key, broker_key in TOPIC_KEYS.items():
            if broker_key is not None:
                out[topic_key] = str(self[broker_key])
        out["segment.ms"] = str(self.log_roll_ms)
        out["retention.ms"] = str(self.log_retention_ms)
        out["flush.ms"] = str(self.log_flush_ms)
        return out


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

    @classmethod
    def resolve(cls, broker: BrokerConfig, topic_overrides: Mapping[str, str]) -> LogConfig:
        """Merge broker defaults with per-topic overrides; bad values raise KafkaError."""
        values = broker.topic_defaults()
        for name, value in topic_overrides.items():
            if name not in TOPIC_KEYS:
                raise KafkaError(ErrorCode.invalid_config, f"unknown topic config {name!r}")
            values[name] = value
        try:
            ts_type = values["message.timestamp.type"]
            if ts_type not in ("CreateTime", "LogAppendTime"):
                raise ValueError(ts_type)
            if values["cleanup.policy"] not in (
                "delete",
                "compact",
                "compact,delete",
                "delete,compact",
            ):
                raise ValueError(values["cleanup.policy"])
            config = cls(
                segment_bytes=int(values["segment.bytes"]),
                segment_ms=int(values["segment.ms"]),
                retention_ms=int(values["retention.ms"]),
                retention_bytes=int(values["retention.bytes"]),
                cleanup_policy=values["cleanup.policy"],
                log_append_time=ts_type == "LogAppendTime",
                max_message_bytes=int(values["max.message.bytes"]),
                flush_messages=int(values["flush.messages"]),
                flush_ms=int(values["flush.ms"]),
                index_interval_bytes=int(values["index.interval.bytes"]),
                segment_index_bytes=int(values["segment.index.bytes"]),
            )
        except ValueError as exc:
            raise KafkaError(ErrorCode.invalid_config, f"bad topic config: {exc}") from None
        if config.segment_bytes < 14:
            raise KafkaError(ErrorCode.invalid_config, "segment.bytes too small")
        return config
