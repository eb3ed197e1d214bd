"""Retention throughput (issue 13, section 4), in one run and one SparkSession: the archive step
against plain Spark, the backfill replay against reading the archive alone, and OPTIMIZE of
`archive`.

* `archive`: plain Spark generates the rows `jobs/retention.py archive` lands (stream, partition,
  offset, timestamp, key, watermark, flags, data, schema_fingerprint, date) with `spark.range`
  expressions and appends them to a Delta table partitioned by (stream, date) (the baseline),
  against `jobs/retention.py archive --horizon 0 --streams bench/history`, in process: the
  offsets before now, the archiver's offset-range batch (read the local log through the Python
  Data Source, decode the Record envelopes, derive the archive columns), one Delta append
  carrying the batch's txn id, the commit's metrics, the group's positions.
* `backfill`: once the archive holds the history, `jobs/retention.py purge --force` deletes the
  hot log's sealed segments (the log is made with a 1 s retention and 2 MiB segments, so all but
  each partition's active segment expire), then `jobs/backfill.py --stream bench/history
  --target bench/replay` over an interval holding every record replays them, most from
  `archive`, the rest (the active segments) from the hot log, into `bench/replay` (same
  partition count, empty). Baseline: the same rows read from `archive` alone with Spark and
  brought to the driver as the backfill brings them (`toLocalIterator` over
  `orderBy(partition, offset)`), counted. Checks: appended == records, and from_archive ==
  the records the purge removed (> 0 but in the warm-up).
* `optimize`: `--records / 10` more Records appended to `bench/history` and archived in 4
  commits (`--batch-size`), as daily runs add files, then `jobs/retention.py maintain --tables
  archive` (OPTIMIZE z-ordered by partition, offset, then VACUUM at the declared retention):
  its wall time and the table's files before and after OPTIMIZE.

Setup, untimed: a fresh STREAMCORE_HOME in a temporary folder and the stream `bench/history` of 4
partitions holding `--records` Records (default 1,000,000; key, watermark, a ~200-byte payload
that looks like single-object Avro: `C3 01`, 8 fingerprint bytes, a body), appended from Spark
with `jobs.spark.logs.log_writer.append_dataframe`. Every step runs once on a warm-up of `--warmup`
records (default 50,000) first, so none pays the JVM/JIT and Python-worker start-up alone.

Prints records/s (and MB/s for the archive: the job's Delta commit `numOutputBytes`, the
baseline table's data files on disk) per step, the job/baseline ratios (archive target: >= 0.5x
the baseline's records/s), the jobs' phases, OPTIMIZE's time and files, and the load average
before and after.

    python bench/retention_bench.py [--records 1000000] [--warmup 50000] [--master local[*]]
        [--json]
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
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from streamcore.codecs.framing import single_object_header
from streamcore.text import TextColumn, render_table

TARGET = 0.5  # the archive job's records/s >= half of plain Spark's (issue 13)
STREAM = "bench/history"
REPLAY = "bench/replay"
PARTITIONS = 4
# The history's log: segments short enough that a purge leaves only each partition's active
# one (append_dataframe writes 10,000-record Arrow batches, ~2.6 MB: one per segment, so the
# warm-up's 12,500 records a partition make two), and a retention they outlive by the time the
# archive step is done.
HISTORY_LOG = {"retention": "1s", "segment_bytes": 2 * 1024 * 1024}
OPTIMIZE_BATCHES = 4  # archive commits of the extra history before OPTIMIZE
FINGERPRINT = 0x0123_4567_89AB_CDEF  # of the payloads' (made-up) writer schema
HEADER = single_object_header(FINGERPRINT)  # C3 01 + the 8 fingerprint bytes
BODY_BYTES = 190  # payload = 10 header bytes + 190 = 200 bytes
_DAY_MS = 86_400_000
_MINUTE = timedelta(minutes=1)
REPLAY_COLUMNS = ("partition", "offset", "timestamp", "key", "watermark", "flags", "data")


def history_rows(spark: Any, count: int, start_ms: int, first: int = 0) -> Any:
    """`count` records of a document stream as Spark expressions, in `PARTITIONS` Spark
    partitions: partition and offset, a time (1,000 records a millisecond from `start_ms`), key,
    watermark (the time << 17) and a 200-byte payload (the single-object header, then a
    JSON-looking body with a SHA-256, padded). `first`: the first document number."""
    from pyspark.sql import functions as F

    n = F.col("id")
    ms = F.lit(start_ms) + F.floor((n - first) / 1000)
    body = F.rpad(
        F.concat(
            F.lit('{"id":"doc-'),
            n.cast("string"),
            F.lit('","sha256":"'),
            F.sha2(n.cast("string"), 256),
            F.lit('","title":"document '),
            (n % 1000).cast("string"),
            F.lit('","text":"'),
        ),
        BODY_BYTES - 2,
        ".",
    )
    return spark.range(first, first + count, numPartitions=PARTITIONS).select(
        (n % PARTITIONS).cast("int").alias("partition"),
        (n / PARTITIONS).cast("long").alias("offset"),
        F.timestamp_millis(ms).alias("timestamp"),
        F.format_string("doc-%08d", n).alias("key"),
        (ms * F.lit(1 << 17)).alias("watermark"),
        F.concat(F.lit(HEADER), F.encode(F.concat(body, F.lit('"}')), "UTF-8")).alias("data"),
    )


def data_bytes(path: Path) -> int:
    """Bytes of the data files of the Delta table at `path` (not its `_delta_log`)."""
    return sum(f.stat().st_size for f in path.rglob("*.parquet") if "_delta_log" not in f.parts)


def spark_baseline(spark: Any, count: int, path: Path) -> dict[str, Any]:
    """Plain Spark: the `archive` rows of `count` records, generated and appended to a Delta
    table partitioned by (stream, date), as the job's table is."""
    from pyspark.sql import functions as F

    started = time.monotonic()
    rows = history_rows(spark, count, int(time.time() * 1000)).select(
        F.lit(STREAM).alias("stream"),
        "partition",
        "offset",
        "timestamp",
        "key",
        "watermark",
        F.lit(1).alias("flags"),
        "data",
        F.lit(HEADER[2:].hex()).alias("schema_fingerprint"),
        F.date_from_unix_date(
            F.floor(F.unix_millis(F.col("timestamp")) / _DAY_MS).cast("int")
        ).alias("date"),
    )
    rows.write.format("delta").mode("append").partitionBy("stream", "date").save(str(path))
    seconds = time.monotonic() - started
    return {"seconds": seconds, "bytes": data_bytes(path)}


