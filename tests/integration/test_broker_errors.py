"""Every request gets an answer, against a real ``oncelog serve``: a handler that raises is
answered with UNKNOWN_SERVER_ERROR on a connection that stays usable, and an I/O error on
one partition's files answers KAFKA_STORAGE_ERROR for that partition only."""

from __future__ import annotations

import datetime
import os

import pytest
from kio.schema.api_versions.v3 import ApiVersionsRequest
from kio.schema.create_topics.v5.request import CreatableTopic, CreateTopicsRequest
from kio.schema.errors import ErrorCode
from kio.schema.types import TopicName
from kio.static.primitive import i16, i32, i32Timedelta
from rawkafka import RawConnection
from test_protocol_errors import produce as produce_records

from oncelog.harness.broker import REPO_ROOT
from oncelog.records.codec import RecordInput, encode_batch
from tests.conftest import BrokerFactory

pytestmark = pytest.mark.integration


def env_with(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + path if path else "")
    env.update(extra)
    return env


def create_topic(conn: RawConnection, name: str, partitions: int) -> ErrorCode:
    response = conn.request(
        CreateTopicsRequest(
            topics=(
                CreatableTopic(name=TopicName(name), num_partitions=i32(partitions),
                               replication_factor=i16(1), assignments=(), configs=()),
            ),
            timeout=i32Timedelta.parse(datetime.timedelta(seconds=5)),
            validate_only=False,
        )
    )
    code: ErrorCode = response.topics[0].error_code
    return code


def produce(broker_bootstrap: str, topic: str, index: int) -> ErrorCode:
    return produce_records(
        broker_bootstrap, topic, encode_batch([RecordInput(key=None, value=b"v")]), index=index
    )


def api_versions_ok(conn: RawConnection) -> bool:
    response = conn.request(
        ApiVersionsRequest(client_software_name="t", client_software_version="1")
    )
    return bool(response.error_code == ErrorCode.none)


def test_failing_handler_is_answered_and_connection_stays_usable(
    broker_factory: BrokerFactory,
) -> None:
    broker = broker_factory(env=env_with(ONCELOG_FAIL_API="19"))  # CreateTopics raises
    conn = RawConnection(broker.bootstrap)
    try:
        assert create_topic(conn, "t", 1) == ErrorCode.unknown_server_error
        assert api_versions_ok(conn)
        assert create_topic(conn, "t", 1) == ErrorCode.unknown_server_error
    finally:
        conn.close()
    assert "answering UNKNOWN_SERVER_ERROR" in broker.log_text()


def test_io_error_takes_one_partition_offline(broker_factory: BrokerFactory) -> None:
    broker = broker_factory(env=env_with(ONCELOG_IO_ERROR_AT="append:disk-1"))
    conn = RawConnection(broker.bootstrap)
    try:
        assert create_topic(conn, "disk", 2) == ErrorCode.none
        assert produce(broker.bootstrap, "disk", 0) == ErrorCode.none
        assert produce(broker.bootstrap, "disk", 1) == ErrorCode.kafka_storage_error
        assert produce(broker.bootstrap, "disk", 1) == ErrorCode.kafka_storage_error
        assert produce(broker.bootstrap, "disk", 0) == ErrorCode.none
        assert api_versions_ok(conn)
    finally:
        conn.close()
    assert broker.is_running
    log_text = broker.log_text()
    assert "partition disk-1 is offline" in log_text
    assert str(broker.data_dir / "disk-1") in log_text
