"""Bulk actions (issue 14) against one Delta MERGE doing the same update, in one run and one
SparkSession.

Setup, untimed: a `repository`-shaped table of `--count` random documents (default 1,000,000:
the importer's generator, ids random UUIDs) in two layouts, and every timed step starts from a
copy of one:

* `unclustered`: as appended, every file holding ids from the whole range (what the importer's
  batches leave);
* `clustered`: the same after the retention DAG's maintenance (OPTIMIZE z-ordered by id) into
  files of at most `--file-mb` MB (default 8, so a 1M-document table has files as narrow in ids
  as a 100M-document one has with Delta's default 1 GB): a batch, an id range, then reads and
  rewrites its own files only.

For each layout:

* baseline: one MERGE setting the same `properties` entry on every document, its source being
  `setProperties`' own `apply` over the whole table: the least any bulk update of these rows
  costs on Spark + Delta;
* `setProperties` over every document, once per (bucket size, batch size) of `--sweep`: the
  command submitted through `BulkService` then `jobs/bulk_action.py` run in process, from
  submit to COMPLETED (scroll, one MERGE per batch with its txn id, status deltas per bucket).
  Each run's table is checked afterwards (every row carries the entry).

Then `csvExport` of `--export-docs` documents (default 2,000; Nuxeo's example exported 1,844 in
about 1.4 s), from submit to COMPLETED with its zipped CSV written: in process on the warm
session (median of `--repeat`), and once cold (the job as a script in its own Python and JVM),
what an Airflow task pays today.

Prints documents/s per row and its ratio to the baseline, the target (>= 0.5 at the best
setting) and the export latencies.

    python bench/bulk_bench.py [--count 1000000] [--sweep 100000:100000,...] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from streamcore.config import project_root
from streamcore.text import render_table

ROOT = project_root()

TARGET = 0.5  # bulk documents/s over the baseline's, at the best setting (issue 14)
QUERY = "type IN ('Folder', 'File', 'Note')"  # every generated document
PARAMS = {"properties": {"bench": "done"}}
SWEEP = "1000000:1000000,250000:250000,250000:50000,100000:100000"
NUXEO_EXPORT = (1844, 1.4)  # documents, seconds (reference/nuxeo-stream.md, section 4)


def say(text: str) -> None:
    print(f"[bench] {text}", file=sys.stderr, flush=True)


def repository_frame(spark: Any, catalog: Any, count: int, seed: int) -> Any:
    """`count` random documents shaped as the `repository` table (system columns null)."""
    from pyspark.sql import functions as F

    from jobs.spark.delta.catalog import table_schema
    from jobs.spark.documents.frames import random_documents

    docs = random_documents(spark, count, partitions=4, seed=seed)
    extra = {
        "watermark": F.unix_millis(F.col("created")),
        "source_partition": F.lit(0),
        "source_offset": F.monotonically_increasing_id(),
        "import_batch": F.lit(0),
        "imported_at": F.current_timestamp(),
    }
    schema = table_schema(catalog.spec("repository"))
    return docs.select(
        *[
            (F.col(f.name) if f.name in docs.columns else extra.get(f.name, F.lit(None)))
            .cast(f.dataType)
            .alias(f.name)
            for f in schema.fields
        ]
    )


def fresh_table(catalog: Any, master: Path, name: str) -> str:
    """A new table `name`, a copy of `master`. A new name each time: Spark's Delta log cache
    keeps a path's newest version, which a copy replacing a table in place would go back on."""
    path = catalog.path(name)
    shutil.copytree(master, path)
    return path


def baseline(spark: Any, table: str) -> float:
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    from streamcore.bulk.actions import SetProperties

    started = time.monotonic()
    target = DeltaTable.forPath(spark, table)
    source = SetProperties().apply(target.toDF().where(QUERY), PARAMS, F)
    (
        target.alias("t")
        .merge(source.alias("s"), "t.id = s.id")
        .whenMatchedUpdate(set={"properties": F.col("s.properties")})
        .execute()
    )
    return time.monotonic() - started


def run_command(action: str, params: dict, repository: str, **sizes: Any) -> tuple[float, dict]:
    """Submit then run one command in process; (seconds from submit to its end, summary)."""
    from jobs import bulk_action
    from streamcore.bulk import BulkService

    started = time.monotonic()
    with BulkService() as service:
        command = service.submit(
            action, QUERY, params, username="bench", repository=repository, **sizes
        ).command_id
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = bulk_action.main(["--command-id", command])
    seconds = time.monotonic() - started
    summary = json.loads(out.getvalue().strip().splitlines()[-1])
    if code != 0 or summary["state"] != "COMPLETED":
        raise SystemExit(f"{action} {sizes} did not complete: {summary}")
    return seconds, summary


