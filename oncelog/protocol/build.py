"""Build kio response entities from one set of values for every API version.

A handler passes the superset of fields it knows; ``make`` keeps the fields that the
target version's class has and converts plain ints for timedelta and error-code fields.
So a handler is written once, not once per version.
"""

from __future__ import annotations

import datetime
import functools
from dataclasses import MISSING, fields
from types import ModuleType
from typing import Any, TypeVar

from kio.index import load_payload_module
from kio.schema.errors import ErrorCode
from kio.static.constants import EntityType

T = TypeVar("T")

_CONVERT_TIMEDELTA = 1
_CONVERT_ERROR = 2


@functools.cache
def _field_plan(cls: type) -> dict[str, int]:
    plan: dict[str, int] = {}
    for f in fields(cls):
        kafka_type = f.metadata.get("kafka_type", "")
        if kafka_type.startswith("timedelta"):
            plan[f.name] = _CONVERT_TIMEDELTA
        elif kafka_type == "error_code":
            plan[f.name] = _CONVERT_ERROR
        else:
            plan[f.name] = 0
    return plan


@functools.cache
def _required(cls: type) -> frozenset[str]:
    return frozenset(
        f.name
        for f in fields(cls)
        if f.default is MISSING and f.default_factory is MISSING and f.init
    )


@functools.cache
def _plan(cls: type, names: tuple[str, ...]) -> tuple[tuple[tuple[str, int], ...], bool]:
    """For the keyword names a call site passes: the (name, conversion) pairs ``cls`` has
    fields for, and whether they are all of them with no conversion (``cls(**values)``).
    Cached per class and set of names: a handler builds the same entities every time."""
    plan = _field_plan(cls)
    kept = tuple((name, plan[name]) for name in names if name in plan)
    missing = _required(cls) - {name for name, _ in kept}
    if missing:
        raise TypeError(f"{cls.__qualname__} v{getattr(cls, '__version__', '?')} needs {missing}")
    direct = len(kept) == len(names) and not any(kind for _, kind in kept)
    return kept, direct


def make(cls: type[T], /, **values: Any) -> T:
    """Instantiate ``cls`` with those of ``values`` it has fields for."""
    kept, direct = _plan(cls, tuple(values))  # type: ignore[arg-type]
    if direct:
        return cls(**values)
    kwargs: dict[str, Any] = {}
    for name, kind in kept:
        value = values[name]
        if kind == _CONVERT_TIMEDELTA:
            if isinstance(value, int):
                value = datetime.timedelta(milliseconds=value)
        elif kind == _CONVERT_ERROR and not isinstance(value, ErrorCode):
            value = ErrorCode(value)
        kwargs[name] = value
    return cls(**kwargs)


@functools.cache
def response_module(api_key: int, version: int) -> ModuleType:
    """The kio module holding the response classes (top-level and nested) of one version."""
    return load_payload_module(api_key, version, EntityType.response)


@functools.cache
def request_module(api_key: int, version: int) -> ModuleType:
    return load_payload_module(api_key, version, EntityType.request)


def has_field(cls: type, name: str) -> bool:
    return name in _field_plan(cls)


def to_ms(value: datetime.timedelta | int | None) -> int:
    """A kio timedelta field (or plain int) as integer milliseconds."""
    if value is None:
        return -1
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    return int(value)
