"""Retention archive throughput (issue 13, section `archive`), in one run and one SparkSession.

* baseline: plain Spark generates the rows `jobs/retention.py archive` lands (stream, partition,
  offset, timestamp, key, watermark, flags, data, schema_fingerprint, date) with `spark.range`
  expressions and appends them to a Delta table partitioned by (stream, date);
* job: `jobs/retention.py archive --horizon 0 --streams bench/history`, in process: the offsets
  before now, the archiver's offset-range batch (read the local log through the Python Data
  Source, decode the Record envelopes, derive the archive columns), one Delta append carrying
  the batch's txn id, the commit's metrics, the group's positions.

Setup, untimed: a fresh STREAMCORE_HOME in a temporary folder and the stream `bench/history` of 4
partitions holding `--records` Records (default 1,000,000; key, watermark, a ~200-byte payload
that looks like single-object Avro: `C3 01`, 8 fingerprint bytes, a body), appended from Spark
with `jobs.spark.log_writer.append_dataframe`. Both steps run once on a warm-up of `--warmup`
records (default 50,000) first, so neither pays the JVM/JIT and Python-worker start-up alone.

Prints records/s and MB/s per step (MB/s: the job's Delta commit `numOutputBytes`, the baseline
table's data files on disk), the job/baseline ratio against the target (>= 0.5x the baseline's
records/s), the job's phases, and the load average before and after.

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
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # `jobs` is not installed

from streamcore.cli.table import Column, render_table  # noqa: E402
from streamcore.codecs.framing import single_object_header  # noqa: E402

TARGET = 0.5  # the archive job's records/s >= half of plain Spark's (issue 13)
STREAM = "bench/history"
PARTITIONS = 4
FINGERPRINT = 0x0123_4567_89AB_CDEF  # of the payloads' (made-up) writer schema
HEADER = single_object_header(FINGERPRINT)  # C3 01 + the 8 fingerprint bytes
BODY_BYTES = 190  # payload = 10 header bytes + 190 = 200 bytes
_DAY_MS = 86_400_000


def history_rows(spark: Any, count: int, start_ms: int) -> Any:
    """`count` records of a document stream as Spark expressions, in `PARTITIONS` Spark
    partitions: partition and offset, a time (1,000 records a millisecond from `start_ms`), key,
    watermark (the time << 17) and a 200-byte payload (the single-object header, then a
    JSON-looking body with a SHA-256, padded)."""
    from pyspark.sql import functions as F

    n = F.col("id")
    ms = F.lit(start_ms) + F.floor(n / 1000)
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
    return spark.range(count, numPartitions=PARTITIONS).select(
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


def put_history(spark: Any, count: int, home: Path) -> None:
    """A fresh STREAMCORE_HOME at `home` whose stream `STREAM` holds `count` Records, appended
    from Spark (untimed: producing is not the archiver's work)."""
    from pyspark.sql import functions as F

    from jobs.spark.avro import encode_record
    from jobs.spark.log_writer import append_dataframe
    from streamcore.config import load_config
    from streamcore.log import open_log_manager

    os.environ["STREAMCORE_HOME"] = str(home)
    rows = history_rows(spark, count, int(time.time() * 1000) - 60_000)
    records = rows.select(
        "key", encode_record(F.col("key"), F.col("data"), F.col("watermark")).alias("value")
    )
    manager = open_log_manager(load_config())
    try:
        manager.create(STREAM, PARTITIONS)
        counts = append_dataframe(records, manager, STREAM, layout="by_task")
    finally:
        manager.close()
    if sum(counts.values()) != count:
        raise SystemExit(f"appended {sum(counts.values())} records of {count}: {counts}")


def archive_job(count: int, home: Path) -> dict[str, Any]:
    """`jobs/retention.py archive --horizon 0 --streams STREAM` on `home`, timed; checks that it
    archived all `count` records."""
    from jobs import retention

    os.environ["STREAMCORE_HOME"] = str(home)
    out = io.StringIO()
    started = time.monotonic()
    with contextlib.redirect_stdout(out):
        code = retention.main(["archive", "--horizon", "0", "--streams", STREAM])
    seconds = time.monotonic() - started
    lines = out.getvalue().strip().splitlines()
    summary = json.loads(lines[-1]) if lines else {}
    if code != 0 or summary.get("archived") != count:
        raise SystemExit(
            f"retention archive failed (exit {code}) or archived {summary.get('archived')} of "
            f"{count} records: {summary}"
        )
    return {
        "seconds": seconds,
        "bytes": int(summary.get("bytes", 0)),
        "files": int(summary["streams"][STREAM].get("files", 0)),
        "phases": summary.get("phases", {}),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    from jobs.spark.session import build_session

    work = Path(tempfile.mkdtemp(prefix="retention-bench-"))
    spark = build_session("retention-bench", args.master, conf={"spark.ui.enabled": "false"})
    n = args.records
    try:
        print(f"[bench] warm-up: {args.warmup:,} records", file=sys.stderr, flush=True)
        spark_baseline(spark, args.warmup, work / "warmup-baseline")
        put_history(spark, args.warmup, work / "warmup-home")
        archive_job(args.warmup, work / "warmup-home")
        print(f"[bench] plain Spark -> Delta: {n:,} records", file=sys.stderr, flush=True)
        base = spark_baseline(spark, n, work / "baseline")
        print(f"[bench] setup: {n:,} records into {STREAM}", file=sys.stderr, flush=True)
        put_history(spark, n, work / "home")
        print(f"[bench] jobs/retention.py archive: {n:,} records", file=sys.stderr, flush=True)
        job = archive_job(n, work / "home")
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    ratio = base["seconds"] / job["seconds"]

    def figures(step: dict[str, Any]) -> dict[str, Any]:
        return {
            "seconds": round(step["seconds"], 2),
            "records_per_s": round(n / step["seconds"]),
            "bytes": step["bytes"],
            "mb_per_s": round(step["bytes"] / 1e6 / step["seconds"], 1),
        }

    return {
        "records": n,
        "partitions": PARTITIONS,
        "master": args.master,
        "baseline": figures(base),
        "job": {**figures(job), "files": job["files"], "phases": job["phases"]},
        "ratio": round(ratio, 3),
        "target": TARGET,
        "target_met": ratio >= TARGET,
    }


def print_results(result: dict[str, Any]) -> None:
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
    columns = [Column("step", "left"), *(Column(title, "right") for title in numbers)]
    print(render_table(columns, rows))
    phases = sorted(job["phases"].items(), key=lambda kv: -kv[1])
    if phases:
        other = ("other (outside the phases)", job["seconds"] - sum(s for _, s in phases))
        print()
        print(render_table(["archive job phase", "seconds"], [*phases, other]))
    verdict = "met" if result["target_met"] else "MISSED"
    print(f"\narchive job / baseline = {result['ratio']:.2f} (target >= {TARGET}): {verdict}")


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
    summary["archive"] = run(args)
    summary["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    before = ", ".join(f"{x:.1f}" for x in summary["load_average"])
    after = ", ".join(f"{x:.1f}" for x in summary["load_average_after"])
    print(f"retention archive: load average {before} on {summary['cpus']} CPUs (after: {after})")
    print_results(summary["archive"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
