"""Checked landing: what every stream-to-Delta job does between reading a batch of Records and
writing it (docs/design.md, "Micro-batches, exactly-once and intervals"). Decode the payloads
with their schema, check the rows against the schema's expectation suite, have Great
Expectations validate them for the report and the Data Docs, refuse the batch when too many rows
fail, send the failing rows to `quarantine`, and hand the good rows to the job's own write.
`run_offset_batch` (or an interval job) supplies the batch.

Two passes over the batch and no cache: filling a cache of the decoded batch cost more than
reading and decoding it again (1M documents: 3.6-4.1 s against 2.2 s). The first pass is one
aggregate: the failure counts, the metrics GX would run its own Spark jobs for
(`jobs.spark.gx_metrics`) and the job's own aggregates (the importer's id uniqueness). Whether the
batch lands is decided from those counts, so GX validates on the driver while the second pass,
the job's write, runs. When no row failed, the write gets the decoded rows without the checks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from jobs.spark.catalog import Catalog
from jobs.spark.expectations import Suite, any_failure, failed_expectations
from jobs.spark.job import JobContext, JobError
from streamcore.codecs import ParsedSchema

__all__ = ["Checked", "CheckedBatch", "QualityThresholdError", "land_checked"]


class QualityThresholdError(JobError):
    """More rows failed their expectations than the failure threshold allows."""


@dataclass(frozen=True)
class CheckedBatch:
    """Which batch is checked: `job` and `batch` name its quarantined rows and its GX run
    (`run_name`); `records` bounds its rows; `unmoved` says, in the error of a refused batch, what
    stayed as it was (e.g. "the positions of import/repository did not move")."""

    job: str
    batch: int
    run_name: str
    records: int
    unmoved: str


@dataclass(frozen=True)
class Checked:
    """What the write gets: `good`, the rows to write (payload fields and stream columns); `row`,
    the first pass's aggregates by alias (the job's own ones included); the counts."""

    good: DataFrame
    row: Mapping[str, Any]
    read: int
    failing: int


def land_checked(
    ctx: JobContext,
    catalog: Catalog,
    records: DataFrame,
    batch: CheckedBatch,
    *,
    schema: ParsedSchema,
    suite: Suite,
    failure_threshold: float,
    result_format: str,
    write: Callable[[Checked], Any],
    aggregates: Callable[[Column], list[Column]] | None = None,
    rows: Callable[[DataFrame], DataFrame] | None = None,
) -> tuple[Any, dict[str, Any]]:
    """Check `records` (as `read_stream` gives them) and land the good rows with `write`.
    `aggregates(keep)` adds the job's aggregates over the rows `keep` holds for (the good ones)
    to the first pass; `rows(decoded)` keeps the decoded rows the batch is about (an interval's,
    say; a row that does not decode has no fields to keep it by). Returns what `write` returned
    and the summary: `read`, `written`, `quarantined`, `validation` (GX's report with the failure
    ratio and the rows quarantined per expectation), `data_docs`, `validation_run` (GX's run
    name). Raises QualityThresholdError (nothing written) when the failing rows are more than
    `failure_threshold` of the batch."""
    from jobs.spark.avro import decode_payload
    from jobs.spark.gx_metrics import check_aggregates
    from jobs.spark.quarantine import quarantine_rows, write_quarantine
    from jobs.spark.validation import validate

    # The driver idles while the executors write: GX validates meanwhile.
    with ThreadPoolExecutor(1, thread_name_prefix="gx") as driver:
        decodes = f"payload decodes as {schema.fullname}"  # the failure of undecodable rows
        decoded = decode_payload(records, schema, ctx.schemas)
        if rows is not None:
            decoded = rows(decoded)
        undecodable = F.col("record_error").isNotNull() | F.col("payload_error").isNotNull()
        checked = decoded.withColumn("_failing", undecodable | any_failure(suite))
        failing = F.col("_failing")
        checks = check_aggregates(suite, also=undecodable)
        own = aggregates(~failing) if aggregates else []
        with ctx.phases("read_decode_check"):
            row = checked.agg(*checks.columns, *own).first().asDict()
        counts, gx_metrics = checks.read(row)
        read, bad_count = counts.pop("rows"), counts.pop("failing")
        counts[decodes] = counts.pop("*")
        per_expectation = {k: v for k, v in sorted(counts.items(), key=lambda kv: -kv[1]) if v}
        fields = [f["name"] for f in schema.raw["fields"]]
        ratio = bad_count / read if read else 0.0

        def validation() -> dict[str, Any]:
            with ctx.phases("validate"):
                report = validate(
                    checked.where(~undecodable).select(*fields),
                    suite,
                    Path(ctx.config.home) / "gx",
                    run_name=batch.run_name,
                    result_format=result_format,
                    metrics=gx_metrics,
                )
            found = {
                **report.to_json(),
                "failure_ratio": round(ratio, 6),
                "quarantined_by_expectation": per_expectation,
            }
            # validation_run: GX's run name, which names the validation's Data Docs pages (the
            # UI plugin serves a run's own pages only, found by it).
            return {
                "read": read,
                "validation": found,
                "data_docs": report.data_docs,
                "validation_run": batch.run_name,
            }

        # Whether the batch lands is decided by the counts above (the same expectations); GX gives
        # the report and the Data Docs.
        validating = driver.submit(validation)
        if ratio > failure_threshold:
            names = ", ".join(f"{k} ({v} rows)" for k, v in per_expectation.items())
            raise QualityThresholdError(
                f"{bad_count} of {read} rows ({ratio:.2%}) failed their expectations, over the "
                f"--failure-threshold {failure_threshold:.2%}: {names}. Nothing was written and "
                f"{batch.unmoved}: fix the producer, or rerun with a higher --failure-threshold to "
                "quarantine them",
                {**validating.result(), "written": 0, "quarantined": 0},
            )
        if bad_count:
            bad = checked.where(failing).withColumn(
                "failed_expectations",
                F.when(undecodable, F.array(F.lit(decodes))).otherwise(failed_expectations(suite)),
            )
            with ctx.phases("quarantine"):
                write_quarantine(quarantine_rows(bad, job=batch.job, batch=batch.batch), catalog)
        good = checked.where(~failing).drop("_failing") if bad_count else decoded
        written = write(Checked(good, row, read, bad_count))
        summary = validating.result() | {"written": read - bad_count, "quarantined": bad_count}
        return written, summary
