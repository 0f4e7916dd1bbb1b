"""oncelog.spark: a PySpark data source for oncelog, exactly once end to end.

Register it, then use ``format("oncelog")`` where Spark's Kafka connector would take
``format("kafka")``, with the same options and columns::

    from oncelog.spark import register
    register(spark)

    events = (spark.readStream.format("oncelog")
              .option("kafka.bootstrap.servers", "localhost:9092")
              .option("subscribe", "payments")
              .option("startingOffsets", "earliest")
              .load())                      # key, value, topic, partition, offset, timestamp, ...
    (events.selectExpr("key", "upper(CAST(value AS STRING)) AS value")
           .writeStream.format("oncelog")
           .option("kafka.bootstrap.servers", "localhost:9092")
           .option("topic", "out")
           .option("checkpointLocation", "/tmp/ckpt")   # needed for exactly-once
           .start())

The source reads read_committed by default and never past the LSO; the streaming sink
commits each micro-batch exactly once with KIP-939 two-phase commit (the broker needs
``transaction.two.phase.commit.enable=true``). See ``reader.py`` and ``writer.py`` for how,
and ``writer.py`` for the limits. Needs PySpark 4.2 or later and pyarrow.
"""

from __future__ import annotations

import inspect
from typing import Any

try:
    from pyspark.sql.datasource import (
        DataSource,
        DataSourceReader,
        DataSourceStreamReader,
        DataSourceStreamWriter,
        DataSourceWriter,
    )
    from pyspark.sql.types import StructType
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "oncelog.spark needs PySpark 4.2+ and pyarrow: pip install 'oncelog[spark]' "
        f"({exc})"
    ) from exc

from oncelog.spark.options import OptionError, SinkOptions, SourceOptions
from oncelog.spark.reader import OncelogBatchReader, OncelogStreamReader
from oncelog.spark.schema import source_schema_ddl
from oncelog.spark.writer import OncelogBatchWriter, OncelogStreamWriter, SinkCommitMessage

__all__ = [
    "OncelogDataSource",
    "OptionError",
    "SinkCommitMessage",
    "register",
]

FORMAT = "oncelog"

# The PySpark worker module that creates a streaming writer while planning a micro-batch (on
# the driver, before the batch's tasks run); commit and abort create theirs elsewhere.
_PLANNING_MODULE = "pyspark.sql.worker.write_into_data_source"


def _called_from(module: str) -> bool:
    frame = inspect.currentframe()
    try:
        while frame is not None:
            if frame.f_globals.get("__name__") == module:
                return True
            frame = frame.f_back
        return False
    finally:
        del frame


class OncelogDataSource(DataSource):
    """The ``oncelog`` format: Spark's Kafka source and sink, exactly once."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        include = str(self.options.get("includeHeaders", "false")).strip().lower() == "true"
        return source_schema_ddl(include)

    def reader(self, schema: StructType) -> DataSourceReader:
        return OncelogBatchReader(SourceOptions.parse(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return OncelogStreamReader(SourceOptions.parse(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return OncelogBatchWriter(SinkOptions.parse(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return OncelogStreamWriter(
            SinkOptions.parse(self.options), schema, planning=_called_from(_PLANNING_MODULE)
        )


def register(spark: Any) -> None:
    """Register the ``oncelog`` format with a SparkSession."""
    spark.dataSource.register(OncelogDataSource)
