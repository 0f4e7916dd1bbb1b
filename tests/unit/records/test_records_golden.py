"""Interop both ways with real clients' RecordBatch v2 code.

- golden/*.hex were written by kafka-python's and aiokafka's batch builders
  (make_golden.py): our decoder must read exactly the records that went in, and
  validate_batches must accept them;
- our encode_batch output must be read back by kafka-python's and aiokafka's readers,
  for every codec.
"""

from __future__ import annotations

import json
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cramjam
import pytest
from aiokafka.record.default_records import DefaultRecordBatch as AioBatch
from kafka.record import default_records as kp_records

from oncelog.records.batch import Compression
from oncelog.records.codec import Record, RecordInput, decode_batch, encode_batch
from oncelog.records.validate import validate_batches

GOLDEN = Path(__file__).parent / "golden"
CASES: dict[str, dict[str, Any]] = json.loads((GOLDEN / "cases.json").read_text())


def spec_bytes(spec: str | list[Any] | None) -> bytes | None:
    if spec is None:
        return None
    if isinstance(spec, list):
        return bytes.fromhex(spec[0]) * int(spec[1])
    return bytes.fromhex(spec)


def golden(name: str) -> bytes:
    return bytes.fromhex((GOLDEN / f"{name}.hex").read_text().replace("\n", ""))


def expected_records(case: dict[str, Any]) -> list[Record]:
    return [
        Record(
            offset=delta,
            timestamp=rec["timestamp"],
            key=spec_bytes(rec["key"]),
            value=spec_bytes(rec["value"]),
            headers=tuple((k, spec_bytes(v)) for k, v in rec["headers"]),
        )
        for delta, rec in enumerate(case["records"])
    ]


def test_golden_set_covers_every_codec_and_both_clients() -> None:
    assert {c["compression"] for c in CASES.values()} == {0, 1, 2, 3, 4}
    assert {c["client"] for c in CASES.values()} == {"kafka-python", "aiokafka"}


@pytest.mark.parametrize("name", sorted(CASES))
def test_decode_golden_batch(name: str) -> None:
    case = CASES[name]
    data = golden(name)
    header, records = decode_batch(data)
    assert records == expected_records(case)
    # The client really used the codec (builders fall back to none when it does not pay).
    assert header.compression == case["compression"]
    assert header.producer_id == case["producer_id"]
    assert header.producer_epoch == case["producer_epoch"]
    assert header.base_sequence == case["base_sequence"]
    assert header.is_transactional == case["transactional"]
    assert header.size == len(data)
    assert header.max_timestamp == max(r["timestamp"] for r in case["records"])


@pytest.mark.parametrize("name", sorted(CASES))
def test_validate_accepts_golden_batch(name: str) -> None:
    data = golden(name)
    (header,) = validate_batches(data, max_batch_bytes=1 << 20)
    assert header == decode_batch(data)[0]
    assert header.records_count == len(CASES[name]["records"])
    # Several batches back to back.
    assert len(validate_batches(data * 3, max_batch_bytes=1 << 20)) == 3


def test_golden_snappy_is_xerial_framed() -> None:
    data = golden("aiokafka_snappy_big")
    assert data[61:69] == b"\x82SNAPPY\x00"


# ----------------------------------------------------------------- our bytes, their readers


