"""oncelog.broker.server: a request whose handler fails is still answered, with the
handler's KafkaError code or UNKNOWN_SERVER_ERROR in every entry (Kafka answers every request)."""

from __future__ import annotations

import asyncio
import datetime
import io
import struct
from types import SimpleNamespace
from typing import Any

import pytest
from kio.index import load_response_schema
from kio.schema.create_topics.v5.request import CreatableTopic, CreateTopicsRequest
from kio.schema.errors import ErrorCode
from kio.schema.produce.v8.request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from kio.schema.types import TopicName
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import Records, i16, i32, i32Timedelta

from oncelog.broker import api
from oncelog.broker.api import HANDLERS, RequestContext
from oncelog.broker.server import Server
from oncelog.config import BrokerConfig
from oncelog.errors import KafkaError
from oncelog.protocol import versions
from oncelog.security.principal import anonymous_session

api.load_all()


def frame_of(request: Any, correlation_id: int = 7) -> bytes:
    body = io.BytesIO()
    entity_writer(type(request))(body, request)
    head = struct.pack(
        ">hhih", int(request.__api_key__), int(request.__version__), correlation_id, 1
    ) + b"t"
    return head + (b"\0" if request.__flexible__ else b"") + body.getvalue()


def decode(request: Any, frame: bytes) -> Any:
    cls = load_response_schema(int(request.__api_key__), int(request.__version__))
    (size, correlation_id) = struct.unpack_from(">ii", frame, 0)
    assert size == len(frame) - 4 and correlation_id == 7
    pos = 8 + (1 if cls.__flexible__ else 0)
    return entity_reader(cls)(frame, pos)[0]


def handle(request: Any) -> bytes | bool | None:
    server = Server(BrokerConfig(), "127.0.0.1", 0, SimpleNamespace())  # type: ignore[arg-type]
    return asyncio.run(server._handle(frame_of(request), anonymous_session("client-host")))


CREATE = CreateTopicsRequest(
    topics=(
        CreatableTopic(name=TopicName("a"), num_partitions=i32(1), replication_factor=i16(1),
                       assignments=(), configs=()),
        CreatableTopic(name=TopicName("b"), num_partitions=i32(1), replication_factor=i16(1),
                       assignments=(), configs=()),
    ),
    timeout=i32Timedelta.parse(datetime.timedelta(seconds=1)),
    validate_only=False,
)


def produce(acks: int) -> ProduceRequest:
    return ProduceRequest(
        transactional_id=None,
        acks=i16(acks),
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=1)),
        topic_data=(
            TopicProduceData(name=TopicName("t"), partition_data=(
                PartitionProduceData(index=i32(0), records=Records(b"")),
                PartitionProduceData(index=i32(1), records=Records(b"")),
            )),
        ),
    )


async def _raise_runtime(ctx: RequestContext, request: Any) -> Any:
    raise RuntimeError("boom")


async def _raise_storage(ctx: RequestContext, request: Any) -> Any:
    raise KafkaError(ErrorCode.kafka_storage_error, "disk gone")


def test_unexpected_exception_answers_unknown_server_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(HANDLERS, versions.CREATE_TOPICS, _raise_runtime)
    frame = handle(CREATE)
    assert isinstance(frame, bytes)
    response = decode(CREATE, frame)
    assert [(t.name, t.error_code) for t in response.topics] == [
        ("a", ErrorCode.unknown_server_error),
        ("b", ErrorCode.unknown_server_error),
    ]


def test_kafka_error_escaping_a_handler_answers_its_code(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(HANDLERS, versions.PRODUCE, _raise_storage)
    request = produce(acks=-1)
    frame = handle(request)
    assert isinstance(frame, bytes)
    response = decode(request, frame)
    assert [(p.index, p.error_code) for t in response.responses for p in t.partition_responses] \
        == [(0, ErrorCode.kafka_storage_error), (1, ErrorCode.kafka_storage_error)]


def test_failed_acks0_produce_closes_the_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(HANDLERS, versions.PRODUCE, _raise_runtime)
    assert handle(produce(acks=0)) is False