def put_history(spark: Any, count: int, home: Path, first: int = 0) -> None:
    """Append `count` Records (documents `first`...) to the stream `STREAM` of the
    STREAMCORE_HOME at `home`, creating it (`HISTORY_LOG`) if missing, from Spark (untimed:
    producing is not the archiver's work)."""
    from pyspark.sql import functions as F

    from jobs.spark.logs.avro import encode_record
    from jobs.spark.logs.log_writer import append_dataframe
    from streamcore.config import load_config
    from streamcore.log import open_log_manager

    os.environ["STREAMCORE_HOME"] = str(home)
    rows = history_rows(spark, count, int(time.time() * 1000) - 60_000, first)
    records = rows.select(
        "key", encode_record(F.col("key"), F.col("data"), F.col("watermark")).alias("value")
    )
    manager = open_log_manager(load_config())
    try:
        manager.create(STREAM, PARTITIONS, **HISTORY_LOG)
        counts = append_dataframe(records, manager, STREAM, layout="by_task")
    finally:
        manager.close()
    if sum(counts.values()) != count:
        raise SystemExit(f"appended {sum(counts.values())} records of {count}: {counts}")


def run_main(job: Any, argv: list[str], home: Path) -> tuple[float, dict[str, Any]]:
    """`job.main(argv)` on the STREAMCORE_HOME `home`, in process, timed; its JSON summary (the
    last stdout line). Exits if the job failed."""
    os.environ["STREAMCORE_HOME"] = str(home)
    out = io.StringIO()
    started = time.monotonic()
    with contextlib.redirect_stdout(out):
        code = job.main(argv)
    seconds = time.monotonic() - started
    lines = out.getvalue().strip().splitlines()
    summary = json.loads(lines[-1]) if lines else {}
    if code != 0:
        raise SystemExit(f"{job.__name__} {' '.join(argv)} failed (exit {code}): {summary}")
    return seconds, summary


