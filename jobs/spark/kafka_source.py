"""Offset ranges of a Kafka-backed log through Spark's Kafka source (batch, not streaming).

The columns match `jobs.spark.local_source.RAW_SCHEMA`, so everything downstream of a read is the
same for both backends. Topic and group naming follow `KafkaLogManager` (prefix + name id).
"""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

__all__ = ["read_kafka_ranges"]


def read_kafka_ranges(
    spark: SparkSession,
    *,
    bootstrap_servers: str,
    topic: str,
    stream: str,
    ranges: dict[int, tuple[int, int]],
    properties: dict[str, Any] | None = None,
) -> DataFrame:
    """Records of `topic` at offsets `[start, end)` per partition. `properties` are librdkafka
    settings of the log config (security, ...) passed to the Java client as `kafka.<key>`.
    `failOnDataLoss` stays on: a range retention already deleted fails the read instead of
    silently returning less."""
    wanted = {p: r for p, r in ranges.items() if r[1] > r[0]}
    if not wanted:
        return spark.createDataFrame([], _empty_schema())
    starting = {topic: {str(p): s for p, (s, _) in wanted.items()}}
    ending = {topic: {str(p): e for p, (_, e) in wanted.items()}}
    reader = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap_servers)
        .option("assign", json.dumps({topic: sorted(wanted)}))
        .option("startingOffsets", json.dumps(starting))
        .option("endingOffsets", json.dumps(ending))
        .option("failOnDataLoss", "true")
    )
    for key, value in (properties or {}).items():
        reader = reader.option(f"kafka.{key}", str(value))
    return reader.load().select(
        F.lit(stream).alias("stream"),
        F.col("partition").cast("int").alias("partition"),
        F.col("offset").cast("long").alias("offset"),
        F.col("timestamp"),
        F.col("key").cast("string").alias("key"),
        F.col("value"),
    )


def _empty_schema() -> str:
    from jobs.spark.local_source import RAW_SCHEMA

    return RAW_SCHEMA
