"""Options of the ``oncelog`` data source, by the names Spark's Kafka source and sink use.

Spark hands a data source its options as a case-insensitive mapping of strings; everything
here takes any ``Mapping[str, str]`` and looks names up case-insensitively. Pure: no I/O.

Source: ``kafka.bootstrap.servers`` (required), exactly one of ``subscribe`` (comma list),
``subscribePattern`` (Java-style regex, matched whole) or ``assign`` (JSON
``{"topic":[0,1]}``); ``startingOffsets`` / ``endingOffsets`` (``earliest``, ``latest`` or
JSON ``{"topic":{"0":23,"1":-2}}`` with -2 earliest, -1 latest); ``maxOffsetsPerTrigger``,
``minOffsetsPerTrigger``, ``maxTriggerDelay``; ``failOnDataLoss`` (default true);
``includeHeaders`` (default false); ``minPartitions``; ``kafka.isolation.level``
(``read_committed`` by default here; Spark's Kafka source defaults to read_uncommitted).

Every ``kafka.*`` option is an oncelog.client setting with the prefix removed, security
included (``kafka.security.protocol``, ``kafka.sasl.mechanism``, ``kafka.sasl.jaas.config``,
``kafka.ssl.truststore.location``, ...), for the reader, the sink and their admin clients.

Sink: ``topic`` (unless every row has a ``topic`` column), ``kafka.*`` producer settings, and
oncelog's own: ``oncelog.transactional.id.prefix`` (default ``oncelog-spark``),
``oncelog.delivery`` (``exactly_once``, the default, or ``at_least_once``),
``oncelog.query.id`` (normally read from the checkpoint's metadata file).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "EARLIEST",
    "LATEST",
    "OptionError",
    "SinkOptions",
    "SourceOptions",
    "kafka_params",
    "parse_duration_ms",
    "parse_offset_spec",
]

EARLIEST = -2
LATEST = -1

# Settings that the connector decides itself; a user's value is refused (Spark's Kafka
# source refuses the same ones, for the same reason: they would break its bookkeeping).
_SOURCE_FORBIDDEN = ("group.id", "auto.offset.reset", "enable.auto.commit")
_SINK_FORBIDDEN = ("transactional.id", "transaction.two.phase.commit.enable")


class OptionError(ValueError):
    """An option is missing, unknown in that combination, or has a bad value."""


def _get(options: Mapping[str, str], name: str) -> str | None:
    wanted = name.lower()
    for key, value in options.items():
        if key.lower() == wanted:
            return None if value is None else str(value)
    return None


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    text = _get(options, name)
    if text is None:
        return default
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise OptionError(f"option {name} must be true or false, not {text!r}")


def _positive_int(options: Mapping[str, str], name: str) -> int | None:
    text = _get(options, name)
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        raise OptionError(f"option {name} must be an integer, not {text!r}") from None
    if value <= 0:
        raise OptionError(f"option {name} must be positive, not {value}")
    return value


_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|h|d)?\s*$", re.IGNORECASE)
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(text: str) -> int:
    """``"15m"``, ``"30s"``, ``"500ms"``, ``"2h"`` or a bare number of milliseconds."""
    match = _DURATION.match(text)
    if match is None:
        raise OptionError(f"not a duration: {text!r} (use e.g. 500ms, 30s, 15m, 1h)")
    return int(match.group(1)) * _UNIT_MS[(match.group(2) or "ms").lower()]


def parse_offset_spec(text: str, name: str) -> str | dict[tuple[str, int], int]:
    """``earliest`` / ``latest``, or the JSON form as {(topic, partition): offset} where
    offset -2 means earliest and -1 latest."""
    stripped = text.strip()
    if stripped.lower() in ("earliest", "latest"):
        return stripped.lower()
    try:
        raw = json.loads(stripped)
    except json.JSONDecodeError:
        raise OptionError(f"option {name}: expected earliest, latest or JSON: {text!r}") from None
    if not isinstance(raw, dict):
        raise OptionError(f"option {name}: JSON must be an object of topics: {text!r}")
    out: dict[tuple[str, int], int] = {}
    for topic, parts in raw.items():
        if not isinstance(parts, dict):
            raise OptionError(f"option {name}: {topic!r} must map partitions to offsets")
        for part, offset in parts.items():
            try:
                partition, value = int(part), int(offset)
            except (TypeError, ValueError):
                raise OptionError(
                    f"option {name}: bad partition/offset {part!r}: {offset!r}"
                ) from None
            if partition < 0 or value < EARLIEST:
                raise OptionError(f"option {name}: bad partition/offset {part!r}: {offset!r}")
            out[(str(topic), partition)] = value
    return out


def kafka_params(options: Mapping[str, str], forbidden: tuple[str, ...] = ()) -> dict[str, str]:
    """The ``kafka.*`` options with the prefix removed: the client configuration."""
    params: dict[str, str] = {}
    for key, value in options.items():
        if key.lower().startswith("kafka."):
            name = key[len("kafka.") :]
            if name.lower() in forbidden:
                raise OptionError(f"option kafka.{name} is set by the oncelog connector")
            params[name] = str(value)
    if not params.get("bootstrap.servers"):
        raise OptionError("option kafka.bootstrap.servers is required")
    return params


@dataclass(frozen=True)
class SourceOptions:
    """The reader's options, parsed and checked."""

    kafka: dict[str, str]
    subscribe: tuple[str, ...] = ()
    subscribe_pattern: str | None = None
    assign: tuple[tuple[str, int], ...] = ()
    starting: str | dict[tuple[str, int], int] = "latest"
    ending: str | dict[tuple[str, int], int] = "latest"
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60_000
    fail_on_data_loss: bool = True
    include_headers: bool = False
    min_partitions: int | None = None
    read_committed: bool = True

    @classmethod
    def parse(cls, options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
        kafka = kafka_params(options, _SOURCE_FORBIDDEN)
        kafka.setdefault("isolation.level", "read_committed")
        isolation = kafka["isolation.level"].strip().lower()
        if isolation not in ("read_committed", "read_uncommitted"):
            raise OptionError(
                f"kafka.isolation.level must be read_committed or "
                f"read_uncommitted, not {isolation!r}"
            )
        given = [n for n in ("subscribe", "subscribePattern", "assign") if _get(options, n)]
        if len(given) != 1:
            raise OptionError(
                "exactly one of subscribe, subscribePattern or assign is required"
                + (f" (got {', '.join(given)})" if given else "")
            )
        subscribe: tuple[str, ...] = ()
        pattern: str | None = None
        assign: tuple[tuple[str, int], ...] = ()
        if given[0] == "subscribe":
            subscribe = tuple(t.strip() for t in (_get(options, "subscribe") or "").split(","))
            subscribe = tuple(t for t in subscribe if t)
            if not subscribe:
                raise OptionError("option subscribe names no topic")
        elif given[0] == "subscribePattern":
            pattern = _get(options, "subscribePattern")
            try:
                re.compile(pattern or "")
            except re.error as exc:
                raise OptionError(f"option subscribePattern: {exc}") from None
        else:
            assign = _parse_assign(_get(options, "assign") or "")
        starting = parse_offset_spec(
            _get(options, "startingOffsets") or ("latest" if streaming else "earliest"),
            "startingOffsets",
        )
        ending_text = _get(options, "endingOffsets")
        if streaming and ending_text is not None:
            raise OptionError("option endingOffsets is for batch queries only")
        ending = parse_offset_spec(ending_text or "latest", "endingOffsets")
        if ending == "earliest" or (
            isinstance(ending, dict) and any(v == EARLIEST for v in ending.values())
        ):
            raise OptionError("option endingOffsets cannot be earliest")
        if not streaming and (
            starting == "latest"
            or (isinstance(starting, dict) and any(v == LATEST for v in starting.values()))
        ):
            raise OptionError("option startingOffsets cannot be latest in a batch query")
        delay_text = _get(options, "maxTriggerDelay")
        return cls(
            kafka=kafka,
            subscribe=subscribe,
            subscribe_pattern=pattern,
            assign=assign,
            starting=starting,
            ending=ending,
            max_offsets_per_trigger=_positive_int(options, "maxOffsetsPerTrigger"),
            min_offsets_per_trigger=_positive_int(options, "minOffsetsPerTrigger"),
            max_trigger_delay_ms=(
                parse_duration_ms(delay_text) if delay_text is not None else 15 * 60_000
            ),
            fail_on_data_loss=_bool(options, "failOnDataLoss", True),
            include_headers=_bool(options, "includeHeaders", False),
            min_partitions=_positive_int(options, "minPartitions"),
            read_committed=isolation == "read_committed",
        )

    def matches(self, topic: str) -> bool:
        """Is ``topic`` one this source reads (for subscribe / subscribePattern)?"""
        if self.subscribe:
            return topic in self.subscribe
        if self.subscribe_pattern is not None:
            return re.fullmatch(self.subscribe_pattern, topic) is not None
        return any(t == topic for t, _ in self.assign)


def _parse_assign(text: str) -> tuple[tuple[str, int], ...]:
    try:
        raw = json.loads(text)
    except json.JSONDecodeError:
        raise OptionError(f'option assign must be JSON like {{"t":[0,1]}}: {text!r}') from None
    if not isinstance(raw, dict) or not raw:
        raise OptionError(f"option assign must be a non-empty JSON object: {text!r}")
    out: list[tuple[str, int]] = []
    for topic, parts in raw.items():
        if not isinstance(parts, list) or not all(isinstance(p, int) and p >= 0 for p in parts):
            raise OptionError(f"option assign: {topic!r} must list partition numbers")
        out.extend((str(topic), p) for p in parts)
    return tuple(sorted(set(out)))


DELIVERY_EXACTLY_ONCE = "exactly_once"
DELIVERY_AT_LEAST_ONCE = "at_least_once"


@dataclass(frozen=True)
class SinkOptions:
    """The writer's options, parsed and checked."""

    kafka: dict[str, str]
    topic: str | None = None
    txn_id_prefix: str = "oncelog-spark"
    delivery: str = DELIVERY_EXACTLY_ONCE
    query_id: str | None = None
    checkpoint_location: str | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SinkOptions:
        kafka = kafka_params(options, _SINK_FORBIDDEN)
        delivery = (_get(options, "oncelog.delivery") or DELIVERY_EXACTLY_ONCE).strip().lower()
        if delivery not in (DELIVERY_EXACTLY_ONCE, DELIVERY_AT_LEAST_ONCE):
            raise OptionError(
                f"option oncelog.delivery must be {DELIVERY_EXACTLY_ONCE} or "
                f"{DELIVERY_AT_LEAST_ONCE}, not {delivery!r}"
            )
        prefix = _get(options, "oncelog.transactional.id.prefix") or "oncelog-spark"
        if not re.fullmatch(r"[A-Za-z0-9._-]+", prefix):
            raise OptionError(
                f"option oncelog.transactional.id.prefix {prefix!r}: "
                "use letters, digits, '.', '_' and '-'"
            )
        return cls(
            kafka=kafka,
            topic=_get(options, "topic"),
            txn_id_prefix=prefix,
            delivery=delivery,
            query_id=_get(options, "oncelog.query.id"),
            checkpoint_location=_get(options, "checkpointLocation"),
        )
