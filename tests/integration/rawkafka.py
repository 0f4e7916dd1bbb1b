"""The raw Kafka connection helpers now live in tests/support/rawkafka.py (cluster tests use
them too); integration tests keep importing them as ``rawkafka``."""

from tests.support.rawkafka import RawConnection, produce, request_once

__all__ = ["RawConnection", "produce", "request_once"]
