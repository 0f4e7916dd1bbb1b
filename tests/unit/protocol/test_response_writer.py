"""The compiled response writer (``oncelog.protocol.writer``) writes exactly kio's bytes:
for every response version the broker serves, random entities (hypothesis, from kio's
types) encoded both ways, plus the hot transactional answers built as the handlers build
them, tagged fields set and unset."""

from __future__ import annotations

import io
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer
from kio.static.primitive import Records

from oncelog.broker import api
from oncelog.protocol.build import make, response_module
from oncelog.protocol.codec import encode_response
from oncelog.protocol.writer import body_writer

api.load_all()
st.register_type_strategy(Records, st.binary(max_size=40).map(Records))

SERVED = [(key, version) for key, (low, high) in sorted(api.SUPPORTED.items())
          for version in range(low, high + 1)]


def kio_bytes(cls: type, entity: Any) -> bytes:
    buffer = io.BytesIO()
    entity_writer(cls)(buffer, entity)
    return buffer.getvalue()


def compiled_bytes(cls: type, entity: Any) -> bytes:
    out = bytearray()
    body_writer(cls)(out, entity)
    return bytes(out)


@pytest.mark.parametrize(("api_key", "version"), SERVED)
def test_every_served_response_encodes_as_kio_does(api_key: int, version: int) -> None:
    cls = load_response_schema(api_key, version)

    @settings(max_examples=2, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.from_type(cls))
    def check(entity: Any) -> None:
        assert compiled_bytes(cls, entity) == kio_bytes(cls, entity)

    check()


@pytest.mark.parametrize("version", [0, 3])
def test_add_partitions_to_txn_answer(version: int) -> None:
    mod = response_module(24, version)
    cls = load_response_schema(24, version)
    results = tuple(
        make(mod.AddPartitionsToTxnTopicResult, name=f"topic-{t}", results_by_partition=tuple(
            make(mod.AddPartitionsToTxnPartitionResult, partition_index=p,
                 partition_error_code=ErrorCode.none if p else ErrorCode.concurrent_transactions)
            for p in range(3)))
        for t in range(200)  # a name list past 127 entries: a two-byte compact length
    )
    body = make(cls, throttle_time=5, results_by_topic_v3_and_below=results)
    assert compiled_bytes(cls, body) == kio_bytes(cls, body)
    frame = encode_response(24, version, 77, body)
    assert frame[4:8] == (77).to_bytes(4, "big")
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4


@pytest.mark.parametrize("version", [0, 3, 5])
def test_end_txn_answer_with_and_without_tagged_fields(version: int) -> None:
    cls = load_response_schema(26, version)
    for values in ({}, {"producer_id": 7, "producer_epoch": 3}):
        body = make(cls, throttle_time=0, error_code=ErrorCode.producer_fenced, **values)
        assert compiled_bytes(cls, body) == kio_bytes(cls, body)
