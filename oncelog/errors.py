"""One error family: internal code raises KafkaError with a Kafka error code;
each layer's boundary turns it into the code in a response."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

__all__ = ["ErrorCode", "KafkaError"]


class KafkaError(Exception):
    """An error that has a Kafka error code and a message for logs and clients."""

    def __init__(self, code: ErrorCode, message: str = "") -> None:
        super().__init__(f"{code.name}: {message}" if message else code.name)
        self.code = code
        self.message = message
