"""Avro payloads <-> typed columns, in the JVM (spark-avro), framed as Avro single-object
encoding (`C3 01` + CRC-64-AVRO fingerprint of the writer schema + body).

Decoding finds each row's writer schema from its fingerprint in the streamcore `SchemaStore`
(every version of the reader schema's name in `include/schemas`), and reads it into the reader
schema with Avro schema resolution. One CASE over the known fingerprints does it in a single pass,
without collecting the fingerprints first. A payload that cannot be decoded keeps its row: the
typed columns are null and `payload_error` says what is wrong and what to do.
"""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.avro.functions import from_avro, to_avro
from pyspark.sql.types import StructType

from streamcore.codecs import ParsedSchema, SchemaStore
from streamcore.codecs.framing import SINGLE_OBJECT_HEADER_SIZE, single_object_header
from streamcore.codecs.record_binary import RECORD_FINGERPRINT, RECORD_SCHEMA

__all__ = [
    "avro_json",
    "decode_payload",
    "encode_payload",
    "encode_record",
    "spark_schema",
    "writer_versions",
]


def avro_json(schema: ParsedSchema) -> str:
    return schema.to_json()


def writer_versions(store: SchemaStore, reader: ParsedSchema) -> list[ParsedSchema]:
    """Every schema of the store with the reader's full name (the versions a payload may have been
    written with), the reader first."""
    others = [s for s in store if s.fullname == reader.fullname and s != reader]
    return [reader, *sorted(others, key=lambda s: s.fingerprint)]


def _decode_one(body: Column, writer: ParsedSchema, reader: ParsedSchema) -> Column:
    options = {"mode": "PERMISSIVE"}
    if writer != reader:
        options["avroSchema"] = avro_json(reader)
    return from_avro(body, avro_json(writer), options)


def decode_payload(
    df: DataFrame,
    reader: ParsedSchema,
    store: SchemaStore,
    *,
    column: str = "data",
    prefix: str = "",
) -> DataFrame:
    """`df` plus one typed column per field of `reader` (named `prefix + field`) and
    `payload_error` (null when the payload decoded), from single-object payloads in `column`."""
    data = F.col(column)
    header = F.substring(data, 1, SINGLE_OBJECT_HEADER_SIZE)
    body = F.expr(f"substring(`{column}`, {SINGLE_OBJECT_HEADER_SIZE + 1})")
    decoded: Column | None = None
    known = F.lit(False)
    for writer in writer_versions(store, reader):
        is_writer = header == F.lit(single_object_header(writer.fingerprint))
        branch = _decode_one(body, writer, reader)
        decoded = F.when(is_writer, branch) if decoded is None else decoded.when(is_writer, branch)
        known = known | is_writer
    assert decoded is not None
    is_single_object = F.substring(data, 1, 2) == F.lit(b"\xc3\x01")
    error = (
        F.when(data.isNull(), F.lit("empty payload"))
        .when(~is_single_object, F.lit("payload is not Avro single-object encoded (no C3 01)"))
        .when(
            ~known,
            F.concat(
                F.lit("unknown writer schema (fingerprint bytes "),
                F.lower(F.hex(F.substring(data, 3, 8))),
                F.lit(f"); add the writer's .avsc to include/schemas next to {reader.fullname}"),
            ),
        )
        .when(
            F.col("_payload").isNull(),
            F.lit(f"payload does not decode as {reader.fullname}: corrupt or truncated body"),
        )
    )
    out = df.withColumn("_payload", decoded).withColumn("payload_error", error)
    fields = [f["name"] for f in reader.raw["fields"]]
    return out.select(
        *df.columns,
        *(F.col(f"_payload.{f}").alias(prefix + f) for f in fields),
        "payload_error",
    )


def spark_schema(spark: SparkSession, reader: ParsedSchema) -> StructType:
    """The Spark struct type spark-avro maps `reader` to (for conforming input DataFrames)."""
    probe = spark.range(0).select(
        from_avro(F.lit(b"").cast("binary"), avro_json(reader)).alias("d")
    )
    return probe.schema["d"].dataType  # type: ignore[return-value]


def encode_payload(columns: list[Column], schema: ParsedSchema) -> Column:
    """Single-object Avro bytes of a struct of `columns` (named and typed as `schema` says)."""
    return F.concat(
        F.lit(single_object_header(schema.fingerprint)),
        to_avro(F.struct(*columns), avro_json(schema)),
    )


def encode_record(
    key: Column,
    data: Column,
    watermark: Column,
    flags: int | Column = 1,
    trace_context: Column | None = None,
) -> Column:
    """A streamcore Record envelope (Record.avsc, single-object) around `data` bytes."""
    record: Any = F.struct(
        watermark.cast("long").alias("watermark"),
        key.alias("key"),
        data.alias("data"),
        (F.lit(flags) if isinstance(flags, int) else flags.cast("int")).alias("flagsAsByte"),
        (F.lit(None) if trace_context is None else trace_context)
        .cast("binary")
        .alias("traceContext"),
    )
    return F.concat(
        F.lit(single_object_header(RECORD_FINGERPRINT)), to_avro(record, json.dumps(RECORD_SCHEMA))
    )
