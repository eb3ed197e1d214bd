"""Recovery in one process (issue 15): scanning and redriving dead letters against reading the
same records with the Record codec, what any consumer of the stream pays.

Setup, untimed: a local-log dead-letter stream `bench/dlq-x` (1 partition, as the processor
creates them) of `--records` dead letters (default 1,000,000; 100-byte payloads; their failure
metadata as the processor writes it), and an empty target stream `bench/in`.

* `read (Record codec)`: every record read with `read_batch` and decoded to a Record: the
  baseline;
* `scan (list)`: `Recovery.dead_letters` with a filter that matches nothing: every record read,
  its failure metadata decoded and matched;
* `redrive, dry run`: the scan plus the ledger lookups (SQLite), nothing written;
* `redrive`: the scan, the ledger lookups, the pending rows written, the records appended to the
  target, the rows marked done (SQLite ledger in `STREAMCORE_HOME/outbox.db`).

With `--spark` (what `make bench` runs), the same list and redrive through jobs/recovery.py's
Spark engine, on a warm local session (`local[*]`; the session's start-up is not timed, a
spark-submit adds it):

* `spark list`: every record read by Spark, its metadata parsed, counts per error class;
* `spark redrive`: the same selection redriven to a second empty target with a second ledger
  (the in-process redrive filled the first).

Prints records/s and the ratio to the baseline. The figures decide which redrives the recovery
DAG runs in its task and which it sends to Spark (docs/recovery.md).

    python bench/recovery_bench.py [--records 1000000] [--spark] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from streamcore.text import TextColumn, render_table

DLQ, TARGET, SPARK_TARGET = "bench/dlq-x", "bench/in", "bench/in-spark"
APPEND_BATCH = 10_000


def build(manager: Any, codec: Any, records: int) -> None:
    from streamcore.computation.dlq import dead_letter_record
    from streamcore.record import Record

    manager.create(DLQ, 1)
    manager.create(TARGET, 1)
    manager.create(SPARK_TARGET, 1)
    failure = ValueError("cannot parse the price")
    with manager.appender(DLQ, codec) as appender:
        for first in range(0, records, APPEND_BATCH):
            items = []
            for i in range(first, min(records, first + APPEND_BATCH)):
                original = Record(f"k{i}", b"x" * 100, i << 17)
                letter = dead_letter_record(
                    original,
                    computation="parse",
                    stream=TARGET,
                    partition=0,
                    offset=i,
                    failure=failure,
                    attempts=4,
                    failed_at=1_763_800_000_000 + i,
                )
                items.append((original.key, letter))
            appender.append_batch(items)


def timed(step: str, records: int, call: Any) -> float:
    print(f"[bench] {step}: {records:,} records ...", file=sys.stderr, flush=True)
    started = time.perf_counter()
    call()
    seconds = time.perf_counter() - started
    print(f"[bench]   {seconds:.1f} s", file=sys.stderr, flush=True)
    return seconds


def spark_job(*args: str) -> dict[str, Any]:
    """jobs/recovery.py's `main` in this process, on the warm session; its summary."""
    import contextlib
    import io

    from jobs import recovery

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = recovery.main(list(args))
    summary = json.loads(out.getvalue().strip().splitlines()[-1])
    if code != 0:
        raise SystemExit(f"jobs/recovery.py {' '.join(args)} failed: {summary}")
    return summary