def cold_export(repository: str) -> float:
    """A csvExport from submit to COMPLETED with the job as a script: its own Python and JVM."""
    from streamcore.bulk import BulkService

    started = time.monotonic()
    with BulkService() as service:
        command = service.submit(
            "csvExport", QUERY, {}, username="bench", repository=repository
        ).command_id
    subprocess.run(
        [sys.executable, str(ROOT / "jobs" / "bulk_action.py"), "--command-id", command],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    seconds = time.monotonic() - started
    with BulkService() as service:
        state = service.status(command).state.value
    if state != "COMPLETED":
        raise SystemExit(f"the cold csvExport ended {state}")
    return seconds


def updated_rows(spark: Any, table: str) -> int:
    key, value = next(iter(PARAMS["properties"].items()))
    frame = spark.read.format("delta").load(table)
    return frame.where(frame["properties"][key] == value).count()


def parse_sweep(text: str) -> list[tuple[int, int]]:
    sizes = []
    for item in text.split(","):
        bucket, _, batch = item.partition(":")
        sizes.append((int(bucket), int(batch or bucket)))
    return sizes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=1_000_000, help="documents (default 1M)")
    parser.add_argument(
        "--sweep",
        default=SWEEP,
        help=f"bucket:batch sizes of the setProperties runs (default {SWEEP})",
    )
    parser.add_argument("--export-docs", type=int, default=2_000, help="csvExport documents")
    parser.add_argument("--repeat", type=int, default=5, help="warm csvExport runs (median)")
    parser.add_argument(
        "--file-mb",
        type=int,
        default=8,
        help="largest file of the clustered table, MB (default 8: a 1M-document table then "
        "has files as narrow in ids as a 100M-document table has with Delta's 1 GB)",
    )
    parser.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    sweep = parse_sweep(args.sweep)
    if min(args.count, args.export_docs, args.repeat, args.file_mb) < 1:
        parser.error("--count, --export-docs, --repeat and --file-mb must be positive")

    from jobs.spark.delta.catalog import Catalog
    from jobs.spark.session import build_session
    from streamcore.config import load_config

    work = Path(tempfile.mkdtemp(prefix="bulk-bench-"))
    os.environ["STREAMCORE_HOME"] = str(work / "home")
    spark = build_session("bulk-bench", args.master, conf={"spark.ui.enabled": "false"})
    catalog = Catalog(spark, load_config())
    exports = catalog.ensure("exports")
    layouts: dict[str, dict[str, Any]] = {}
    try:
        say(f"setup: {args.count:,} documents, {args.export_docs:,} for the export")
        masters = setup(spark, catalog, args.count, args.file_mb)
        repository_frame(spark, catalog, args.export_docs, seed=2).write.format("delta").mode(
            "append"
        ).save(exports)

        say("warm-up: a MERGE and a small command")
        baseline(spark, exports)
        run_command("setProperties", PARAMS, "exports")
        run_command("csvExport", {}, "exports")

        for layout, master in masters.items():
            layouts[layout] = sweep_layout(spark, catalog, layout, master, sweep, args.count)

        say(f"csvExport of {args.export_docs:,} documents, {args.repeat} warm runs")
        warm = [run_command("csvExport", {}, "exports")[0] for _ in range(args.repeat)]
        say("csvExport, cold (the job as a script)")
        cold = cold_export("exports")
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)

    result = report(args, layouts, warm, cold)
    if args.json:
        print(json.dumps(result))
        return 0
    n = args.count
    rows = []
    for layout, found in layouts.items():
        base_s = found["baseline_s"]
        rows.append((layout, "one MERGE (baseline)", "", "", base_s, f"{n / base_s:,.0f}", 1.0))
        for r in found["runs"]:
            seconds = r["seconds"]
            bucket, batch = f"{r['bucket']:,}", f"{r['batch']:,}"
            row = (layout, "setProperties", bucket, batch, seconds, f"{n / seconds:,.0f}")
            rows.append((*row, base_s / seconds))
    headers = ["table", "step", "bucket", "batch", "seconds", "docs/s", "x baseline"]
    print(render_table(headers, rows))
    print()
    for layout, best in result["best"].items():
        verdict = "met" if best["x_baseline"] >= TARGET else "MISSED"
        print(
            f"{layout}: best at bucket {best['bucket']:,}, batch {best['batch']:,}: "
            f"{best['x_baseline']:.2f}x the baseline (target >= {TARGET}): {verdict}"
        )
    print()
    docs, seconds = NUXEO_EXPORT
    export_rows = [
        ("warm session, in process (median)", args.export_docs, statistics.median(warm)),
        ("warm session, in process (best)", args.export_docs, min(warm)),
        ("cold: the job as a script", args.export_docs, cold),
        ("Nuxeo's example (reference)", docs, seconds),
    ]
    print(render_table(["csvExport, submit to COMPLETED", "documents", "seconds"], export_rows))
    return 0


