"""The source's columns (those of Spark's Kafka source) and their Arrow form."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from oncelog.client.types import Message

__all__ = ["ArrowColumns", "source_schema_ddl"]

_BASE = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int"
)
_HEADERS = "headers array<struct<key: string, value: binary>>"


def source_schema_ddl(include_headers: bool) -> str:
    return f"{_BASE}, {_HEADERS}" if include_headers else _BASE


class ArrowColumns:
    """Builds Arrow record batches of consumed records, column by column."""

    def __init__(self, include_headers: bool) -> None:
        import pyarrow as pa

        self._pa = pa
        fields = [
            pa.field("key", pa.binary()),
            pa.field("value", pa.binary()),
            pa.field("topic", pa.string()),
            pa.field("partition", pa.int32()),
            pa.field("offset", pa.int64()),
            pa.field("timestamp", pa.timestamp("us", tz="UTC")),
            pa.field("timestampType", pa.int32()),
        ]
        if include_headers:
            header = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
            fields.append(pa.field("headers", pa.list_(header)))
        self.schema = pa.schema(fields)
        self._include_headers = include_headers

    def batch(self, messages: Sequence[Message]) -> Any:
        """One ``pyarrow.RecordBatch`` of ``messages``."""
        pa = self._pa
        columns: list[Any] = [
            [m.key for m in messages],
            [m.value for m in messages],
            [m.topic for m in messages],
            [m.partition for m in messages],
            [m.offset for m in messages],
            [m.timestamp * 1000 for m in messages],
            [m.timestamp_type for m in messages],
        ]
        if self._include_headers:
            columns.append([[{"key": k, "value": v} for k, v in m.headers] for m in messages])
        arrays = [
            pa.array(values, type=f.type) for values, f in zip(columns, self.schema, strict=True)
        ]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)