@pytest.fixture
def kafka_python_codecs(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """kafka-python finds snappy/lz4/zstd through optional packages we do not install; give
    it cramjam-backed stand-ins. Its own xerial/raw snappy detection still runs."""
    import kafka.codec as kp_codec

    snappy_shim = types.SimpleNamespace(
        decompress=lambda data: bytes(cramjam.snappy.decompress_raw(bytes(data))),
        compress=lambda data: bytes(cramjam.snappy.compress_raw(bytes(data))),
    )
    monkeypatch.setattr(kp_codec, "snappy", snappy_shim)
    monkeypatch.setattr(kp_codec, "lz4", types.SimpleNamespace())
    monkeypatch.setattr(kp_codec, "zstd", types.SimpleNamespace())
    monkeypatch.setattr(
        kp_records, "lz4_decode", lambda data: bytes(cramjam.lz4.decompress(bytes(data)))
    )
    monkeypatch.setattr(
        kp_records, "zstd_decode", lambda data: bytes(cramjam.zstd.decompress(bytes(data)))
    )
    yield


INPUTS = [
    RecordInput(b"key-0", b"hello " * 30, [("trace", b"t-1"), ("none", None)], 1_000),
    RecordInput(None, b"no key " * 30, (), 990),
    RecordInput(b"tomb", None, [("\u00fc", b"\x00\xff")], 1_020),
    RecordInput(b"", b"", (), 1_001),
]


def _their_view(records: Any) -> list[tuple[Any, ...]]:
    return [(r.offset, r.timestamp, r.key, r.value, [tuple(h) for h in r.headers]) for r in records]


def _ours() -> list[tuple[Any, ...]]:
    return [
        (100 + i, r.timestamp, r.key, r.value, [tuple(h) for h in r.headers])
        for i, r in enumerate(INPUTS)
    ]


@pytest.mark.parametrize("codec", list(Compression))
def test_kafka_python_reads_our_batches(codec: Compression, kafka_python_codecs: None) -> None:
    data = encode_batch(
        INPUTS,
        base_offset=100,
        compression=codec,
        producer_id=9,
        producer_epoch=2,
        base_sequence=50,
        transactional=True,
    )
    batch = kp_records.DefaultRecordBatch(data)
    assert batch.validate_crc()
    assert batch.compression_type == codec
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (9, 2, 50)
    assert batch.is_transactional and not batch.is_control_batch
    assert batch.next_offset == 104
    assert _their_view(list(batch)) == _ours()


@pytest.mark.parametrize("codec", list(Compression))
def test_aiokafka_reads_our_batches(codec: Compression) -> None:
    data = encode_batch(INPUTS, base_offset=100, compression=codec)
    batch = AioBatch(data)
    assert batch.validate_crc()
    assert batch.compression_type == codec
    assert _their_view(list(batch)) == _ours()


def test_raw_snappy_batch_as_librdkafka_sends_it() -> None:
    """librdkafka compresses a batch body as one raw snappy block, without xerial framing."""
    plain = encode_batch(INPUTS, compression=0)
    body = bytes(cramjam.snappy.compress_raw(plain[61:]))
    header = bytearray(plain[:61])
    header[8:12] = (49 + len(body)).to_bytes(4, "big")
    header[22] |= Compression.SNAPPY  # low byte of the attributes
    from oncelog.records.validate import batch_crc

    data = bytearray(header + body)
    data[17:21] = batch_crc(data, 0, len(data)).to_bytes(4, "big")
    validate_batches(data, max_batch_bytes=1 << 20)
    _, records = decode_batch(data)
    assert [(r.key, r.value) for r in records] == [(r.key, r.value) for r in INPUTS]
    assert _their_view(list(AioBatch(bytes(data)))) == [
        (i, *rest) for i, (_, *rest) in enumerate(_ours())
    ]


@pytest.mark.parametrize(
    "name", ["kafka_python_none", "kafka_python_none_idempotent", "aiokafka_none"]
)
def test_our_encoder_matches_the_clients_byte_for_byte(name: str) -> None:
    """Uncompressed bodies have one encoding: ours must equal the client's exactly.
    (kafka-python writes partitionLeaderEpoch 0; aiokafka writes -1, like the Java client.)"""
    case = CASES[name]
    inputs = [RecordInput(r.key, r.value, r.headers, r.timestamp) for r in expected_records(case)]
    ours = encode_batch(
        inputs,
        producer_id=case["producer_id"],
        producer_epoch=case["producer_epoch"],
        base_sequence=case["base_sequence"],
        transactional=case["transactional"],
        partition_leader_epoch=0 if case["client"] == "kafka-python" else -1,
    )
    assert ours == golden(name)