def setup(spark: Any, catalog: Any, count: int, file_mb: int) -> dict[str, str]:
    """The two starting tables: `unclustered` as appended (random ids in every file), and
    `clustered` the same after the retention DAG's OPTIMIZE (z-order by id), into files of at
    most `file_mb` MB."""
    from delta.tables import DeltaTable

    unclustered = catalog.ensure("bench_unclustered")
    repository_frame(spark, catalog, count, seed=1).write.format("delta").mode("append").save(
        unclustered
    )
    clustered = fresh_table(catalog, Path(unclustered), "bench_clustered")
    spark.conf.set("spark.databricks.delta.optimize.maxFileSize", str(file_mb << 20))
    try:
        DeltaTable.forPath(spark, clustered).optimize().executeZOrderBy("id")
    finally:
        spark.conf.unset("spark.databricks.delta.optimize.maxFileSize")
    return {"unclustered": unclustered, "clustered": clustered}


def sweep_layout(
    spark: Any, catalog: Any, layout: str, master: str, sweep: list[tuple[int, int]], n: int
) -> dict[str, Any]:
    """The baseline then every setting of the sweep, each on its own copy of `master`."""
    say(f"{layout}: baseline, one MERGE over {n:,} documents")
    table = fresh_table(catalog, Path(master), f"{layout}_baseline")
    base_s = baseline(spark, table)
    if updated_rows(spark, table) != n:
        raise SystemExit("the baseline MERGE did not update every document")
    runs = []
    for i, (bucket, batch) in enumerate(sweep):
        name = f"{layout}_run_{i}"
        table = fresh_table(catalog, Path(master), name)
        say(f"{layout}: setProperties, bucket {bucket:,}, batch {batch:,}")
        seconds, summary = run_command(
            "setProperties", PARAMS, name, bucket_size=bucket, batch_size=batch
        )
        found = updated_rows(spark, table)
        if summary["processed"] != n or found != n:
            raise SystemExit(f"bucket {bucket}, batch {batch}: {found} rows updated")
        runs.append({"bucket": bucket, "batch": batch, "seconds": seconds})
        say(f"  {seconds:.1f} s, {base_s / seconds:.2f}x the baseline")
    return {"baseline_s": base_s, "runs": runs}


def report(
    args: argparse.Namespace, layouts: dict[str, dict[str, Any]], warm: list[float], cold: float
) -> dict[str, Any]:
    n = args.count
    result: dict[str, Any] = {
        "documents": n,
        "master": args.master,
        "clustered_file_mb": args.file_mb,
        "layouts": {},
        "best": {},
        "target": TARGET,
    }
    for layout, found in layouts.items():
        base_s = found["baseline_s"]
        result["layouts"][layout] = {
            "baseline": {"seconds": round(base_s, 2), "docs_per_s": round(n / base_s)},
            "setProperties": [
                {
                    **r,
                    "seconds": round(r["seconds"], 2),
                    "docs_per_s": round(n / r["seconds"]),
                    "x_baseline": round(base_s / r["seconds"], 3),
                }
                for r in found["runs"]
            ],
        }
        best = min(found["runs"], key=lambda r: r["seconds"])
        result["best"][layout] = {
            "bucket": best["bucket"],
            "batch": best["batch"],
            "x_baseline": round(base_s / best["seconds"], 3),
        }
    result["target_met"] = all(b["x_baseline"] >= TARGET for b in result["best"].values())
    result["csvExport"] = {
        "documents": args.export_docs,
        "warm_median_s": round(statistics.median(warm), 2),
        "warm_min_s": round(min(warm), 2),
        "cold_s": round(cold, 2),
        "nuxeo": {"documents": NUXEO_EXPORT[0], "seconds": NUXEO_EXPORT[1]},
    }
    return result


if __name__ == "__main__":
    sys.exit(main())
