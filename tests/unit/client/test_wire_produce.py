"""The producer's direct Produce encoding writes what kio writes for the same request."""

from __future__ import annotations

import pytest

from oncelog.client.wire import encode_request, nested, produce_request, request
from oncelog.protocol import versions as api

BATCH_A = bytes(range(70))
BATCH_B = b"\x01" * 200


def kio_produce(version: int, tid: str | None, topics: dict[str, list[tuple[int, bytes]]]) -> bytes:
    body = request(
        api.PRODUCE, version, transactional_id=tid, acks=-1, timeout=30000,
        topic_data=tuple(
            nested(api.PRODUCE, version, "TopicProduceData", name=name, partition_data=tuple(
                nested(api.PRODUCE, version, "PartitionProduceData", index=i, records=r)
                for i, r in parts))
            for name, parts in topics.items()),
    )  # fmt: skip
    return encode_request(7, "client", body)


@pytest.mark.parametrize("version", range(3, 13))
@pytest.mark.parametrize("tid", [None, "txn-1"])
def test_produce_request_bytes_match_kio(version: int, tid: str | None) -> None:
    topics = {"orders": [(0, BATCH_A), (3, BATCH_B)], "é": [(1, BATCH_B)]}
    raw = produce_request(version, tid, -1, 30000, topics)
    assert encode_request(7, "client", raw) == kio_produce(version, tid, topics)
