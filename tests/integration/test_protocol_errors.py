"""Bad input against a real broker: each gets Kafka's error code or a logged close, and the
broker keeps serving afterwards."""

from __future__ import annotations

import datetime
import struct

import pytest
from kio.schema.api_versions.v3 import ApiVersionsRequest
from kio.schema.create_topics.v5.request import CreatableTopic, CreateTopicsRequest
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.request import MetadataRequest
from kio.schema.types import TopicName
from kio.static.primitive import i16, i32, i32Timedelta
from rawkafka import RawConnection
from rawkafka import produce as raw_produce

from oncelog.harness.broker import BrokerProcess
from oncelog.records.codec import RecordInput, encode_batch
from tests.conftest import BrokerFactory

pytestmark = pytest.mark.integration


def alive(bootstrap: str) -> bool:
    conn = RawConnection(bootstrap)
    try:
        resp = conn.request(
            ApiVersionsRequest(client_software_name="t", client_software_version="1")
        )
        return resp.error_code == ErrorCode.none
    finally:
        conn.close()


def produce(bootstrap: str, topic: str, records: bytes, index: int = 0) -> ErrorCode:
    conn = RawConnection(bootstrap)
    try:
        return raw_produce(conn, topic, records, index=index).error_code
    finally:
        conn.close()


def create_topic(bootstrap: str, name: str) -> ErrorCode:
    conn = RawConnection(bootstrap)
    try:
        resp = conn.request(
            CreateTopicsRequest(
                topics=(
                    CreatableTopic(
                        name=TopicName(name),
                        num_partitions=i32(1),
                        replication_factor=i16(1),
                        assignments=(),
                        configs=(),
                    ),
                ),
                timeout=i32Timedelta.parse(datetime.timedelta(seconds=5)),
                validate_only=False,
            )
        )
        return resp.topics[0].error_code
    finally:
        conn.close()


def test_unsupported_api_versions_version_gets_v0_answer(shared_broker: BrokerProcess) -> None:
    conn = RawConnection(shared_broker.bootstrap)
    conn.send_frame(conn.header(18, 99, flexible=False))
    frame = conn.recv_frame()
    assert frame is not None
    correlation, error = struct.unpack_from(">ih", frame, 0)
    assert correlation == conn.correlation
    assert error == ErrorCode.unsupported_version
    (count,) = struct.unpack_from(">i", frame, 6)
    keys = {struct.unpack_from(">h", frame, 10 + 6 * i)[0] for i in range(count)}
    assert 18 in keys and 0 in keys and 1 in keys
    conn.close()


def test_unknown_api_key_closes_connection(shared_broker: BrokerProcess) -> None:
    conn = RawConnection(shared_broker.bootstrap)
    conn.send_frame(conn.header(9999, 0, flexible=False))
    assert conn.recv_frame() is None
    conn.close()
    assert alive(shared_broker.bootstrap)


def test_unsupported_version_of_other_api_closes_connection(shared_broker: BrokerProcess) -> None:
    conn = RawConnection(shared_broker.bootstrap)
    conn.send_frame(conn.header(3, 200, flexible=False))
    assert conn.recv_frame() is None
    conn.close()
    assert alive(shared_broker.bootstrap)


@pytest.mark.parametrize("garbage", [b"", b"\x01", b"\xff" * 7, b"\x00\x05abc"])
def test_truncated_or_malformed_body_closes_connection(
    shared_broker: BrokerProcess, garbage: bytes
) -> None:
    conn = RawConnection(shared_broker.bootstrap)
    conn.send_frame(conn.header(3, 9, flexible=True) + garbage)
    assert conn.recv_frame() is None
    conn.close()
    assert alive(shared_broker.bootstrap)


def test_truncated_header_closes_connection(shared_broker: BrokerProcess) -> None:
    conn = RawConnection(shared_broker.bootstrap)
    conn.send_frame(b"\x00\x03")
    assert conn.recv_frame() is None
    conn.close()
    assert alive(shared_broker.bootstrap)


def test_frame_over_socket_request_max_bytes_closes_connection(
    broker_factory: BrokerFactory,
) -> None:
    broker = broker_factory(configs={"socket.request.max.bytes": "1000"})
    conn = RawConnection(broker.bootstrap)
    conn.sock.sendall(struct.pack(">i", 5000) + b"\0" * 100)
    assert conn.recv_frame() is None
    conn.close()
    conn = RawConnection(broker.bootstrap)
    conn.sock.sendall(struct.pack(">i", -5))
    assert conn.recv_frame() is None
    conn.close()
    assert alive(broker.bootstrap)


def test_metadata_works_over_raw_connection(shared_broker: BrokerProcess) -> None:
    conn = RawConnection(shared_broker.bootstrap)
    resp = conn.request(
        MetadataRequest(
            topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
        )
    )
    names = {t.name for t in resp.topics}
    assert "__consumer_offsets" in names
    conn.close()


def test_produce_errors(shared_broker: BrokerProcess) -> None:
    bootstrap = shared_broker.bootstrap
    assert create_topic(bootstrap, "errs") == ErrorCode.none
    good = encode_batch([RecordInput(key=b"k", value=b"v")])
    assert produce(bootstrap, "errs", good) == ErrorCode.none

    bad_crc = bytearray(good)
    bad_crc[-1] ^= 0xFF
    assert produce(bootstrap, "errs", bytes(bad_crc)) == ErrorCode.corrupt_message

    old_magic = bytearray(good)
    old_magic[16] = 1
    assert produce(bootstrap, "errs", bytes(old_magic)) == ErrorCode.unsupported_for_message_format

    assert produce(bootstrap, "errs", good[:30]) == ErrorCode.corrupt_message
    assert produce(bootstrap, "no-such-topic-x", good) == ErrorCode.unknown_topic_or_partition
    assert produce(bootstrap, "__consumer_offsets", good) == ErrorCode.invalid_topic_exception

    big = encode_batch([RecordInput(key=b"k", value=b"x" * 2_000_000)])
    assert produce(bootstrap, "errs", big) == ErrorCode.message_too_large
    assert alive(bootstrap)


@pytest.mark.parametrize(
    ("name", "code"),
    [
        ("bad name", ErrorCode.invalid_topic_exception),
        ("a" * 250, ErrorCode.invalid_topic_exception),
        ("..", ErrorCode.invalid_topic_exception),
        ("ok.topic_name-1", ErrorCode.none),
    ],
)
def test_create_topic_names(shared_broker: BrokerProcess, name: str, code: ErrorCode) -> None:
    assert create_topic(shared_broker.bootstrap, name) == code


def test_create_existing_topic(shared_broker: BrokerProcess) -> None:
    assert create_topic(shared_broker.bootstrap, "twice") == ErrorCode.none
    assert create_topic(shared_broker.bootstrap, "twice") == ErrorCode.topic_already_exists
