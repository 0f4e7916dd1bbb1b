"""oncelog.protocol.error_response: every served API key and version has an error response
that encodes, decodes, carries the error code everywhere, and mirrors the request's keys."""

from __future__ import annotations

import dataclasses
import datetime
import uuid
from typing import Any

import pytest
from kio.index import load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.produce.v9.request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from kio.schema.types import TopicName
from kio.serial import entity_reader
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    is_optional,
)
from kio.static.primitive import Records, i16, i32, i32Timedelta

from oncelog.broker import api
from oncelog.protocol.codec import encode_response, request_schema
from oncelog.protocol.error_response import error_response

api.load_all()
SERVED = [
    (key, version)
    for key, (low, high) in sorted(api.SUPPORTED.items())
    for version in range(low, high + 1)
]


def _sample_scalar(f: dataclasses.Field[Any], kafka_type: str) -> Any:
    if kafka_type.startswith("timedelta"):
        return datetime.timedelta(milliseconds=5)
    if kafka_type.startswith("datetime"):
        return datetime.datetime.fromtimestamp(1, tz=datetime.UTC)
    if kafka_type == "bool":
        return False
    if kafka_type == "string":
        return f"{f.name}-x"
    if kafka_type in ("bytes", "records"):
        return b""
    if kafka_type == "uuid":
        return uuid.UUID(int=7)
    if kafka_type.startswith("int8"):
        return 1
    return 3


def sample(cls: type) -> Any:
    """An instance of a kio request class with one entry in every list."""
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        kind = classify_field(f)
        kafka_type = f.metadata.get("kafka_type", "")
        if isinstance(kind, EntityTupleField):
            kwargs[f.name] = (sample(kind.type_),)
        elif isinstance(kind, EntityField):
            kwargs[f.name] = sample(kind.type_)
        elif isinstance(kind, PrimitiveTupleField):
            kwargs[f.name] = (_sample_scalar(f, kafka_type),)
        elif is_optional(f) and kafka_type == "uuid":
            kwargs[f.name] = None
        else:
            kwargs[f.name] = _sample_scalar(f, kafka_type)
    return cls(**kwargs)


def error_codes(entity: Any) -> list[ErrorCode]:
    found: list[ErrorCode] = []
    for f in dataclasses.fields(entity):
        value = getattr(entity, f.name)
        if f.metadata.get("kafka_type") == "error_code":
            found.append(value)
        elif isinstance(value, tuple):
            for item in value:
                if dataclasses.is_dataclass(item):
                    found += error_codes(item)
        elif dataclasses.is_dataclass(value):
            found += error_codes(value)
    return found


@pytest.mark.parametrize(("api_key", "version"), SERVED, ids=[f"{k}v{v}" for k, v in SERVED])
def test_every_served_api_has_an_error_response(api_key: int, version: int) -> None:
    request_cls = request_schema(api_key, version)[0]
    request = sample(request_cls)
    response = error_response(
        api_key, version, request, ErrorCode.unknown_server_error, "handler failed"
    )
    frame = encode_response(api_key, version, 42, response)
    response_cls = load_response_schema(api_key, version)
    header_size = 4 + 4 + (1 if response_cls.__flexible__ and api_key != 18 else 0)
    decoded, _ = entity_reader(response_cls)(frame, header_size)
    codes = error_codes(decoded)
    assert codes, f"no error code anywhere in {decoded}"
    assert set(codes) == {ErrorCode.unknown_server_error}


def test_partition_keys_are_mirrored_from_the_request() -> None:
    request = ProduceRequest(
        transactional_id=None,
        acks=i16(-1),
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=5)),
        topic_data=(
            TopicProduceData(
                name=TopicName("a"),
                partition_data=(
                    PartitionProduceData(index=i32(0), records=Records(b"")),
                    PartitionProduceData(index=i32(4), records=Records(b"")),
                ),
            ),
            TopicProduceData(
                name=TopicName("b"),
                partition_data=(PartitionProduceData(index=i32(2), records=Records(b"")),),
            ),
        ),
    )
    response = error_response(0, 9, request, ErrorCode.kafka_storage_error)
    got = [
        (t.name, p.index, p.error_code, p.base_offset)
        for t in response.responses
        for p in t.partition_responses
    ]
    assert got == [
        ("a", 0, ErrorCode.kafka_storage_error, -1),
        ("a", 4, ErrorCode.kafka_storage_error, -1),
        ("b", 2, ErrorCode.kafka_storage_error, -1),
    ]
