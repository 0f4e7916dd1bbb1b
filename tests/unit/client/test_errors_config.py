from __future__ import annotations

import pytest

from oncelog.client.config import ClientConfig
from oncelog.client.errors import (
    AbortableError,
    ConfigError,
    FatalError,
    KafkaClientError,
    OutOfOrderSequenceError,
    ProducerFencedError,
    RetriableError,
    TransactionalIdAuthorizationFailedError,
    UnsupportedVersionError,
    error_for,
)
from oncelog.errors import ErrorCode


@pytest.mark.parametrize(
    ("code", "cls", "kind"),
    [
        (ErrorCode.producer_fenced, ProducerFencedError, FatalError),
        (
            ErrorCode.transactional_id_authorization_failed,
            TransactionalIdAuthorizationFailedError,
            FatalError,
        ),
        (ErrorCode.unsupported_version, UnsupportedVersionError, FatalError),
        (ErrorCode.out_of_order_sequence_number, OutOfOrderSequenceError, AbortableError),
        (ErrorCode.cluster_authorization_failed, FatalError, FatalError),
        (ErrorCode.not_leader_or_follower, RetriableError, RetriableError),
        (ErrorCode.concurrent_transactions, RetriableError, RetriableError),
        (ErrorCode.kafka_storage_error, RetriableError, RetriableError),
        (ErrorCode.invalid_record, KafkaClientError, KafkaClientError),
    ],
)
def test_error_classification(code: ErrorCode, cls: type, kind: type) -> None:
    exc = error_for(code, "ctx")
    assert isinstance(exc, cls) and isinstance(exc, kind)
    assert exc.code == code
    assert "ctx" in str(exc)


def test_kinds_are_exclusive() -> None:
    for code in ErrorCode:
        if code == ErrorCode.none:
            continue
        exc = error_for(code)
        assert sum([exc.retriable, exc.fatal, exc.abortable]) <= 1
        assert exc.retriable == code.retriable or exc.fatal or exc.abortable


def test_config_defaults_are_javas() -> None:
    cfg = ClientConfig({"bootstrap.servers": "h:1"})
    assert cfg["linger.ms"] == 5
    assert cfg["batch.size"] == 16384
    assert cfg["acks"] == -1
    assert cfg["enable.idempotence"] is True
    assert cfg["delivery.timeout.ms"] == 120000
    assert cfg["auto.offset.reset"] == "latest"
    assert cfg["enable.auto.commit"] is True
    assert cfg["isolation.level"] == 1  # read_committed: this client's default
    assert cfg["partition.assignment.strategy"] == ("range", "cooperative-sticky")


JAVA_COOPERATIVE = "org.apache.kafka.clients.consumer.CooperativeStickyAssignor"


def test_config_parses_strings_like_a_properties_file() -> None:
    cfg = ClientConfig(
        {
            "bootstrap.servers": "PLAINTEXT://a:1, b:2",
            "acks": "all",
            "linger.ms": "20",
            "enable.idempotence": "false",
            "compression.type": "zstd",
            "isolation.level": "read_uncommitted",
            "auto.offset.reset": "smallest",
            "partition.assignment.strategy": JAVA_COOPERATIVE,
        }
    )
    assert cfg.bootstrap == [("a", 1), ("b", 2)]
    assert (cfg["acks"], cfg["linger.ms"], cfg["enable.idempotence"]) == (-1, 20, False)
    assert cfg["compression.type"] == 4
    assert cfg["isolation.level"] == 0
    assert cfg["auto.offset.reset"] == "earliest"
    assert cfg["partition.assignment.strategy"] == ("cooperative-sticky",)


@pytest.mark.parametrize(
    "bad",
    [
        {},
        {"bootstrap.servers": "nohostport"},
        {"bootstrap.servers": "h:1", "acks": "2"},
        {"bootstrap.servers": "h:1", "compression.type": "brotli"},
        {"bootstrap.servers": "h:1", "enable.idempotence": "maybe"},
    ],
)
def test_bad_config_raises(bad: dict[str, str]) -> None:
    with pytest.raises(ConfigError):
        ClientConfig(bad).bootstrap  # noqa: B018
