"""Audit batching (issue 12), in one run.

Section `publish`: entries/s from `streamcore.audit.publish` to the log `audit/entries`, on SQLite
and on PostgreSQL, with the relay's batching (25 entries per append or 500 ms) against one append
per entry (the outbox's plain relay: it claims 10 jobs at a time and appends them one by one).

Section `spark`: `jobs/audit.py batch` landing `--spark-entries` entries (default 1,000,000) from
`audit/entries` into the Delta `audit` table (read, decode, checks and GX, MERGE on event id),
against plain Spark appending the same rows to a Delta table partitioned by event day, in the
same Spark session after a warm-up of both (`--spark-warmup`, default 50,000). The entries are
put in the log from Spark beforehand, untimed (that is the relay's work, measured above). Target:
the job at >= 0.5x the baseline's entries/s.

Shape of every publish row: one publisher thread publishes `--entries` entries (default 20,000),
`--per-transaction` per committed transaction (default 10; each entry checked against
AuditEntry.avsc and put in the outbox), while the relay of an `Outbox` of `--workers` workers
(default 1, as docs/audit.md advises: the audit queue is ordered, so one worker claims at a time
and more only wake up for nothing) appends them to a fresh local log (default settings, `fsync =
none`) in the same process. The rate is entries over the seconds from the first publish until the
last entry is in the log; `per append` is entries over appends; `entries/CPU-s` divides by the CPU
time of the process.

    python bench/audit_bench.py [--section publish|spark|all] [--entries 20000]
        [--per-transaction 10] [--workers 1] [--spark-entries 1000000] [--spark-warmup 50000]
        [--master local[*]] [--json]

PostgreSQL is the server of `scripts/postgres.sh` (started if not running, and stopped again if
this run started it). Target: publish -> log >= 5,000 entries/s on SQLite (batched).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from outbox_bench import with_postgres

from streamcore.audit import STREAM, publish, relay
from streamcore.config import StreamcoreConfig
from streamcore.log import LogManager
from streamcore.log.local.manager import LocalLogManager
from streamcore.outbox import Outbox, Registry
from streamcore.outbox.schema import TABLE
from streamcore.text import TextColumn, render_table

TARGET_SQLITE_RATE = 5000.0
BATCHED = "25 / 500 ms"
PER_ENTRY = "1 per append"


class CountingAppender:
    """Delegates to a real appender and counts its appends."""

    def __init__(self, appender: Any, counts: list[int]) -> None:
        self._appender = appender
        self._counts = counts

    def __getattr__(self, name: str) -> Any:
        return getattr(self._appender, name)

    def append(self, key: str, message: Any) -> Any:
        self._counts.append(1)
        return self._appender.append(key, message)

    def append_batch(self, items: Any, **options: Any) -> Any:
        self._counts.append(len(items))
        return self._appender.append_batch(items, **options)


class CountingManager:
    """A log manager whose appenders count their appends (`counts`, one item per append)."""

    def __init__(self, manager: LogManager) -> None:
        self.manager = manager
        self.counts: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.manager, name)

    def appender(self, name: str, codec: Any = None) -> CountingAppender:
        return CountingAppender(self.manager.appender(name, codec), self.counts)


def entries(count: int) -> list[dict[str, Any]]:
    """Entries of a document repository: 1,000 documents, one event a millisecond."""
    documents = [str(uuid.uuid4()) for _ in range(1000)]
    start = datetime.now(UTC) - timedelta(hours=1)
    return [
        {
            "event_id": uuid.uuid4().hex,
            "event_type": ("documentCreated", "documentModified", "download")[n % 3],
            "category": "eventDocumentCategory",
            "doc_id": documents[n % 1000],
            "doc_path": f"/default-domain/workspaces/ws-{n % 10}/doc-{n % 1000}",
            "doc_type": "File",
            "principal": f"user-{n % 50}",
            "event_date": start + timedelta(milliseconds=n),
            "lifecycle_state": "project",
            "repository": "default",
            "extended": {"size": str(n * 17 % 100_000)},
        }
        for n in range(count)
    ]


def publish_row(
    database: str,
    url: str,
    batching: str,
    work: list[dict[str, Any]],
    per_transaction: int,
    workers: int,
) -> dict[str, Any]:
    label = f"{database}, {batching}"
    with tempfile.TemporaryDirectory(prefix="audit-bench-log-") as home:
        manager = CountingManager(
            LocalLogManager(Path(home) / "log", config=StreamcoreConfig(home=Path(home)))
        )
        registry = Registry()
        relay(manager, batch_capacity=25 if batching == BATCHED else None, registry=registry)
        outbox = Outbox(url, registry=registry, workers=workers)
        outbox.create_schema()
        with outbox.engine.begin() as conn:
            conn.execute(sa.text(f"DELETE FROM {TABLE}"))
        published = 0

        def publisher() -> None:
            nonlocal published
            for start in range(0, len(work), per_transaction):
                with outbox.engine.begin() as conn:
                    for item in work[start : start + per_transaction]:
                        publish(conn, item, registry=registry)
                published = min(start + per_transaction, len(work))

        with outbox:
            cpu = time.process_time()
            started = time.monotonic()
            thread = threading.Thread(target=publisher, name="bench-publish")
            thread.start()
            in_log, last_report = 0, started
            while in_log < len(work):
                time.sleep(0.02)
                in_log = manager.end_offsets(STREAM)[0]
                now = time.monotonic()
                if now - last_report >= 1.0:
                    last_report = now
                    print(
                        f"{label}: {published:,} published, {in_log:,} in the log, "
                        f"{in_log / (now - started):,.0f} entries/s",
                        file=sys.stderr,
                        flush=True,
                    )
            seconds = time.monotonic() - started
            cpu = time.process_time() - cpu
            thread.join()
        outbox.close()
        manager.close()
    return {
        "database": database,
        "batching": batching,
        "entries": len(work),
        "seconds": round(seconds, 2),
        "entries_per_s": round(len(work) / seconds, 1),
        "appends": len(manager.counts),
        "entries_per_append": round(len(work) / len(manager.counts), 1),
        "cpu_s": round(cpu, 2),
        "entries_per_cpu_s": round(len(work) / cpu, 1) if cpu else None,
    }


def publish_section(args: argparse.Namespace) -> dict[str, Any]:
    """publish -> log, both relays on both databases; ratios against one append per entry."""
    work = entries(args.entries)

    def rows_on(database: str, url: str) -> list[dict[str, Any]]:
        return [
            publish_row(database, url, batching, work, args.per_transaction, args.workers)
            for batching in (BATCHED, PER_ENTRY)
        ]

    with tempfile.TemporaryDirectory(prefix="audit-bench-db-") as tmp:
        rows = rows_on("sqlite", f"sqlite:///{tmp}/outbox.db")
    rows += with_postgres(lambda url: rows_on("postgres", url))
    baseline = {r["database"]: r for r in rows if r["batching"] == PER_ENTRY}
    for row in rows:
        row["vs_per_entry"] = round(
            row["entries_per_s"] / baseline[row["database"]]["entries_per_s"], 2
        )
    sqlite = next(r for r in rows if r["database"] == "sqlite" and r["batching"] == BATCHED)
    return {
        "shape": {
            "entries": args.entries,
            "per_transaction": args.per_transaction,
            "publishers": 1,
            "outbox_workers": args.workers,
        },
        "rows": rows,
        "targets": {
            "sqlite_entries_per_s": TARGET_SQLITE_RATE,
            "sqlite_met": sqlite["entries_per_s"] >= TARGET_SQLITE_RATE,
        },
    }


def print_publish(section: dict[str, Any]) -> None:
    shape = section["shape"]
    print(
        f"publish -> log: {shape['entries']:,} entries per row, {shape['per_transaction']} per "
        f"transaction, 1 publisher, relay on an Outbox of {shape['outbox_workers']} workers"
    )
    columns = [
        TextColumn("database", "left"),
        TextColumn("relay", "left"),
        TextColumn("seconds", "right"),
        TextColumn("entries/s", "right"),
        TextColumn("vs 1 per append", "right"),
        TextColumn("per append", "right"),
        TextColumn("CPU s", "right"),
        TextColumn("entries/CPU-s", "right"),
    ]
    table = [
        [
            r["database"],
            r["batching"],
            f"{r['seconds']:.1f}",
            f"{r['entries_per_s']:,.0f}",
            f"{r['vs_per_entry']:.2f}x",
            f"{r['entries_per_append']:.1f}",
            f"{r['cpu_s']:.1f}",
            f"{r['entries_per_cpu_s']:,.0f}" if r["entries_per_cpu_s"] else "-",
        ]
        for r in section["rows"]
    ]
    print(render_table(columns, table))
    targets = section["targets"]
    print(
        f"target: sqlite >= {targets['sqlite_entries_per_s']:,.0f} entries/s with batching: "
        f"{'met' if targets['sqlite_met'] else 'NOT met'}"
    )


# -- section spark: jobs/audit.py batch against plain Spark appending the same rows to Delta ------
SPARK_TARGET = 0.5  # the audit job's entries/s >= half of plain Spark's (issue 12)
_TYPES = ("documentCreated", "documentModified", "documentMoved", "download", "loginSuccess")


def audit_rows(spark: Any, count: int, partitions: int) -> Any:
    """`count` AuditEntry rows generated by Spark expressions: event dates 50 ms apart over the
    last two days, 100,000 documents, five event types."""
    from pyspark.sql import functions as F

    start_ms = int(time.time() * 1000) - 2 * 86_400_000
    n = F.col("id")
    return spark.range(count, numPartitions=partitions).select(
        F.concat(F.lit("e-"), n.cast("string")).alias("event_id"),
        F.element_at(F.array(*map(F.lit, _TYPES)), (n % len(_TYPES) + 1).cast("int")).alias(
            "event_type"
        ),
        F.lit("eventDocumentCategory").alias("category"),
        F.format_string("%08x-0000-4000-8000-%012x", n % 100_000, n).alias("doc_id"),
        F.concat(F.lit("/default-domain/workspaces/ws/doc-"), (n % 100_000).cast("string")).alias(
            "doc_path"
        ),
        F.lit("File").alias("doc_type"),
        F.concat(F.lit("user"), (n % 50).cast("string")).alias("principal"),
        F.timestamp_millis(F.lit(start_ms) + n * 50).alias("event_date"),
        F.lit(None).cast("string").alias("comment"),
        F.lit("project").alias("lifecycle_state"),
        F.lit("default").alias("repository"),
        F.create_map(F.lit("n"), n.cast("string")).alias("extended"),
    )


def spark_baseline(spark: Any, count: int, path: Path) -> float:
    """Plain Spark: the rows, with their UTC day, appended to a Delta table partitioned by it."""
    from pyspark.sql import functions as F

    started = time.monotonic()
    rows = audit_rows(spark, count, 4).withColumn(
        "event_day",
        F.date_from_unix_date(F.floor(F.unix_millis("event_date") / 86_400_000).cast("int")),
    )
    rows.write.format("delta").mode("append").partitionBy("event_day").save(str(path))
    return time.monotonic() - started


def publish_entries(spark: Any, count: int) -> None:
    """`count` entries of `audit_rows` put in `audit/entries` of the configured log (Avro Records
    appended from Spark, as the relay would: one partition)."""
    from pyspark.sql import functions as F

    from jobs import audit
    from jobs.spark.logs.avro import encode_payload, encode_record
    from jobs.spark.logs.log_writer import append_dataframe
    from streamcore.codecs import SchemaStore
    from streamcore.config import load_config
    from streamcore.log import open_log_manager

    config = load_config()
    schema = SchemaStore(config.schemas_dir).by_name(audit.SCHEMA)
    rows = audit_rows(spark, count, 1)
    payload = encode_payload([F.col(c) for c in rows.columns], schema)
    watermark = F.unix_millis("event_date") * F.lit(1 << 17)
    records = rows.select(
        F.col("doc_id").alias("key"),
        encode_record(F.col("doc_id"), payload, watermark).alias("value"),
    )
    manager = open_log_manager(config)
    try:
        manager.create(audit.STREAM, 1)
        append_dataframe(records, manager, audit.STREAM, layout="by_task")
    finally:
        manager.close()


def audit_batch(count: int, *args: str) -> dict[str, Any]:
    """`jobs/audit.py batch *args`, timed; it must land `count` entries."""
    from jobs import audit

    out = io.StringIO()
    started = time.monotonic()
    with contextlib.redirect_stdout(out):
        code = audit.main(["batch", *args])
    seconds = time.monotonic() - started
    summary = json.loads(out.getvalue().strip().splitlines()[-1])
    if code != 0 or summary["landed"] != count:
        raise SystemExit(f"audit batch failed or landed {summary.get('landed')}: {summary}")
    return {"seconds": seconds, "phases": summary.get("phases", {})}


def spark_job(spark: Any, count: int, home: Path) -> dict[str, Any]:
    """The same rows published to `audit/entries` (untimed: the relay's work), then
    `jobs/audit.py batch` timed."""
    os.environ["STREAMCORE_HOME"] = str(home)
    publish_entries(spark, count)
    return audit_batch(count)


def spark_section(args: argparse.Namespace) -> dict[str, Any]:
    from jobs.spark.session import build_session

    work = Path(tempfile.mkdtemp(prefix="audit-bench-spark-"))
    spark = build_session("audit-bench", args.master, conf={"spark.ui.enabled": "false"})
    n = args.spark_entries
    try:
        print(f"[bench] spark warm-up: {args.spark_warmup:,} entries", file=sys.stderr, flush=True)
        spark_baseline(spark, args.spark_warmup, work / "warmup-baseline")
        spark_job(spark, args.spark_warmup, work / "warmup-home")
        print(f"[bench] plain Spark -> Delta: {n:,} entries", file=sys.stderr, flush=True)
        base_s = spark_baseline(spark, n, work / "baseline")
        print(f"[bench] jobs/audit.py batch: {n:,} entries", file=sys.stderr, flush=True)
        job = spark_job(spark, n, work / "home")
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    ratio = base_s / job["seconds"]
    return {
        "entries": n,
        "baseline": {"seconds": round(base_s, 2), "entries_per_s": round(n / base_s)},
        "job": {
            "seconds": round(job["seconds"], 2),
            "entries_per_s": round(n / job["seconds"]),
            "phases": job["phases"],
        },
        "ratio": round(ratio, 3),
        "target": SPARK_TARGET,
        "target_met": ratio >= SPARK_TARGET,
    }


def print_spark(section: dict[str, Any]) -> None:
    n, base, job = section["entries"], section["baseline"], section["job"]
    rows = [
        ("plain Spark -> Delta (baseline)", n, base["seconds"], base["entries_per_s"], 1.0),
        ("jobs/audit.py batch", n, job["seconds"], job["entries_per_s"], section["ratio"]),
    ]
    print(render_table(["step", "entries", "seconds", "entries/s", "x baseline"], rows))
    phases = sorted(job["phases"].items(), key=lambda kv: -kv[1])
    print()
    print(render_table(["audit job phase", "seconds"], phases))
    verdict = "met" if section["target_met"] else "MISSED"
    print(f"\naudit job / baseline = {section['ratio']:.2f} (target >= {SPARK_TARGET}): {verdict}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=20_000, help="entries per row")
    parser.add_argument(
        "--per-transaction", type=int, default=10, help="entries per publishing transaction"
    )
    parser.add_argument("--workers", type=int, default=1, help="outbox workers of the relay")
    parser.add_argument(
        "--section", choices=("publish", "spark", "all"), default="all", help="what to run"
    )
    parser.add_argument(
        "--spark-entries", type=int, default=1_000_000, help="entries of the Spark section"
    )
    parser.add_argument(
        "--spark-warmup", type=int, default=50_000, help="entries of the Spark warm-up"
    )
    parser.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    summary: dict[str, Any] = {
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "cpus": os.cpu_count(),
    }
    if args.section in ("publish", "all"):
        summary["publish"] = publish_section(args)
    if args.section in ("spark", "all"):
        summary["spark"] = spark_section(args)
    summary["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    load = ", ".join(f"{x:.1f}" for x in summary["load_average"])
    print(f"audit: load average {load} on {summary['cpus']} CPUs")
    if "publish" in summary:
        print_publish(summary["publish"])
    if "spark" in summary:
        print()
        print_spark(summary["spark"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
