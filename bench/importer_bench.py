"""The importer end to end against plain Spark, in one run and one SparkSession.

* baseline: Spark generates N random Documents (the importer's generator) and writes that
  DataFrame straight to a Delta table;
* importer: `jobs/importer.py produce` (the same generated DataFrame, Avro-encoded into Records,
  appended to the local log `import/docs` from the executors) then `consume` (read the offset
  range, decode, row checks, Great Expectations validation with Data Docs, MERGE into Delta
  exactly once, commit the positions).

Both run on the same warm session (a small warm-up of each first, so neither pays the JVM/JIT and
Python-worker start-up alone). Prints documents/s per step, the importer/baseline ratios of
consume and of produce + consume against their targets (>= 0.5 and >= 0.4), and where the
consume time goes (its phases).

    python bench/importer_bench.py [--count 1000000] [--partitions 4] [--master local[*]] [--json]
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
from pathlib import Path
from typing import Any

from streamcore.text import render_table

# Importer throughput / plain-Spark throughput to reach (issue 11): consume alone, and produce +
# consume.
TARGETS = {"consume": 0.5, "end_to_end": 0.4}


class SparkProgress:
    """Every `interval` s on stderr: the current step, finished tasks of the running stages and
    documents/s so far (Spark jobs give no row counts while they run)."""

    def __init__(self, spark: Any, interval: float = 10.0) -> None:
        self.tracker = spark.sparkContext.statusTracker()
        self.interval = interval
        self.step = ""
        self.count = 0
        self.started = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self, step: str, count: int) -> None:
        self.step, self.count, self.started = step, count, time.monotonic()
        print(f"[bench] {step}: {count:,} documents ...", file=sys.stderr, flush=True)
        if not self._thread.is_alive():
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            done = total = 0
            for stage_id in self.tracker.getActiveStageIds():
                info = self.tracker.getStageInfo(stage_id)
                if info is not None:
                    done += info.numCompletedTasks
                    total += info.numTasks
            elapsed = time.monotonic() - self.started
            print(
                f"[bench] {self.step}: {elapsed:.0f}s, active stages {done}/{total} tasks done",
                file=sys.stderr,
                flush=True,
            )

    def stop(self) -> None:
        self._stop.set()


def run_importer(*args: str) -> dict[str, Any]:
    from jobs import importer

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = importer.main(list(args))
    summary = json.loads(out.getvalue().strip().splitlines()[-1])
    if code != 0:
        raise SystemExit(f"importer {args[0]} failed: {summary.get('error')}")
    return summary


def baseline(spark: Any, count: int, partitions: int, path: Path) -> float:
    from jobs.spark.documents.frames import random_documents

    started = time.monotonic()
    docs = random_documents(spark, count, partitions=partitions, seed=1)
    docs.write.format("delta").mode("overwrite").save(str(path))
    return time.monotonic() - started


def importer_run(count: int, partitions: int, home: Path, result_format: str) -> dict[str, Any]:
    os.environ["STREAMCORE_HOME"] = str(home)
    started = time.monotonic()
    run_importer("produce", "--count", str(count), "--partitions", str(partitions), "--seed", "1")
    produce_s = time.monotonic() - started
    started = time.monotonic()
    consumed = run_importer(
        "consume", "--failure-threshold", "0", "--gx-result-format", result_format
    )
    consume_s = time.monotonic() - started
    if consumed["imported"] != count:
        raise SystemExit(f"imported {consumed['imported']} of {count} documents")
    return {"produce_s": produce_s, "consume_s": consume_s, "phases": consumed["phases"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=1_000_000, help="documents (default 1M)")
    parser.add_argument("--partitions", type=int, default=4, help="log partitions (default 4)")
    parser.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    parser.add_argument("--warmup", type=int, default=20_000, help="documents of the warm-up")
    parser.add_argument(
        "--gx-result-format",
        default="SUMMARY",
        choices=("BOOLEAN_ONLY", "BASIC", "SUMMARY"),
        help="GX report detail of the consume step (default SUMMARY, the importer's default)",
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    if args.count < 1 or args.partitions < 1:
        parser.error("--count and --partitions must be positive")

    from jobs.spark.session import build_session

    work = Path(tempfile.mkdtemp(prefix="importer-bench-"))
    spark = build_session("importer-bench", args.master, conf={"spark.ui.enabled": "false"})
    progress = SparkProgress(spark)
    try:
        progress.start("warm-up", args.warmup)
        baseline(spark, args.warmup, args.partitions, work / "warmup-baseline")
        importer_run(args.warmup, args.partitions, work / "warmup-home", args.gx_result_format)
        progress.start("baseline (plain Spark -> Delta)", args.count)
        base_s = baseline(spark, args.count, args.partitions, work / "baseline")
        progress.start("importer (produce -> log -> consume -> GX -> Delta)", args.count)
        run = importer_run(args.count, args.partitions, work / "home", args.gx_result_format)
    finally:
        progress.stop()
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)

    n = args.count
    end_to_end = run["produce_s"] + run["consume_s"]
    ratios = {"consume": base_s / run["consume_s"], "end_to_end": base_s / end_to_end}
    met = all(ratios[k] >= target for k, target in TARGETS.items())
    result = {
        "documents": n,
        "partitions": args.partitions,
        "master": args.master,
        "gx_result_format": args.gx_result_format,
        "baseline": {"seconds": round(base_s, 2), "docs_per_s": round(n / base_s)},
        "produce": {
            "seconds": round(run["produce_s"], 2),
            "docs_per_s": round(n / run["produce_s"]),
        },
        "consume": {
            "seconds": round(run["consume_s"], 2),
            "docs_per_s": round(n / run["consume_s"]),
            "phases": run["phases"],
        },
        "end_to_end": {"seconds": round(end_to_end, 2), "docs_per_s": round(n / end_to_end)},
        "ratios": {k: round(v, 3) for k, v in ratios.items()},
        "targets": TARGETS,
        "targets_met": met,
    }
    if args.json:
        print(json.dumps(result))
        return 0
    rows = [
        ("plain Spark -> Delta (baseline)", n, base_s, n / base_s, 1.0),
        (
            "importer produce (-> log)",
            n,
            run["produce_s"],
            n / run["produce_s"],
            base_s / run["produce_s"],
        ),
        (
            "importer consume (-> GX -> Delta)",
            n,
            run["consume_s"],
            n / run["consume_s"],
            base_s / run["consume_s"],
        ),
        ("importer end to end", n, end_to_end, n / end_to_end, ratios["end_to_end"]),
    ]
    print(render_table(["step", "documents", "seconds", "docs/s", "x baseline"], rows))
    print()
    phases = sorted(run["phases"].items(), key=lambda kv: -kv[1])
    print(render_table(["consume phase", "seconds"], phases))
    print()
    for step, target in TARGETS.items():
        verdict = "met" if ratios[step] >= target else "MISSED"
        print(f"{step} / baseline = {ratios[step]:.2f} (target >= {target}): {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
