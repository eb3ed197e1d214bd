"""The importer (Nuxeo's stream importer, Spark edition): one spark-submit application, two steps.

    spark-submit jobs/importer.py produce --source random --count 100000 --partitions 4
    spark-submit jobs/importer.py produce --source files --path docs.jsonl
    spark-submit jobs/importer.py consume --failure-threshold 0.05

`produce` appends Documents (random, or read from JSON lines / CSV / Parquet / Avro files) as
Avro single-object payloads in streamcore Records to `import/docs`, from the executors.
`consume` reads the group's unconsumed range of the stream, decodes and validates it (Great
Expectations, with row-level failures to the `quarantine` table), MERGEs the good documents into
the Delta `repository` table (upsert by id) exactly once, then commits the group's positions.

Arguments are checked before Spark starts (exit 2 names the bad one); exit 0 only on success;
the last stdout line is a one-line JSON summary. `python jobs/importer.py ...` runs the same with
a local session.
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
import time
from pathlib import Path
from typing import Any

from jobs.spark.job import (
    JobArgumentError,
    JobContext,
    add_check_options,
    check_failure_threshold,
    run_job,
)
from streamcore.errors import InvalidNameError, StreamcoreError
from streamcore.log.registry import MAX_PARTITIONS, partitions_in_range
from streamcore.names import Name

logger = logging.getLogger("jobs.importer")

DOCUMENT_SCHEMA = "org.streamcore.importer.Document"
_TABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_FORMATS = ("jsonl", "csv", "parquet", "avro")


# -- arguments ------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="importer", description=__doc__.split("\n\n")[0])
    steps = parser.add_subparsers(dest="step", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--stream", default="import/docs", help="log name (default import/docs)")
    common.add_argument("--home", help="STREAMCORE_HOME (default: the configured one)")
    common.add_argument("--master", help="Spark master when not run by spark-submit (local[*])")

    produce = steps.add_parser("produce", parents=[common], help="append documents to the stream")
    produce.add_argument("--source", choices=("random", "files"), default="random")
    produce.add_argument("--path", help="file or folder of files (--source files)")
    produce.add_argument("--format", choices=_FORMATS, help="default: from the file extension")
    produce.add_argument("--count", type=int, default=1000, help="random documents to generate")
    produce.add_argument(
        "--partitions",
        type=int,
        help="partitions of the stream when it is created (default 4; an existing stream keeps "
        "its size)",
    )
    produce.add_argument("--avg-blob-size", type=int, default=1024, help="mean blob size (bytes)")
    produce.add_argument("--seed", type=int, default=0, help="random seed (reproducible runs)")

    consume = steps.add_parser("consume", parents=[common], help="import the stream into Delta")
    consume.add_argument("--group", default="import/repository", help="consumer group")
    consume.add_argument(
        "--batch-size", type=int, default=0, help="max records this run reads (0 = all)"
    )
    add_check_options(
        consume,
        default_threshold=0.05,
        threshold_help="fail when more than this fraction of the rows fails expectations (0..1)",
    )
    consume.add_argument(
        "--table",
        default="repository",
        help="Delta table under the warehouse root (STREAMCORE_WAREHOUSE); a name other than "
        "repository is a repository-shaped table of that name",
    )
    return parser


def check_args(args: argparse.Namespace) -> None:
    """Reject bad arguments before Spark starts (the runner exits 2 with the message; the DAG's
    validate task calls this too)."""
    try:
        Name.of(args.stream)
        if args.step == "consume":
            Name.of(args.group)
    except InvalidNameError as exc:
        raise JobArgumentError(f"--stream/--group: {exc}") from None
    if args.home is not None and Path(args.home).exists() and not Path(args.home).is_dir():
        raise JobArgumentError(
            f"--home {args.home} is not a directory; give the STREAMCORE_HOME folder"
        )
    if args.step == "produce":
        if args.source == "random" and args.count < 1:
            raise JobArgumentError(f"--count must be at least 1, got {args.count}")
        if args.source == "files":
            if not args.path:
                raise JobArgumentError("--source files needs --path (a file or a folder of files)")
            if not Path(args.path).exists():
                raise JobArgumentError(
                    f"--path {args.path} does not exist; give an existing file or folder"
                )
            from jobs.spark.documents.import_roots import check_import_path
            from streamcore.config import load_config

            try:
                roots = load_config(**({"home": args.home} if args.home else {})).import_roots
                # The job reads the path it checked, not whatever a link points to later.
                args.path = str(check_import_path(args.path, roots))
            except StreamcoreError as exc:
                raise JobArgumentError(f"--path: {exc}") from None
            if args.format is None:
                from jobs.spark.documents.formats import detect_format

                try:
                    args.format = detect_format(args.path)
                except StreamcoreError as exc:
                    raise JobArgumentError(str(exc)) from None
        if args.partitions is not None and not partitions_in_range(args.partitions):
            raise JobArgumentError(
                f"--partitions must be 1..{MAX_PARTITIONS}, got {args.partitions}"
            )
        if args.avg_blob_size < 0:
            raise JobArgumentError(f"--avg-blob-size must be >= 0 bytes, got {args.avg_blob_size}")
    else:
        if args.batch_size < 0:
            raise JobArgumentError(
                f"--batch-size must be >= 0 (0 = everything), got {args.batch_size}"
            )
        check_failure_threshold(args)
        if not _TABLE_NAME.match(args.table):
            raise JobArgumentError(
                f"--table {args.table!r} must be a plain identifier such as repository"
            )


# -- steps ----------------------------------------------------------------------------------------
def run(args: argparse.Namespace, ctx: JobContext) -> dict[str, Any]:
    base = {"stream": Name.of(args.stream).urn}
    return {**base, **(produce(args, ctx) if args.step == "produce" else consume(args, ctx))}


def produce(args: argparse.Namespace, ctx: JobContext) -> dict[str, Any]:
    """Append the documents to the stream from the executors; returns the summary."""
    from pyspark.sql import functions as F

    from jobs.spark.documents.frames import check_encodable, random_documents, read_documents
    from jobs.spark.logs.avro import encode_payload, encode_record, spark_schema
    from jobs.spark.logs.log_writer import append_dataframe

    manager, phases = ctx.logs, ctx.phases
    schema = ctx.schemas.by_name(DOCUMENT_SCHEMA)
    stream = Name.of(args.stream)
    spark = ctx.spark
    if not manager.exists(stream):
        manager.create(stream, args.partitions or 4)
    elif args.partitions is not None:
        manager.create(stream, args.partitions)  # LogExistsError if the sizes differ
    partitions = manager.size(stream)
    if args.source == "random":
        docs = random_documents(
            spark,
            args.count,
            partitions=partitions,
            seed=args.seed,
            avg_blob_size=args.avg_blob_size,
        )
        layout = "by_task"  # generated ids are unique: no key needs a fixed partition
    else:
        docs = read_documents(spark, args.path, args.format, spark_schema(spark, schema))
        with phases("check_input"):
            check_encodable(docs, schema)
        layout = "by_key"
    now_ms = time.time_ns() // 1_000_000
    payload = encode_payload([F.col(c) for c in docs.columns], schema)
    records = docs.select(
        F.col("id").alias("key"),
        encode_record(F.col("id"), payload, F.lit(now_ms << 17)).alias("value"),
    )
    started = time.monotonic()
    with phases("generate_encode_append"):
        counts = append_dataframe(records, manager, stream, layout=layout)
    seconds = time.monotonic() - started
    total = sum(counts.values())
    logger.info("appended %d documents to %s in %.1f s", total, stream, seconds)
    return {
        "partitions": partitions,
        "documents": total,
        "per_partition": {str(p): n for p, n in sorted(counts.items())},
        "source": args.source,
        # The file or folder read, for the task's lineage (dags/_lineage.py, source_files).
        **({"path": args.path, "format": args.format} if args.source == "files" else {}),
        "docs_per_s": round(total / seconds, 1) if seconds > 0 else None,
        # The span the rate is measured over: a phase, not the whole job (see `render`).
        "docs_per_s_over": {"phase": "generate_encode_append", "seconds": round(seconds, 3)},
    }


def consume(args: argparse.Namespace, ctx: JobContext) -> dict[str, Any]:
    """Import the group's unconsumed range into the Delta table, exactly once."""
    from jobs.spark.batches import run_offset_batch
    from jobs.spark.delta.catalog import Catalog
    from jobs.spark.documents.repository import DocumentLanding
    from jobs.spark.quality.validation import preload

    catalog = Catalog(ctx.spark, ctx.config)
    table_path, quarantine_path = catalog.path(args.table), catalog.path("quarantine")
    preload()
    started = time.monotonic()
    summary = run_offset_batch(
        ctx,
        app="importer",
        stream=args.stream,
        group=args.group,
        table_path=table_path,
        land=DocumentLanding(
            ctx,
            catalog,
            table=args.table,
            failure_threshold=args.failure_threshold,
            result_format=args.gx_result_format,
        ),
        max_records=args.batch_size,
    )
    seconds = time.monotonic() - started
    summary["quarantine_path"] = quarantine_path
    if summary["read"] == 0:
        return {
            **summary,
            "imported": 0,
            "inserted": 0,
            "updated": 0,
            "quarantined": 0,
            "validation": None,
            "data_docs": None,
            "docs_per_s": 0.0,
        }
    return {
        **summary,
        "docs_per_s": round(summary["read"] / seconds, 1) if seconds > 0 else None,
        # The span the rate is measured over: the offset batch (plan, read, checks, MERGE,
        # commit of the positions), not the whole job with its Spark start-up (see `render`).
        "docs_per_s_over": {"phase": "offset_batch", "seconds": round(seconds, 3)},
    }


