"""Regenerate the golden RecordBatch v2 files with real clients' encoders.

    .venv/bin/python tests/unit/records/make_golden.py

Writes ``golden/<case>.hex`` (the batch as hex, 64 bytes a line) and ``golden/cases.json``
(for each case: the client, the batch settings and the records that went in). Encoders:
kafka-python's ``DefaultRecordBatchBuilder`` (gzip and none: its other codecs need packages
we do not install) and aiokafka's ``DefaultRecordBatchBuilder`` (all codecs, via cramjam).
Both builders fall back to an uncompressed body when compressing does not help, so every
case carries compressible values; the tests check the codec bits to make sure.

Bytes in cases.json: null, a hex string, or ``[hex, times]`` for ``bytes.fromhex(hex) * times``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

GOLDEN = Path(__file__).parent / "golden"
T0 = 1_700_000_000_000

BytesSpec = None | str | list[Any]

RECORDS: list[dict[str, Any]] = [
    {
        "timestamp": T0,
        "key": b"key-0".hex(),
        "value": (b"the quick brown fox " * 8).hex(),
        "headers": [["trace-id", b"abc123".hex()], ["nullable", None]],
    },
    {"timestamp": T0 + 5, "key": None, "value": (b"value without a key " * 6).hex(), "headers": []},
    {
        "timestamp": T0 - 10,  # earlier than the first record: a negative timestamp delta
        "key": b"key-2".hex(),
        "value": None,  # a tombstone
        "headers": [["\u00fcn\u00efcode-\u2603", b"\x00\xff\x80".hex()]],
    },
    {"timestamp": T0 + 1, "key": "", "value": "", "headers": []},
    {
        "timestamp": T0 + 300_000,
        "key": (b"k" * 200).hex(),
        "value": (bytes(range(256)) * 3).hex(),
        "headers": [["a", b""], ["b", b"x".hex()], ["c", None]],
    },
]
RECORDS[4]["headers"][0][1] = ""

BIG_RECORD: dict[str, Any] = {
    "timestamp": T0,
    "key": b"big".hex(),
    "value": [b"0123456789abcdef".hex(), 6400],  # 100 KiB: four xerial snappy blocks
    "headers": [],
}

PLAIN = {"producer_id": -1, "producer_epoch": -1, "base_sequence": -1, "transactional": False}
IDEMPOTENT = {
    "producer_id": 4242,
    "producer_epoch": 3,
    "base_sequence": 100,
    "transactional": False,
}
TRANSACTIONAL = {
    "producer_id": 4242,
    "producer_epoch": 3,
    "base_sequence": 7,
    "transactional": True,
}

# name -> (client, codec, producer settings, records)
CASES: dict[str, tuple[str, int, dict[str, Any], list[dict[str, Any]]]] = {
    "kafka_python_none": ("kafka-python", 0, PLAIN, RECORDS),
    "kafka_python_gzip": ("kafka-python", 1, PLAIN, RECORDS),
    "kafka_python_none_idempotent": ("kafka-python", 0, IDEMPOTENT, RECORDS),
    "kafka_python_gzip_transactional": ("kafka-python", 1, TRANSACTIONAL, RECORDS),
    "aiokafka_none": ("aiokafka", 0, PLAIN, RECORDS),
    "aiokafka_gzip": ("aiokafka", 1, PLAIN, RECORDS),
    "aiokafka_snappy": ("aiokafka", 2, PLAIN, RECORDS),
    "aiokafka_lz4": ("aiokafka", 3, PLAIN, RECORDS),
    "aiokafka_zstd": ("aiokafka", 4, PLAIN, RECORDS),
    "aiokafka_zstd_transactional": ("aiokafka", 4, TRANSACTIONAL, RECORDS),
    "aiokafka_snappy_big": ("aiokafka", 2, IDEMPOTENT, [BIG_RECORD]),
}


def spec_bytes(spec: BytesSpec) -> bytes | None:
    if spec is None:
        return None
    if isinstance(spec, list):
        return bytes.fromhex(spec[0]) * int(spec[1])
    return bytes.fromhex(spec)


def build(
    client: str, codec: int, producer: dict[str, Any], records: list[dict[str, Any]]
) -> bytes:
    if client == "kafka-python":
        from kafka.record.default_records import DefaultRecordBatchBuilder as KafkaBuilder

        builder: Any = KafkaBuilder(
            2,
            codec,
            producer["transactional"],
            producer["producer_id"],
            producer["producer_epoch"],
            producer["base_sequence"],
            1 << 20,
        )
    else:
        from aiokafka.record.default_records import DefaultRecordBatchBuilder as AioBuilder

        builder = AioBuilder(
            2,
            codec,
            int(producer["transactional"]),
            producer["producer_id"],
            producer["producer_epoch"],
            producer["base_sequence"],
            1 << 20,
        )
    for delta, rec in enumerate(records):
        headers = [(k, spec_bytes(v)) for k, v in rec["headers"]]
        meta = builder.append(
            delta, rec["timestamp"], spec_bytes(rec["key"]), spec_bytes(rec["value"]), headers
        )
        assert meta is not None, "batch_size too small"
    return bytes(builder.build())


def main() -> None:
    GOLDEN.mkdir(exist_ok=True)
    index: dict[str, Any] = {}
    for name, (client, codec, producer, records) in CASES.items():
        data = build(client, codec, producer, records)
        hex_text = data.hex()
        lines = [hex_text[i : i + 128] for i in range(0, len(hex_text), 128)]
        (GOLDEN / f"{name}.hex").write_text("\n".join(lines) + "\n")
        index[name] = {"client": client, "compression": codec, **producer, "records": records}
        print(f"{name}: {len(data)} bytes")
    (GOLDEN / "cases.json").write_text(json.dumps(index, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
