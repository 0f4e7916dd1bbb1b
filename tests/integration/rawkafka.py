"""The raw Kafka connection helpers now live in oncelog/harness/rawkafka.py (cluster tests use
them too); integration tests keep importing them as ``rawkafka``."""

from oncelog.harness.rawkafka import RawConnection, produce, request_once

__all__ = ["RawConnection", "produce", "request_once"]
