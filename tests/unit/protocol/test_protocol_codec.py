"""Request framing and decoding: golden bytes from a real client, round trips, and fuzzing
that may only ever produce KafkaError."""

from __future__ import annotations

import io
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.api_versions.v3 import ApiVersionsRequest
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer

from oncelog.broker import api
from oncelog.errors import KafkaError
from oncelog.protocol.codec import (
    FrameTooLarge,
    decode_request,
    encode_response,
    frame_size,
    parse_request_header,
)

api.load_all()

# Captured from librdkafka 2.16 (confluent-kafka): Metadata v12 asking for every topic. It
# carries three bytes past the schema's end, which Kafka's parser ignores and so do we.
LIBRDKAFKA_METADATA_V12 = bytes.fromhex("0003000c00000003000772646b61666b610000000000010000")


def test_librdkafka_metadata_v12_golden() -> None:
    header, body = decode_request(LIBRDKAFKA_METADATA_V12)
    assert (header.api_key, header.api_version, header.correlation_id) == (3, 12, 3)
    assert header.client_id == "rdkafka"
    assert body.topics is None
    assert body.allow_auto_topic_creation is False


def _api_versions_frame(version: int, correlation: int, client_id: str) -> bytes:
    body = io.BytesIO()
    entity_writer(ApiVersionsRequest)(
        body, ApiVersionsRequest(client_software_name="t", client_software_version="1")
    )
    cid = client_id.encode()
    return struct.pack(">hhih", 18, version, correlation, len(cid)) + cid + b"\0" + body.getvalue()


def test_api_versions_round_trip() -> None:
    header, body = decode_request(_api_versions_frame(3, 42, "client-a"))
    assert header.correlation_id == 42 and header.client_id == "client-a"
    assert body.client_software_name == "t"


def test_frame_size_limits() -> None:
    assert frame_size(struct.pack(">i", 100), 100) == 100
    with pytest.raises(FrameTooLarge):
        frame_size(struct.pack(">i", 101), 100)
    with pytest.raises(FrameTooLarge):
        frame_size(struct.pack(">i", -1), 100)


def test_response_header_is_v0_for_api_versions() -> None:
    from oncelog.broker.api.api_versions import unsupported_version_response

    frame = encode_response(18, 0, 9, unsupported_version_response())
    size, correlation, error = struct.unpack_from(">iih", frame, 0)
    assert size == len(frame) - 4 and correlation == 9
    assert error == ErrorCode.unsupported_version


def test_every_served_version_has_schemas() -> None:
    from oncelog.protocol.codec import request_schema, response_writer

    for key, (low, high) in api.SUPPORTED.items():
        for version in range(low, high + 1):
            request_schema(key, version)
            response_writer(key, version)


@given(st.binary(max_size=200))
def test_random_frames_only_raise_kafka_errors(data: bytes) -> None:
    try:
        head = parse_request_header(data)
    except KafkaError:
        return
    supported = api.SUPPORTED.get(head.api_key)
    if supported is None or not supported[0] <= head.api_version <= supported[1]:
        return
    try:
        decode_request(data)
    except KafkaError as exc:
        assert exc.code == ErrorCode.invalid_request


@given(
    st.sampled_from(sorted(api.SUPPORTED)),
    st.data(),
    st.binary(max_size=120),
)
def test_garbage_bodies_for_every_api_only_raise_invalid_request(
    api_key: int, data: st.DataObject, body: bytes
) -> None:
    low, high = api.SUPPORTED[api_key]
    version = data.draw(st.integers(low, high))
    frame = struct.pack(">hhih", api_key, version, 1, 1) + b"x" + b"\0" + body
    try:
        decode_request(frame)
    except KafkaError as exc:
        assert exc.code == ErrorCode.invalid_request


@given(st.integers(0, 60), st.integers(0, 255))
def test_bit_flips_in_a_valid_request(position: int, value: int) -> None:
    frame = bytearray(_api_versions_frame(3, 1, "abc"))
    frame[position % len(frame)] = value
    try:
        decode_request(bytes(frame))
    except KafkaError as exc:
        assert exc.code in (ErrorCode.invalid_request, ErrorCode.unsupported_version)