def archive_job(count: int, home: Path, batch_size: int = 0) -> dict[str, Any]:
    """`jobs/retention.py archive --horizon 0 --streams STREAM [--batch-size N]` on `home`,
    timed; checks that it archived `count` records."""
    from jobs import retention

    argv = ["archive", "--horizon", "0", "--streams", STREAM]
    if batch_size:
        argv += ["--batch-size", str(batch_size)]
    seconds, summary = run_main(retention, argv, home)
    if summary.get("archived") != count:
        raise SystemExit(f"retention archive archived {summary.get('archived')} of {count}")
    return {
        "seconds": seconds,
        "bytes": int(summary.get("bytes", 0)),
        "files": int(summary["streams"][STREAM].get("files", 0)),
        "phases": summary.get("phases", {}),
    }


def purge_history(home: Path, required: bool) -> dict[str, Any]:
    """`jobs/retention.py purge --streams STREAM --force` (untimed): the archived history out of
    the hot log, but for each partition's active segment. `required`: exit if it purged nothing
    (a partition's records fit in one segment: the warm-up's may)."""
    from jobs import retention

    _, summary = run_main(retention, ["purge", "--streams", STREAM, "--force"], home)
    if required and not summary.get("records_purged"):
        raise SystemExit(
            "the purge removed nothing (each partition's records fit in its active segment), "
            f"so the backfill would not read the archive; give more --records: {summary}"
        )
    return {
        "records_purged": summary["records_purged"],
        "segments_purged": summary["segments_purged"],
    }


def backfill_job(
    count: int, purged: int, home: Path, start: datetime, end: datetime
) -> dict[str, Any]:
    """`jobs/backfill.py --stream STREAM --start --end --target REPLAY` on `home`, timed (the
    target created first, untimed); checks that it appended `count` records, the `purged` ones
    from `archive`."""
    from jobs import backfill
    from streamcore.config import load_config
    from streamcore.log import open_log_manager

    os.environ["STREAMCORE_HOME"] = str(home)
    manager = open_log_manager(load_config())
    try:
        manager.create(REPLAY, PARTITIONS)
    finally:
        manager.close()
    argv = ["--stream", STREAM, "--start", start.isoformat(), "--end", end.isoformat()]
    seconds, summary = run_main(backfill, [*argv, "--target", REPLAY], home)
    if summary.get("appended") != count or summary.get("from_archive") != purged:
        raise SystemExit(
            f"the backfill appended {summary.get('appended')} of {count} records, "
            f"{summary.get('from_archive')} from the archive (purged: {purged}): {summary}"
        )
    return {
        "seconds": seconds,
        "from_archive": int(summary["from_archive"]),
        "phases": summary.get("phases", {}),
    }


def archive_read(spark: Any, count: int, home: Path) -> dict[str, Any]:
    """Baseline of the backfill: the stream's rows read from `archive` alone with Spark and
    brought to the driver as the backfill brings them (`toLocalIterator` over
    `orderBy(partition, offset)`), counted."""
    from pyspark.sql import functions as F

    from jobs.spark.delta.catalog import Catalog
    from streamcore.config import load_config

    os.environ["STREAMCORE_HOME"] = str(home)
    path = Catalog(spark, load_config()).path("archive")
    started = time.monotonic()
    rows = (
        spark.read.format("delta")
        .load(path)
        .where(F.col("stream") == STREAM)
        .select(*REPLAY_COLUMNS)
        .orderBy("partition", "offset")
        .toLocalIterator(prefetchPartitions=True)
    )
    read = sum(1 for _ in rows)
    seconds = time.monotonic() - started
    if read != count:
        raise SystemExit(f"read {read} rows of {STREAM} from archive, expected {count}")
    return {"seconds": seconds}


