"""Bulk action (docs/bulk.md): run one submitted bulk command over its Delta table.

    spark-submit jobs/bulk_action.py --command-id 0b6f8c1e-...

The command was submitted before (`streamcore bulk submit`, `BulkService.submit`, the bulk DAG's
validate task), checked there (action, params, query) and stored SCHEDULED in the command store,
the truth of its state. The job:

1. **scroll** (SCROLLING_RUNNING): the ids matching the query, in id order, at most the query
   limit, numbered into buckets and batches and written once under
   `STREAMCORE_HOME/bulk/<id>/scroll` (`jobs.spark.bulk.scroll`). None → COMPLETED at once;
   else RUNNING with the total.
2. **buckets**, in order. Before each, the stored state: ABORTED (`streamcore bulk abort`)
   stops the run, so later buckets stay untouched, and the job acknowledges the abort when it
   stops (an exclusive action's slot is held until then). A bucket's current rows go by batches of
   `batch_size` (id ranges, which let Delta skip files) through the action's
   `apply(docs, params, F)`; an `update` or `delete` batch is one MERGE into the table carrying
   Delta's txn id (`bulk/<id>`, the batch's number across buckets: `jobs.spark.bulk.apply`),
   an `export` bucket one CSV part. After each bucket, a
   status delta adds its ids to `processed` (counted once per bucket by the store), and the log
   shows the progress line of the status the store returns (done, rate, ETA), the line
   `streamcore bulk status` shows.
3. **completion**: the last bucket's delta brings `processed` to the total, which makes the
   command COMPLETED; an export first joins its parts into one file sorted by id (zipped),
   whose path is the status result `url`. The full status lands in the Delta table
   `bulk_status` when the run ends (also a run that finds the command already finished or
   aborted), and when the scroll ends unless the command has one bucket.

A rerun (a retried task, a cleared run) is safe at any point: a finished command does nothing,
a complete scroll is reused, Delta skips the batches that landed, CSV parts are rewritten the
same, and a bucket's delta counts once.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from jobs.spark.job import JobArgumentError, JobContext, JobError, job_parser, run_job

logger = logging.getLogger("jobs.bulk_action")


def build_parser() -> argparse.ArgumentParser:
    parser = job_parser("bulk_action", __doc__.split("\n\n")[0])
    parser.add_argument(
        "--command-id", required=True, help="the submitted command (streamcore bulk list)"
    )
    return parser


def check_args(args: argparse.Namespace) -> None:
    from streamcore.bulk import BulkParamsError
    from streamcore.bulk.model import check_command_id

    try:
        check_command_id(args.command_id)
    except BulkParamsError as exc:
        raise JobArgumentError(f"--command-id: {exc}") from None


def run(args: argparse.Namespace, ctx: JobContext) -> dict[str, Any]:
    from streamcore.bulk import BulkError, BulkService, State

    with BulkService(ctx.config) as service:
        try:
            command = service.command(args.command_id)
        except BulkError as exc:
            raise JobError(str(exc)) from None
        try:
            return _Run(ctx, service, command).run()
        finally:
            # However the run ended, it writes nothing more: an aborted command's exclusive
            # slot may go to another command now, not while a bucket was being written.
            if service.status(command.id).state is State.ABORTED:
                service.acknowledge_abort(command.id)


class _Run:
    """One run of one command."""

    def __init__(self, ctx: JobContext, service: Any, command: Any) -> None:
        self.ctx = ctx
        self.service = service
        self.command = command
        self.action = service.registry.get(command.action)
        self.params = self.action.check_params(command.params)
        self.folder = Path(ctx.config.home) / "bulk" / command.id
        self.app_id = f"bulk/{command.id}"

    def delta(self, **changes: Any) -> Any:
        from streamcore.bulk import BulkStatus

        return BulkStatus(command_id=self.command.id, delta=True, **changes)

    def run(self) -> dict[str, Any]:
        from jobs.spark.delta.catalog import Catalog

        status = self.service.status(self.command.id)
        self.catalog = Catalog(self.ctx.spark, self.ctx.config)
        if status.state.terminal:
            # Aborted before any run, or a run's final record lost to a crash: the table gets
            # the final status either way (the MERGE is idempotent).
            self.record(status)
            return self.summary(status, note="already finished: nothing to do")
        # Ensured before any batch: a creation or migration commit carrying a batch's txn id
        # would make Delta skip that batch.
        self.table = self.catalog.ensure(self.command.repository)
        found = self.scroll()
        if found.total == 0:
            return self.summary(self.service.status(self.command.id))
        aborted = self.buckets(found)
        status = self.service.status(self.command.id)
        self.record(status)
        return self.summary(status, buckets=found.buckets, aborted=aborted)

    def scroll(self) -> Any:
        from jobs.spark.bulk.scroll import load_scroll, scroll
        from streamcore.bulk import State, check_query
        from streamcore.bulk.columns import repository_columns
        from streamcore.bulk.model import now_ms

        path = str(self.folder / "scroll")
        found = load_scroll(self.ctx.spark, path)
        if found is None:
            self.service.update(
                self.command.id,
                self.delta(state=State.SCROLLING_RUNNING, scroll_start_ms=now_ms()),
            )
            with self.ctx.phases("scroll"):
                found = scroll(
                    self.ctx.spark,
                    self.table,
                    check_query(
                        self.command.query,
                        repository_columns(self.command.repository, self.ctx.config),
                    ),
                    bucket_size=self.command.bucket_size,
                    batch_size=self.command.batch_size,
                    query_limit=self.command.query_limit,
                    out_path=path,
                )
        elif self.service.status(self.command.id).state is State.RUNNING:
            return found  # a rerun: the scroll and its status are there
        status = self.service.update(
            self.command.id,
            self.delta(
                state=State.RUNNING if found.total else State.COMPLETED,
                total=found.total,
                scroll_end_ms=now_ms(),
                query_limit_reached=found.limit_reached,
            ),
        )
        # A one-bucket command ends within seconds, when the run records its final status: a
        # MERGE into `bulk_status` costs about a second, a third of a small export's latency.
        if found.buckets != 1:
            self.record(status)
        if found.limit_reached:
            logger.warning(
                "%s: the query matches more than the query limit; only the first %d documents "
                "(in id order) are processed",
                self.command.id,
                self.command.query_limit,
            )
        return found

    def buckets(self, found: Any) -> bool:
        """Process every bucket; True when an abort stopped the run."""
        from streamcore.bulk import State
        from streamcore.bulk.model import now_ms
        from streamcore.bulk.progress import progress_line

        start_ms = now_ms()
        size = self.command.bucket_size
        held = None  # an export's last delta waits for its file (see `finish`)
        for bucket in range(found.buckets):
            if self.service.status(self.command.id).state is State.ABORTED:
                logger.warning("%s: aborted before bucket %d", self.command.id, bucket)
                return True
            ids = min(size, found.total - bucket * size)
            with self.ctx.phases("buckets"):
                self.bucket(bucket)
            delta = self.delta(
                processed=ids, processing_start_ms=start_ms, processing_end_ms=now_ms()
            )
            if self.action.kind == "export" and bucket == found.buckets - 1:
                held = delta  # sent with the file's path, below
            else:
                status = self.service.update(self.command.id, delta, bucket=bucket)
                logger.info(
                    "%s bucket %d/%d: %s",
                    self.command.action,
                    bucket + 1,
                    found.buckets,
                    progress_line(status),
                )
            self.ctx.fault_point("bulk.after_bucket")
        if held is not None:
            status = self.service.update(
                self.command.id, self.finish(held), bucket=found.buckets - 1
            )
            logger.info("%s: %s", self.command.action, progress_line(status))
        return False

    def bucket(self, bucket: int) -> None:
        from pyspark.sql import functions as F

        from jobs.spark.bulk.apply import apply_delete, apply_update
        from jobs.spark.bulk.csv_export import write_csv_part
        from jobs.spark.bulk.scroll import bucket_docs, id_ranges, whole_bucket

        scrolled = str(self.folder / "scroll")
        parts = id_ranges(self.ctx.spark, scrolled, bucket)
        if self.action.kind == "export":
            docs = bucket_docs(self.ctx.spark, scrolled, self.table, whole_bucket(parts))
            rows = self.action.apply(docs, self.params, F)
            self.columns = list(rows.columns)
            write_csv_part(rows, self.folder / "export", bucket)
            return
        write = apply_delete if self.action.kind == "delete" else apply_update
        per_bucket = -(-self.command.bucket_size // self.command.batch_size)
        for part in parts:
            docs = bucket_docs(self.ctx.spark, scrolled, self.table, part)
            version = write(
                self.ctx.spark,
                self.table,
                self.action.apply(docs, self.params, F),
                app_id=self.app_id,
                version=bucket * per_bucket + part.batch,
                within=(part.first, part.last),
            )
            if version is None:
                logger.info("%s batch %d/%d landed before", self.app_id, bucket, part.batch)

    def finish(self, last: Any) -> Any:
        """An export's file from its parts; `last` (the last bucket's delta) with its path."""
        from dataclasses import replace

        from jobs.spark.bulk.csv_export import finish_csv

        with self.ctx.phases("export"):
            path = finish_csv(
                self.folder / "export",
                self.columns,
                sort=self.params.get("sort", True),
                zip=self.params.get("zip", True),
            )
        logger.info("%s: exported to %s", self.command.id, path)
        return replace(last, result={"url": str(path)})

    def record(self, status: Any) -> None:
        """The full status into the Delta table `bulk_status` (MERGE on the command id)."""
        from jobs.spark.bulk.status_table import record_status

        record_status(self.ctx.spark, self.catalog, status)

    def summary(self, status: Any, **extra: Any) -> dict[str, Any]:
        return {
            "command_id": self.command.id,
            "action": self.command.action,
            "state": status.state.value,
            "total": status.total,
            "processed": status.processed or 0,
            "query_limit_reached": bool(status.query_limit_reached),
            "result": status.result or {},
            **extra,
        }


# -- summary --------------------------------------------------------------------------------------
def render(summary: dict[str, Any]) -> str:
    """A bulk command's run: state, documents, query limit, abort, result, as an aligned
    two-column table (the DAGs' summary task logs it). `summary`: the run's job summaries by
    step, here `run`'s."""
    from streamcore.text import render_rows

    run = summary["run"]
    rows = [
        ("command", f"{run.get('command_id')} ({run.get('action')})"),
        ("state", str(run.get("state"))),
        ("documents", f"{run.get('processed', 0):,} of {run.get('total') or 0:,}"),
    ]
    if run.get("query_limit_reached"):
        rows.append(("query limit", "reached: the documents beyond it were not processed"))
    if run.get("aborted"):
        rows.append(("aborted", "stopped between buckets; later buckets untouched"))
    rows += [(f"result {k}", v) for k, v in sorted((run.get("result") or {}).items())]
    return render_rows(rows)


def main(argv: list[str] | None = None) -> int:
    return run_job(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
