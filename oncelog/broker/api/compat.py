"""Error codes as older clients understand them, translated in one place for every handler."""

from __future__ import annotations

from oncelog.errors import ErrorCode


def fenced_for_version(code: ErrorCode, api_version: int, fenced_since: int) -> ErrorCode:
    """PRODUCER_FENCED (KIP-588) as INVALID_PRODUCER_EPOCH for request versions below
    ``fenced_since``, which predate it (Kafka: InitProducerId v4, AddPartitionsToTxn,
    AddOffsetsToTxn and EndTxn v2); other codes unchanged."""
    if code is ErrorCode.producer_fenced and api_version < fenced_since:
        return ErrorCode.invalid_producer_epoch
    return code
