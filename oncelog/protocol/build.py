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


def make(cls: type[T], /, **values: Any) -> T:
    """Instantiate ``cls`` with those of ``values`` it has fields for."""
    plan = _field_plan(cls)  # type: ignore[arg-type]
    kwargs: dict[str, Any] = {}
    for name, value in values.items():
        kind = plan.get(name)
        if kind is None:
            continue
        if kind == _CONVERT_TIMEDELTA and isinstance(value, int):
            value = datetime.timedelta(milliseconds=value)
        elif kind == _CONVERT_ERROR and not isinstance(value, ErrorCode):
            value = ErrorCode(value)
        kwargs[name] = value
    missing = _required(cls) - kwargs.keys()  # type: ignore[arg-type]
    if missing:
        raise TypeError(f"{cls.__qualname__} v{getattr(cls, '__version__', '?')} needs {missing}")
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
