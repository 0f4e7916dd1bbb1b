"""Client framing against the shared protocol codec the broker uses, and negotiation."""

from __future__ import annotations

import pytest

from oncelog.client.wire import (
    CLIENT_VERSIONS,
    decode_response,
    encode_request,
    negotiate,
    nested,
    request,
)
from oncelog.protocol import versions as api
from oncelog.protocol.build import make, response_module
from oncelog.protocol.codec import decode_request, encode_response


@pytest.mark.parametrize("version", [3, 7, 11])
def test_produce_request_decodes_with_the_protocol_codec(version: int) -> None:
    body = request(
        api.PRODUCE,
        version,
        transactional_id="tx",
        acks=-1,
        timeout=1500,
        topic_data=(
            nested(
                api.PRODUCE,
                version,
                "TopicProduceData",
                name="t",
                partition_data=(
                    nested(api.PRODUCE, version, "PartitionProduceData", index=2, records=b"abc"),
                ),
            ),
        ),
    )
    frame = encode_request(77, "client-x", body)
    header, decoded = decode_request(frame[4:])
    assert (header.api_key, header.api_version, header.correlation_id) == (0, version, 77)
    assert header.client_id == "client-x"
    assert decoded == body


def test_null_client_id() -> None:
    body = request(api.API_VERSIONS, 0)
    header, _ = decode_request(encode_request(1, None, body)[4:])
    assert header.client_id is None


@pytest.mark.parametrize("version", [1, 9, 12])
def test_metadata_response_round_trip(version: int) -> None:
    mod = response_module(api.METADATA, version)
    body = make(
        mod.MetadataResponse,
        throttle_time=0,
        brokers=(make(mod.MetadataResponseBroker, node_id=1, host="h", port=9, rack=None),),
        cluster_id="c",
        controller_id=1,
        topics=(),
        cluster_authorized_operations=-2147483648,
    )
    frame = encode_response(api.METADATA, version, 5, body)
    assert decode_response(api.METADATA, version, frame[4:]) == body


def test_api_versions_response_uses_header_v0() -> None:
    mod = response_module(api.API_VERSIONS, 3)
    body = make(mod.ApiVersionsResponse, error_code=0, api_keys=(), throttle_time=0)
    frame = encode_response(api.API_VERSIONS, 3, 9, body)
    assert decode_response(api.API_VERSIONS, 3, frame[4:]) == body


def test_negotiate_picks_highest_common_version() -> None:
    assert negotiate(api.PRODUCE, (0, 13)) == CLIENT_VERSIONS[api.PRODUCE][1]
    assert negotiate(api.PRODUCE, (3, 9)) == 9
    assert negotiate(api.INIT_PRODUCER_ID, (0, 5)) == 5
    assert negotiate(api.INIT_PRODUCER_ID, (0, 6)) == 6
    assert negotiate(api.FETCH, (0, 3)) is None  # no overlap
    assert negotiate(api.FETCH, None) is None  # broker lacks the API
    assert negotiate(9999, (0, 1)) is None


def test_client_versions_exist_in_kio() -> None:
    from kio.index import load_request_schema, load_response_schema

    for api_key, (low, high) in CLIENT_VERSIONS.items():
        for version in (low, high):
            load_request_schema(api_key, version)
            load_response_schema(api_key, version)
