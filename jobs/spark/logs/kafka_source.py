"""Offset ranges of a Kafka-backed log through Spark's Kafka source (batch, not streaming).

The columns match `jobs.spark.logs.local_source.RAW_SCHEMA`, so everything downstream of a read is
the same for both backends. The topic and the client settings come from the log's description, a
`streamcore.log.capabilities.TopicDescription` (`KafkaLogManager.describe`)."""

from __future__ import annotations

import json

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.spark.logs.local_source import SPLIT_RECORDS
from streamcore.log.capabilities import TopicDescription

__all__ = ["read_kafka_ranges"]


def read_kafka_ranges(
    spark: SparkSession,
    log: TopicDescription,
    ranges: dict[int, tuple[int, int]],
    *,
    split_records: int = SPLIT_RECORDS,
) -> DataFrame:
    """Records of the described log at offsets `[start, end)` per partition, read with the
    client settings the description maps to Spark options (security, ...).
    `failOnDataLoss` stays on: a range retention already deleted fails the read instead of
    silently returning less. On a compacted topic it is off, because Spark's source takes every
    offset the broker's log cleaner removed for a loss (SPARK-17147, SPARK-23685); the caller
    checks the topic's start offsets instead (`jobs.spark.logs.streams.read_raw`)."""
    topic = log.topic
    wanted = {p: r for p, r in ranges.items() if r[1] > r[0]}
    if not wanted:
        return spark.createDataFrame([], _empty_schema())
    starting = {topic: {str(p): s for p, (s, _) in wanted.items()}}
    ending = {topic: {str(p): e for p, (_, e) in wanted.items()}}
    reader = (
        spark.read.format("kafka")
        .options(**log.spark_options())
        .option("assign", json.dumps({topic: sorted(wanted)}))
        .option("startingOffsets", json.dumps(starting))
        .option("endingOffsets", json.dumps(ending))
        .option("failOnDataLoss", "false" if log.compacted else "true")
        # As the local source: at most `split_records` records per Spark partition.
        .option("minPartitions", str(sum(-(-(e - s) // split_records) for s, e in wanted.values())))
    )
    return reader.load().select(
        F.lit(log.name).alias("stream"),
        F.col("partition").cast("int").alias("partition"),
        F.col("offset").cast("long").alias("offset"),
        F.col("timestamp"),
        F.col("key").cast("string").alias("key"),
        F.coalesce(F.col("value"), F.lit(b"")).alias("value"),  # a tombstone's null, as b""
    )


def _empty_schema() -> str:
    from jobs.spark.logs.local_source import RAW_SCHEMA

    return RAW_SCHEMA