def run(records: int, spark: bool) -> dict[str, Any]:
    from streamcore.codecs import get_codec
    from streamcore.config import load_config
    from streamcore.log import LogPartition, open_log_manager
    from streamcore.recovery import DeadLetterFilter, Recovery

    home = Path(tempfile.mkdtemp(prefix="recovery-bench-"))
    os.environ["STREAMCORE_HOME"] = str(home)
    os.environ.pop("STREAMCORE_OUTBOX_URL", None)
    codec = get_codec("avro")
    config = load_config(home=home)
    seconds: dict[str, float] = {}
    try:
        with open_log_manager(config) as manager:
            build(manager, codec, records)

            def read() -> None:
                partition = LogPartition.of(DLQ, 0)
                with manager.tailer("bench/reader", [partition], codec) as tailer:
                    count = 0
                    while count < records:
                        batch = tailer.read_batch(10_000, timeout=1.0)
                        if not batch:
                            raise SystemExit(f"read {count} of {records} records")
                        count += len(batch)

            with Recovery(config, manager=manager, codec="avro", principal="bench") as recovery:
                nothing = DeadLetterFilter(error="no such error")
                everything = DeadLetterFilter(streams=(DLQ,))
                seconds["read"] = timed("read (Record codec)", records, read)
                seconds["scan"] = timed(
                    "scan (list)", records, lambda: recovery.dead_letters(nothing)
                )
                seconds["dry_run"] = timed(
                    "redrive, dry run",
                    records,
                    lambda: recovery.redrive(everything, reason="", dry_run=True),
                )

                def redrive() -> None:
                    outcome = recovery.redrive(everything, reason="bench")
                    if outcome.summary["redriven"] != records:
                        raise SystemExit(f"redrove {outcome.summary}")

                seconds["redrive"] = timed("redrive", records, redrive)
            if manager.end_offsets(TARGET) != [records]:
                raise SystemExit(f"the target holds {manager.end_offsets(TARGET)} records")
            if spark:
                seconds |= run_spark(records, home)
                if manager.end_offsets(SPARK_TARGET) != [records]:
                    raise SystemExit(f"Spark's target holds {manager.end_offsets(SPARK_TARGET)}")
    finally:
        shutil.rmtree(home, ignore_errors=True)
    base = seconds["read"]
    return {
        "records": records,
        "steps": {
            step: {
                "seconds": round(s, 2),
                "records_per_s": round(records / s),
                "x_read": round(base / s, 3),
            }
            for step, s in seconds.items()
        },
    }


def run_spark(records: int, home: Path) -> dict[str, float]:
    from jobs.spark.session import build_session

    build_session("recovery-bench", "local[*]", conf={"spark.ui.enabled": "false"})
    spark_job("--action", "list", "--error", "warm-up", "--sample", "0")  # JIT, data source
    seconds = {}

    def listing() -> None:
        summary = spark_job("--action", "list", "--sample", "0")
        if summary["selected"] != records:
            raise SystemExit(f"Spark listed {summary}")

    seconds["spark_list"] = timed("spark list", records, listing)
    url = f"sqlite:///{home / 'spark-ledger.db'}"

    def redrive() -> None:
        summary = spark_job(
            "--action", "redrive", "--all", "--to", SPARK_TARGET, "--url", url,
            "--reason", "bench",
        )  # fmt: skip
        if summary["redriven"] != records:
            raise SystemExit(f"Spark redrove {summary}")

    seconds["spark_redrive"] = timed("spark redrive", records, redrive)
    return seconds


LABELS = {
    "read": "read (Record codec): baseline",
    "scan": "scan (list, nothing matches)",
    "dry_run": "redrive, dry run (scan + ledger lookups)",
    "redrive": "redrive (scan + ledger + append)",
    "spark_list": "Spark list (warm session)",
    "spark_redrive": "Spark redrive (warm session)",
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000, help="dead letters (1M)")
    parser.add_argument("--spark", action="store_true", help="also the Spark engine")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    if args.records < 1:
        parser.error("--records must be positive")
    result = run(args.records, args.spark)
    if args.json:
        print(json.dumps(result))
        return 0
    rows = [
        (LABELS[step], f"{s['records_per_s']:,}", f"{s['seconds']:.2f}", f"{s['x_read']:.3f}")
        for step, s in result["steps"].items()
    ]
    headers = [
        TextColumn("step"),
        TextColumn("records/s", align="right"),
        TextColumn("seconds", align="right"),
        TextColumn("x read", align="right"),
    ]
    print(render_table(headers, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