def optimize(spark: Any, count: int, home: Path) -> dict[str, Any]:
    """`count` more Records into STREAM, archived in `OPTIMIZE_BATCHES` commits (untimed), then
    `jobs/retention.py maintain --tables archive`, timed, with its OPTIMIZE's file counts."""
    from jobs import retention

    put_history(spark, count, home, first=10**9)
    batch = -(-count // OPTIMIZE_BATCHES)
    for _ in range(OPTIMIZE_BATCHES):
        archive_job(min(batch, count), home, batch_size=batch)
        count -= batch
    seconds, summary = run_main(retention, ["maintain", "--tables", "archive"], home)
    table = summary["tables"]["archive"]
    done = table["optimize"]
    return {
        "seconds": seconds,
        "files_before": done["files_before"],
        "files_after": done["files_after"],
        "bytes_before": done["bytes_before"],
        "bytes_after": done["bytes_after"],
        "zorder_by": done["zorder_by"],
        "vacuum_files_removed": table["vacuum"]["files_before"] - table["vacuum"]["files_after"],
        "phases": summary.get("phases", {}),
    }


def pipeline(spark: Any, n: int, work: Path, label: str, warmup: bool) -> dict[str, Any]:
    """Every step on `n` records in `work` (the warm-up runs it too)."""

    def say(text: str) -> None:
        print(f"[bench] {label}{text}", file=sys.stderr, flush=True)

    home = work / "home"
    say(f"plain Spark -> Delta: {n:,} records")
    base = spark_baseline(spark, n, work / "baseline")
    say(f"setup: {n:,} records into {STREAM}")
    start = datetime.now(UTC) - _MINUTE  # the interval the backfill replays: all of it
    put_history(spark, n, home)
    say(f"jobs/retention.py archive: {n:,} records")
    job = archive_job(n, home)
    purged = purge_history(home, required=not warmup)
    say(f"purged {purged['records_purged']:,} records; reading them from archive")
    read = archive_read(spark, n, home)
    say(f"jobs/backfill.py: {n:,} records into {REPLAY}")
    replay = backfill_job(n, purged["records_purged"], home, start, datetime.now(UTC) + _MINUTE)
    extra = max(n // 10, OPTIMIZE_BATCHES)
    say(f"{extra:,} more records archived in {OPTIMIZE_BATCHES} commits; maintain archive")
    tidy = optimize(spark, extra, home)
    return {
        "baseline": base,
        "job": job,
        "purged": purged,
        "read": read,
        "backfill": replay,
        "optimize": tidy,
        "extra": extra,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    from jobs.spark.session import build_session

    work = Path(tempfile.mkdtemp(prefix="retention-bench-"))
    # The JVM inherits stderr as its stdout: Delta's VACUUM prints there, and stdout is the
    # results' (--json).
    sys.stdout.flush()
    stdout = os.dup(1)
    os.dup2(2, 1)
    try:
        spark = build_session("retention-bench", args.master, conf={"spark.ui.enabled": "false"})
    finally:
        os.dup2(stdout, 1)
        os.close(stdout)
    n = args.records
    try:
        pipeline(spark, args.warmup, work / "warmup", f"warm-up ({args.warmup:,}): ", True)
        got = pipeline(spark, n, work / "bench", "", False)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    base, job, read, replay, tidy = (
        got[k] for k in ("baseline", "job", "read", "backfill", "optimize")
    )
    ratio = base["seconds"] / job["seconds"]

    def figures(step: dict[str, Any]) -> dict[str, Any]:
        return {
            "seconds": round(step["seconds"], 2),
            "records_per_s": round(n / step["seconds"]),
            "bytes": step["bytes"],
            "mb_per_s": round(step["bytes"] / 1e6 / step["seconds"], 1),
        }

    def rate(step: dict[str, Any]) -> dict[str, Any]:
        return {"seconds": round(step["seconds"], 2), "records_per_s": round(n / step["seconds"])}

    archive = {
        "records": n,
        "partitions": PARTITIONS,
        "master": args.master,
        "baseline": figures(base),
        "job": {**figures(job), "files": job["files"], "phases": job["phases"]},
        "ratio": round(ratio, 3),
        "target": TARGET,
        "target_met": ratio >= TARGET,
    }
    backfill = {
        "records": n,
        "from_archive": replay["from_archive"],
        "from_log": n - replay["from_archive"],
        "purged": got["purged"],
        "baseline": rate(read),
        "job": {**rate(replay), "phases": replay["phases"]},
        "ratio": round(read["seconds"] / replay["seconds"], 3),
    }
    optimize = {
        "records": n + got["extra"],
        "extra_records": got["extra"],
        "extra_commits": OPTIMIZE_BATCHES,
        **{k: (round(v, 2) if k == "seconds" else v) for k, v in tidy.items()},
    }
    return {"archive": archive, "backfill": backfill, "optimize": optimize}


def print_archive(result: dict[str, Any]) -> None:
    n, base, job = result["records"], result["baseline"], result["job"]
    rows = [
        (
            label,
            f"{n:,}",
            f"{step['seconds']:.2f}",
            f"{step['records_per_s']:,}",
            f"{step['mb_per_s']:.1f}",
            f"{ratio:.2f}",
        )
        for label, step, ratio in (
            ("plain Spark -> Delta (baseline)", base, 1.0),
            ("jobs/retention.py archive", job, result["ratio"]),
        )
    ]
    numbers = ("records", "seconds", "records/s", "MB/s", "x baseline")
    columns = [TextColumn("step", "left"), *(TextColumn(title, "right") for title in numbers)]
    print(render_table(columns, rows))
    print_phases("archive job phase", job)
    verdict = "met" if result["target_met"] else "MISSED"
    print(f"\narchive job / baseline = {result['ratio']:.2f} (target >= {TARGET}): {verdict}")


def print_phases(title: str, step: dict[str, Any]) -> None:
    phases = sorted(step["phases"].items(), key=lambda kv: -kv[1])
    if phases:
        other = ("other (outside the phases)", step["seconds"] - sum(s for _, s in phases))
        print()
        print(render_table([title, "seconds"], [*phases, other]))


def print_backfill(result: dict[str, Any]) -> None:
    n, base, job = result["records"], result["baseline"], result["job"]
    rows = [
        (label, f"{n:,}", f"{step['seconds']:.2f}", f"{step['records_per_s']:,}", f"{ratio:.2f}")
        for label, step, ratio in (
            ("archive -> driver, counted (baseline)", base, 1.0),
            ("jobs/backfill.py", job, result["ratio"]),
        )
    ]
    numbers = ("records", "seconds", "records/s", "x baseline")
    columns = [TextColumn("step", "left"), *(TextColumn(title, "right") for title in numbers)]
    print(render_table(columns, rows))
    print(
        f"\nreplayed {result['from_archive']:,} records from archive and "
        f"{result['from_log']:,} from the hot log (the purge removed "
        f"{result['purged']['records_purged']:,})"
    )
    print_phases("backfill job phase", job)


def print_optimize(result: dict[str, Any]) -> None:
    rows = [
        (
            "jobs/retention.py maintain --tables archive",
            f"{result['records']:,}",
            f"{result['seconds']:.2f}",
            f"{result['files_before']:,}",
            f"{result['files_after']:,}",
            f"{result['bytes_before'] / 1e6:.1f}",
            f"{result['bytes_after'] / 1e6:.1f}",
        )
    ]
    numbers = ("records", "seconds", "files before", "files after", "MB before", "MB after")
    columns = [TextColumn("step", "left"), *(TextColumn(title, "right") for title in numbers)]
    print(render_table(columns, rows))
    print(
        f"\n(the table: the archive step's commit plus {result['extra_commits']} commits of "
        f"{result['extra_records']:,} more records; z-ordered by "
        f"{', '.join(result['zorder_by'])})"
    )
    print_phases("maintain job phase", result)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000, help="records (default 1M)")
    parser.add_argument(
        "--warmup", type=int, default=50_000, help="records of the warm-up (default 50,000)"
    )
    parser.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    if args.records < 1 or args.warmup < 1:
        parser.error("--records and --warmup must be positive")
    summary: dict[str, Any] = {
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "cpus": os.cpu_count(),
    }
    summary |= run(args)
    summary["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    before = ", ".join(f"{x:.1f}" for x in summary["load_average"])
    after = ", ".join(f"{x:.1f}" for x in summary["load_average_after"])
    print(f"retention: load average {before} on {summary['cpus']} CPUs (after: {after})")
    print("\narchive\n")
    print_archive(summary["archive"])
    print("\nbackfill\n")
    print_backfill(summary["backfill"])
    print("\noptimize\n")
    print_optimize(summary["optimize"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
