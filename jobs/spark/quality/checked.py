"""Checked landing: what every stream-to-Delta job does between reading a batch of Records and
writing it (docs/design.md, "Micro-batches, exactly-once and intervals"). Decode the payloads
with their schema, check the rows against the schema's expectation suite, have Great
Expectations validate them for the report and the Data Docs, refuse the batch when too many rows
fail, send the failing rows to `quarantine`, and hand back the job's write of the good rows (a
`BatchWrite`). `CheckedLanding` is the one base of such landings (the importer's documents, the
audit entries, the backfill's repository target): as `run_offset_batch`'s `land` it checks an
offset batch and the runner performs its write; `land` alone serves an interval, whose job runs
the write itself.

Two passes over the batch and no copy of it between them: on either log, filling Spark's cache
of the decoded batch cost more than reading and decoding it again (the local log, 1M documents:
3.6-4.1 s against 2.2 s; Kafka, 1M documents: a first pass 3-6x as long, bench/RESULTS.md, issue
31). The first pass is one aggregate: the failure counts, the metrics GX would run its own Spark
jobs for (`jobs.spark.quality.gx_metrics`) and the job's own aggregates (the importer's id
uniqueness).
Whether the batch lands is decided from those counts, so GX validates on the driver while the second
pass, the job's write, runs; the write's summary waits for GX's report. When no row failed, the
write gets the decoded rows without the checks.

No pyspark at module level: a job module defines its landing here and stays importable without
Spark (its DAG's summary task imports it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from jobs.spark.batches import BatchWrite
from jobs.spark.job import JobContext, JobError
from streamcore.names import Name

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from jobs.spark.batch_positions import BatchPlan
    from jobs.spark.delta.catalog import Catalog
    from jobs.spark.quality.expectations import Suite
    from streamcore.codecs import ParsedSchema

__all__ = [
    "Checked",
    "CheckedBatch",
    "CheckedLanding",
    "QualityThresholdError",
    "land_checked",
]


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
    prepared: Any = None  # what `prepare` found of the table, beside the first pass


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
    write: Callable[[Checked], BatchWrite],
    aggregates: Callable[[Column], list[Column]] | None = None,
    rows: Callable[[DataFrame], DataFrame] | None = None,
    prepare: Callable[[], Any] | None = None,
) -> BatchWrite:
    """Check `records` (as `read_stream` gives them) and return `write`'s write of the good rows,
    whose summary (`then`) adds the checks' to the write's own: `read`, `written`,
    `quarantined`, `validation` (GX's report with the failure ratio and the rows quarantined per
    expectation), `data_docs`, `validation_run` (GX's run name). `aggregates(keep)` adds the
    job's aggregates over the rows `keep` holds for (the good ones) to the first pass;
    `rows(decoded)` keeps the decoded rows the batch is about (an interval's, say; a row that
    does not decode has no fields to keep it by). `prepare()` reads what the write needs of its
    table (its check and detail, never its creation: a refused batch creates nothing) on a
    driver thread beside the first pass; `write` gets its result as `Checked.prepared`. Raises
    QualityThresholdError (nothing written) when the failing rows are more than
    `failure_threshold` of the batch."""
    from pyspark.sql import functions as F

    from jobs.spark.logs.avro import decode_payload
    from jobs.spark.quality.expectations import any_failure, failed_expectations
    from jobs.spark.quality.gx_metrics import check_aggregates
    from jobs.spark.quality.quarantine import quarantine_rows, write_quarantine
    from jobs.spark.quality.validation import validate

    # The driver idles while the executors write: GX validates meanwhile, until the write's
    # summary asks for its report (`then`), which ends the thread.
    driver = ThreadPoolExecutor(1, thread_name_prefix="gx")
    # The table's check and detail are driver round-trips to Delta's log: beside the first pass.
    preparing = driver.submit(prepare) if prepare is not None else None
    try:
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
        prepared = preparing.result() if preparing is not None else None
        written = write(Checked(good, row, read, bad_count, prepared))
    except BaseException:
        driver.shutdown()  # GX's report is not needed, but its thread ends before the error goes on
        raise
    landed = {"written": read - bad_count, "quarantined": bad_count}

    def then(version: int | None) -> dict[str, Any]:
        try:
            report = validating.result() | landed
        finally:
            driver.shutdown()
        return report | written.finish(version)

    return BatchWrite(written.action, written.phase, then=then)


class CheckedLanding:
    """The base of a job's checked landing. A subclass sets `schema` and `suite` (in its
    `__init__`, after this one's), gives `write` (the write of a batch's good rows), and may add
    first-pass `aggregates` and reshape the summary (`finish`). `job` names the fault point
    `<job>.before_delta_commit` of its offset batches."""

    job: str = "job"
    schema: ParsedSchema
    suite: Suite

    def __init__(
        self,
        ctx: JobContext,
        catalog: Catalog,
        *,
        failure_threshold: float,
        result_format: str,
    ) -> None:
        self.ctx, self.catalog = ctx, catalog
        self.failure_threshold, self.result_format = failure_threshold, result_format

    def __call__(self, records: DataFrame, plan: BatchPlan) -> BatchWrite:
        """The `land` of `run_offset_batch`: check the offset batch `plan` read, as batch
        `plan.batch` of its app id; the runner writes what this returns."""
        batch = CheckedBatch(
            job=plan.app_id,
            batch=plan.batch,
            run_name=self.run_name(plan),
            records=plan.records,
            unmoved=f"the positions of {plan.group} did not move",
        )
        fault = f"{self.job}.before_delta_commit"
        return self.land(records, batch, before_write=lambda: self.ctx.fault_point(fault))

    def run_name(self, plan: BatchPlan) -> str:
        """GX's run name of an offset batch (it names the batch's Data Docs)."""
        return f"{Name.of(plan.group).id}-batch-{plan.batch}"

    def land(
        self,
        records: DataFrame,
        batch: CheckedBatch,
        *,
        rows: Callable[[DataFrame], DataFrame] | None = None,
        before_write: Callable[[], None] | None = None,
    ) -> BatchWrite:
        """Check `records` as `batch` (`land_checked`; `rows` as there) and return the write of
        the good rows, whose summary `finish` reshapes; `before_write` runs once the batch is
        accepted and its failing rows quarantined."""

        def write(checked: Checked) -> BatchWrite:
            if before_write is not None:
                before_write()
            return self.write(checked, batch)

        landed = land_checked(
            self.ctx,
            self.catalog,
            records,
            batch,
            schema=self.schema,
            suite=self.suite,
            failure_threshold=self.failure_threshold,
            result_format=self.result_format,
            write=write,
            aggregates=lambda keep: self.aggregates(keep, batch),
            rows=rows,
            prepare=self.prepare,
        )
        return dataclasses.replace(landed, then=lambda v: self.finish(landed.finish(v), v))

    def aggregates(self, keep: Column, batch: CheckedBatch) -> list[Column]:
        """The job's own aggregates of the first pass over the rows `keep` holds for."""
        return []

    def prepare(self) -> Any:
        """What the write needs of its table, read beside the first pass (`checked.prepared`):
        `Catalog.check_existing`, never a creation."""
        return None

    def write(self, checked: Checked, batch: CheckedBatch) -> BatchWrite:
        """The write of `checked.good`, not yet run."""
        raise NotImplementedError

    def finish(self, summary: dict[str, Any], version: int | None) -> dict[str, Any]:
        """The landing's summary once Delta version `version` (None: no commit) is written."""
        return summary
