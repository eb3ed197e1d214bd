"""Appending a DataFrame of (key, value) rows to a streamcore log from the executors, in parallel.

Local log: a partition has one writer at a time (an `flock` per partition folder), so every log
partition must be written by exactly one Spark task. Two layouts guarantee that:

* `by_task`: Spark partition i appends to log partition i (the DataFrame has exactly as many
  partitions as the log). No shuffle when it has that many already; keys do not choose
  partitions. Used for generated documents, whose ids are unique, so no two versions of a
  document can land in different partitions. (A Spark Connect client cannot ask a DataFrame its
  partition count, `rdd.getNumPartitions()`: there the rows are always repartitioned.)
* `by_key`: each row goes to `partition_for_key(key)` (streamcore's Nuxeo-compatible partitioner);
  a shuffle on that partition number gives every log partition to a single task. Used for file
  imports, where a document may appear twice and its versions must stay in order.

Each task appends Arrow columns as whole batches (`LocalAppender.append_arrow`) and closes its
writers before returning, so a retried task can take the locks again. Appends are at least once:
a task that fails half-way and is retried appends its rows again (the importer's consumer upserts
by id, so a replayed document changes nothing).

Kafka: Spark's Kafka sink writes from the executors, partitioned by Kafka's own key hash (murmur2,
the same as `KafkaLogManager` appends), with the client settings of the log's description.

Executors open the log from the description its backend gives (`LogManager.describe`): a local
appender with the driver's log options (`max_record_bytes`, ...), or Spark Kafka options.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType

from jobs.spark.delta.sql import is_connect
from streamcore.errors import ConfigError
from streamcore.log import LogManager
from streamcore.log.capabilities import ArrowAppender, ManagerDescription, TopicDescription
from streamcore.names import Name

__all__ = ["append_dataframe"]

logger = logging.getLogger(__name__)
_RESULT = "partition int, first long, count long"


def append_dataframe(
    df: DataFrame, manager: LogManager, name: str | Name, *, layout: str = "by_key"
) -> dict[int, int]:
    """Append rows `key` (string) and `value` (binary) of `df` to log `name`; returns the number
    of records appended per partition."""
    name = Name.of(name)
    log = manager.describe(name)
    if isinstance(log, TopicDescription):  # a Kafka topic
        return _append_kafka(df, manager, log)
    if not isinstance(log, ManagerDescription):  # else a local log, appended to by the tasks
        raise ConfigError(
            f"log {name} lives in a {log.backend} log; Spark jobs write local or kafka "
            "logs: route it to one with LogConfig (include/streamcore.toml)"
        )
    size = log.partitions
    if layout == "by_task":
        if is_connect(df.sparkSession) or df.rdd.getNumPartitions() != size:
            df = df.repartition(size)
        tagged = df.select(F.spark_partition_id().alias("_p"), "key", "value")
    elif layout == "by_key":
        tagged = df.select(_partition_of(F.col("key"), size).alias("_p"), "key", "value")
        tagged = tagged.repartition(size, "_p")
    else:
        raise ValueError(f"layout must be 'by_task' or 'by_key', not {layout!r}")

    def append(batches: Iterator[Any]) -> Iterator[Any]:
        yield from _append_local(batches, log)

    counts: dict[int, int] = {}
    for row in tagged.mapInArrow(append, _RESULT).collect():
        counts[row.partition] = counts.get(row.partition, 0) + row["count"]
    return counts


def _partition_of(key: Any, size: int) -> Any:
    from pyspark.sql.functions import pandas_udf

    @pandas_udf(IntegerType())  # type: ignore[call-overload]
    def partition_for(keys: pd.Series) -> pd.Series:
        from streamcore.log.partitioner import partitions_for_keys

        return pd.Series(partitions_for_keys(keys.tolist(), size), dtype="int32")

    return partition_for(key)


def _append_local(batches: Iterator[Any], log: ManagerDescription) -> Iterator[Any]:
    import pyarrow as pa
    import pyarrow.compute as pc

    manager = log.open_manager()
    firsts: dict[int, int] = {}
    counts: dict[int, int] = {}
    try:
        appender = manager.appender(log.name)
        if not isinstance(appender, ArrowAppender):
            raise ConfigError(f"the appender of {log.name} takes no Arrow columns")
        for batch in batches:
            if not batch.num_rows:
                continue
            parts = batch.column(0)
            targets = pc.unique(parts).to_pylist()
            for p in targets:
                rows = batch if len(targets) == 1 else batch.filter(pc.equal(parts, p))
                first = appender.append_arrow(p, rows.column(1), rows.column(2))
                firsts.setdefault(p, first)
                counts[p] = counts.get(p, 0) + rows.num_rows
    finally:
        manager.close()
    if counts:
        yield pa.RecordBatch.from_pydict(
            {
                "partition": pa.array(list(counts), pa.int32()),
                "first": pa.array([firsts[p] for p in counts], pa.int64()),
                "count": pa.array(list(counts.values()), pa.int64()),
            }
        )


def _append_kafka(df: DataFrame, manager: LogManager, log: TopicDescription) -> dict[int, int]:
    before = manager.end_offsets(log.name)
    (
        df.select("key", "value")
        .write.format("kafka")
        .options(**log.spark_options())
        .option("topic", log.topic)
        .save()
    )
    after = manager.end_offsets(log.name)
    return {p: a - b for p, (b, a) in enumerate(zip(before, after, strict=True)) if a > b}