# -- summary --------------------------------------------------------------------------------------
def render(summary: dict[str, Any]) -> str:
    """What a run did, as an aligned two-column table (the DAG's summary task logs it, `make demo`
    prints it). `summary`: the run's job summaries by step, `produce`'s and `consume`'s."""
    from streamcore.text import render_rows

    # A run on records (the DAG's `[importer] runs_on`) has no produce step.
    produced, consumed = summary.get("produce") or {}, summary["consume"]
    validation = consumed.get("validation") or {}
    failed = validation.get("failed_expectations") or []
    seconds = (produced.get("seconds") or 0) + (consumed.get("seconds") or 0)
    rows = [
        ("documents produced", f"{produced.get('documents', 0):,}"),
        ("records read", f"{consumed.get('read', 0):,}"),
        ("valid rows merged", f"{consumed.get('imported', 0):,}"),
        ("documents inserted", f"{consumed.get('inserted', 0):,}"),
        ("documents updated", f"{consumed.get('updated', 0):,}"),
        ("quarantined", f"{consumed.get('quarantined', 0):,}"),
        ("failure ratio", f"{validation.get('failure_ratio') or 0:.4f}"),
        ("failed expectations", ", ".join(map(str, failed)) or "none"),
        ("produce", _timing(produced)),
        ("consume", _timing(consumed)),
        (
            "end to end (both jobs)",
            f"{seconds:.1f} s, {consumed.get('read', 0) / seconds if seconds else 0:,.0f} docs/s",
        ),
        (
            "Delta table",
            f"{consumed.get('table_path', '?')} (version {consumed.get('delta_version')})",
        ),
        ("quarantine table", str(consumed.get("quarantine_path", "?"))),
        ("Data Docs", str(consumed.get("data_docs") or "none (nothing to validate)")),
    ]
    return render_rows(rows)


def _timing(step: dict[str, Any]) -> str:
    """A step's whole-job seconds (Spark start-up included), then the phase its documents/s is
    measured over, named, with that phase's own seconds: never one's rate beside the other's
    time."""
    text = f"{step.get('seconds') or 0:.1f} s the whole job"
    over = step.get("docs_per_s_over")
    if over:
        rate = step.get("docs_per_s") or 0
        text += f"; {over['phase']} {over['seconds']:.1f} s, {rate:,.0f} docs/s"
    return text


def main(argv: list[str] | None = None) -> int:
    return run_job(sys.modules[__name__], argv)


if __name__ == "__main__":
    sys.exit(main())
