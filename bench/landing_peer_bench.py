"""The Delta landing against the hand-written Structured Streaming job a user would write (issue
31, section 1), in one run and one SparkSession, on the shared Kafka broker.

Input, untimed: `--count` Documents put in `import/docs` by `jobs/importer.py produce` and as many
audit entries in `audit/entries` (Avro single-object Records, as the importer and the relay
write them), on the Kafka backend (`STREAMCORE_LOG_BACKEND=kafka`, topics under a prefix of this
run, deleted at its end). Then, per round, each landing reads the whole topic into a fresh Delta
table:

* peer: Spark Structured Streaming reads the topic (`readStream.format("kafka")`, trigger
  `availableNow`), strips the 10-byte single-object header with a substring and `from_avro`s the
  Record envelope, then the same for the payload, keeps the rows passing the same row checks as a
  plain filter (the Column expressions our suites compile to, no Great Expectations), and
  `foreachBatch` MERGEs them into Delta (documents: upsert on `id`; entries: insert-only on
  `event_day, event_id`, partitioned by day) with the session's `txnAppId`/`txnVersion` = the
  micro-batch id for idempotence. Timed from `start()` to the end of `awaitTermination()`
  (query start-up and its checkpoint included); its phases are the micro-batches'
  `StreamingQueryProgress.durationMs`, summed;
* ours: `jobs/importer.py consume` and `jobs/audit.py batch` (read the group's offset range,
  decode, checks + GX validation with quarantine and Data Docs, MERGE exactly once, commit the
  Kafka positions), each with a fresh consumer group; phases from their summaries;
* floor: Spark writing the same generated rows straight to Delta (`importer_bench.baseline`,
  `audit_bench.spark_baseline`): reads no log, decodes and checks nothing.

Rounds alternate which side runs first; prints per landing the median seconds and rows/s of
each side, the ratios ours/peer (= peer seconds / our seconds, target >= 1.0) and ours/floor with
their median and spread over the rounds, and where the time goes (the median round's phases).

    python bench/landing_peer_bench.py [--count 100000] [--rounds 5] [--partitions 4]
        [--landing documents|audit|both] [--warmup 10000] [--master local[*]] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from audit_bench import audit_batch, publish_entries, spark_baseline
from backend_bench import KAFKA, kafka_running
from importer_bench import SparkProgress, baseline, run_importer

from streamcore.text import render_table

TARGET = 1.0  # our landing's rows/s >= the peer's (issue 31)
DOCUMENTS, ENTRIES = "import/docs", "audit/entries"
HEADER = 10  # Avro single-object header: C3 01 + 8-byte fingerprint


def progress(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


# -- the peer: a hand-written Structured Streaming job --------------------------------------------
def _unwrap(value: Any, schema_json: str) -> Any:
    """`from_avro` of a single-object payload, its header cut off."""
    from pyspark.sql import functions as F
    from pyspark.sql.avro.functions import from_avro

    return from_avro(F.expr(f"substring({value}, {HEADER + 1})"), schema_json)


def peer(
    spark: Any,
    stream: str,
    schema_json: str,
    keep: Any,
    merge: Callable[[Any, str], str],
    table: Path,
    checkpoint: Path,
) -> dict[str, Any]:
    """Run the peer over the whole topic of `stream` into the Delta table at `table` (created
    empty first with the decoded columns, `merge(view, path)` the MERGE statement of a batch
    registered as `view`); returns seconds, micro-batches and summed durationMs by phase."""
    from pyspark.sql import functions as F

    from streamcore.codecs.record_binary import RECORD_SCHEMA
    from streamcore.config import load_config
    from streamcore.log import open_log_manager

    with open_log_manager(load_config()) as manager:
        log = manager.describe(stream)
    record_json = json.dumps(RECORD_SCHEMA)
    started = time.monotonic()
    rows = (
        spark.readStream.format("kafka")
        .options(**log.spark_options())
        .option("subscribe", log.topic)
        .option("startingOffsets", "earliest")
        .load()
        .select(_unwrap("value", record_json).alias("r"))
        .select(_unwrap("r.data", schema_json).alias("d"))
        .select("d.*")
    )
    checked = rows.where(keep)
    if "event_date" in checked.columns:
        day = F.date_from_unix_date(F.floor(F.unix_millis("event_date") / 86_400_000).cast("int"))
        checked = checked.withColumn("event_day", day)
        parts = ["event_day"]
    else:
        parts = []
    empty = spark.createDataFrame([], checked.schema)
    empty.write.format("delta").partitionBy(*parts).save(str(table))
    app_id = f"landing-peer-{uuid.uuid4().hex[:8]}"

    def land(batch: Any, batch_id: int) -> None:
        view = f"peer_batch_{batch_id}"
        batch.createOrReplaceTempView(view)
        spark.conf.set("spark.databricks.delta.write.txnAppId", app_id)
        spark.conf.set("spark.databricks.delta.write.txnVersion", str(batch_id))
        try:
            batch.sparkSession.sql(merge(view, str(table)))
        finally:
            spark.conf.unset("spark.databricks.delta.write.txnAppId")
            spark.conf.unset("spark.databricks.delta.write.txnVersion")

    query = (
        checked.writeStream.foreachBatch(land)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    seconds = time.monotonic() - started
    if query.exception() is not None:
        raise SystemExit(f"peer on {stream} failed: {query.exception()}")
    batches = [p for p in query.recentProgress if p["numInputRows"] > 0]
    phases: dict[str, float] = {}
    for p in query.recentProgress:
        for name, ms in p["durationMs"].items():
            phases[name] = phases.get(name, 0.0) + ms / 1000
    # triggerExecution is each micro-batch whole (addBatch, the foreachBatch MERGE, is in it);
    # the rest is the table's creation, the query's start-up and its stop.
    phases["outside micro-batches"] = seconds - phases.get("triggerExecution", 0.0)
    phases = {name: round(s, 3) for name, s in phases.items()}
    landed = spark.read.format("delta").load(str(table)).count()
    return {"seconds": seconds, "batches": len(batches), "phases": phases, "landed": landed}


def document_merge(view: str, path: str) -> str:
    return (
        f"MERGE INTO delta.`{path}` t USING {view} s ON t.id = s.id "
        "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *"
    )


def entry_merge(view: str, path: str) -> str:
    return (
        f"MERGE INTO delta.`{path}` t USING {view} s "
        "ON t.event_day = s.event_day AND t.event_id = s.event_id WHEN NOT MATCHED THEN INSERT *"
    )


def peer_inputs() -> dict[str, tuple[str, Any]]:
    """Per stream: the payload's Avro schema and the filter keeping the rows that pass the
    checks our landing makes (Document's suite; AuditEntry's suite and entry rules)."""
    from jobs import audit, importer
    from jobs.spark.quality.expectations import any_failure, load_suite
    from streamcore.audit.rules import configured_rules
    from streamcore.codecs import SchemaStore
    from streamcore.config import load_config

    config = load_config()
    store = SchemaStore(config.schemas_dir)
    document = store.by_name(importer.DOCUMENT_SCHEMA)
    entry = store.by_name(audit.SCHEMA)
    entry_suite = audit.audit_suite(entry, configured_rules(config))
    return {
        # A null check (a null column) drops the row too: `where` keeps true only.
        DOCUMENTS: (document.to_json(), ~any_failure(load_suite(document))),
        ENTRIES: (entry.to_json(), ~any_failure(entry_suite)),
    }


# -- one round ------------------------------------------------------------------------------------
class LandingRun:
    """The landings of one bench run: fresh homes, groups, tables and checkpoints per call."""

    def __init__(self, spark: Any, work: Path, count: int, partitions: int) -> None:
        self.spark, self.work, self.count, self.partitions = spark, work, count, partitions
        self.inputs = peer_inputs()
        self.calls = 0

    def _fresh(self, label: str) -> Path:
        self.calls += 1
        path = self.work / f"{label}-{self.calls}"
        path.mkdir(parents=True)
        os.environ["STREAMCORE_HOME"] = str(path)
        return path

    def peer(self, stream: str) -> dict[str, Any]:
        home = self._fresh("peer")
        schema_json, keep = self.inputs[stream]
        merge = document_merge if stream == DOCUMENTS else entry_merge
        out = peer(self.spark, stream, schema_json, keep, merge, home / "t", home / "cp")
        if out["landed"] != self.count:
            raise SystemExit(f"peer landed {out['landed']} of {self.count} from {stream}")
        return out

    def ours(self, stream: str) -> dict[str, Any]:
        self._fresh("ours")
        group = f"bench/landing-{self.calls}"
        if stream == ENTRIES:
            return audit_batch(self.count, "--group", group)
        started = time.monotonic()
        summary = run_importer(
            "consume", "--group", group, "--failure-threshold", "0", "--gx-result-format", "SUMMARY"
        )
        if summary["imported"] != self.count:
            raise SystemExit(f"imported {summary['imported']} of {self.count} documents")
        return {"seconds": time.monotonic() - started, "phases": summary["phases"]}

    def floor(self, stream: str) -> dict[str, Any]:
        home = self._fresh("floor")
        if stream == DOCUMENTS:
            return {"seconds": baseline(self.spark, self.count, self.partitions, home / "t")}
        return {"seconds": spark_baseline(self.spark, self.count, home / "t")}


def produce(spark: Any, streams: list[str], count: int, partitions: int) -> None:
    if DOCUMENTS in streams:
        run_importer(
            "produce", "--count", str(count), "--partitions", str(partitions), "--seed", "1"
        )
    if ENTRIES in streams:
        publish_entries(spark, count)


def spread(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 3),
        "min": round(min(values), 3),
        "max": round(max(values), 3),
    }


def measure(run: LandingRun, streams: list[str], rounds: int, bar: SparkProgress) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for stream in streams:
        sides: dict[str, list[dict[str, Any]]] = {"floor": [], "peer": [], "ours": []}
        for r in range(rounds):
            order = ("peer", "ours") if r % 2 == 0 else ("ours", "peer")
            for side in ("floor", *order):
                bar.start(f"{stream} round {r + 1}/{rounds}: {side}", run.count)
                sides[side].append(getattr(run, side)(stream))
        secs = {side: [x["seconds"] for x in runs] for side, runs in sides.items()}
        vs_peer = [p / o for p, o in zip(secs["peer"], secs["ours"], strict=True)]
        vs_floor = [f / o for f, o in zip(secs["floor"], secs["ours"], strict=True)]
        peer_floor = [f / p for f, p in zip(secs["floor"], secs["peer"], strict=True)]
        median_round = sorted(range(rounds), key=lambda i: vs_peer[i])[rounds // 2]
        out[stream] = {
            "seconds": {side: spread(v) for side, v in secs.items()},
            "rows_per_s": {
                side: round(run.count / statistics.median(v)) for side, v in secs.items()
            },
            "ours_vs_peer": spread(vs_peer),
            "ours_vs_floor": spread(vs_floor),
            "peer_vs_floor": spread(peer_floor),
            "peer_batches": sides["peer"][median_round]["batches"],
            "phases": {
                "peer": sides["peer"][median_round]["phases"],
                "ours": sides["ours"][median_round]["phases"],
            },
            "target_met": statistics.median(vs_peer) >= TARGET,
        }
    return out


def print_results(result: dict[str, Any]) -> None:
    load = ", ".join(f"{x:.1f}" for x in result["load_average"])
    after = ", ".join(f"{x:.1f}" for x in result["load_average_after"])
    print(
        f"landing vs peer: {result['rows']:,} rows per landing, {result['rounds']} rounds, "
        f"Kafka, load average {load} before, {after} after, {result['cpus']} CPUs"
    )
    rows = []
    for stream, s in result["landings"].items():
        for side, label in (("floor", "write floor"), ("peer", "peer"), ("ours", "ours")):
            rows.append((stream, label, s["seconds"][side]["median"], s["rows_per_s"][side]))
    print(render_table(["stream", "landing", "median s", "rows/s"], rows))
    print()
    ratios = []
    for stream, s in result["landings"].items():
        for key in ("ours_vs_peer", "ours_vs_floor", "peer_vs_floor"):
            r = s[key]
            ratios.append((stream, key.replace("_", " "), r["median"], f"{r['min']}-{r['max']}"))
    print(render_table(["stream", "ratio (rows/s)", "median", "spread"], ratios))
    for stream, s in result["landings"].items():
        for side in ("peer", "ours"):
            phases = sorted(s["phases"][side].items(), key=lambda kv: -kv[1])
            print()
            print(render_table([f"{stream} {side} phase", "seconds"], phases))
    print()
    for stream, s in result["landings"].items():
        verdict = "met" if s["target_met"] else "MISSED"
        median = s["ours_vs_peer"]["median"]
        print(f"{stream}: ours / peer = {median:.2f} (target >= {TARGET}): {verdict}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=100_000, help="documents and entries")
    parser.add_argument("--rounds", type=int, default=5, help="rounds (default 5)")
    parser.add_argument("--partitions", type=int, default=4, help="partitions of import/docs")
    parser.add_argument(
        "--landing",
        choices=("documents", "audit", "both"),
        default="both",
        help="which landing to measure (default both: the importer's, then the audit job's)",
    )
    parser.add_argument("--warmup", type=int, default=10_000, help="rows of the warm-up")
    parser.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    if min(args.count, args.rounds, args.partitions, args.warmup) < 1:
        parser.error("--count, --rounds, --partitions and --warmup must be positive")

    streams = {"documents": [DOCUMENTS], "audit": [ENTRIES]}.get(args.landing, [DOCUMENTS, ENTRIES])
    started_kafka = False
    if not kafka_running():
        progress("starting the local Kafka broker (scripts/kafka.sh start) ...")
        subprocess.run([str(KAFKA), "start"], check=True)
        started_kafka = True
    from jobs.spark.session import build_session
    from streamcore.config import load_config
    from streamcore.log import open_log_manager

    os.environ["STREAMCORE_LOG_BACKEND"] = "kafka"
    os.environ.setdefault("STREAMCORE_KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    work = Path(tempfile.mkdtemp(prefix="landing-peer-bench-"))
    load_before = os.getloadavg()
    spark = build_session("landing-peer-bench", args.master, conf={"spark.ui.enabled": "false"})
    bar = SparkProgress(spark)
    prefixes = []
    try:
        plan = (("warm-up", args.warmup, 1), ("bench", args.count, args.rounds))
        for label, count, rounds in plan:
            prefix = f"bench-landing-{uuid.uuid4().hex[:8]}-"
            prefixes.append(prefix)
            os.environ["STREAMCORE_KAFKA_TOPIC_PREFIX"] = prefix
            os.environ["STREAMCORE_HOME"] = str(work / f"{label}-input")
            bar.start(f"{label}: produce (untimed)", count)
            produce(spark, streams, count, args.partitions)
            run = LandingRun(spark, work / label, count, args.partitions)
            landings = measure(run, streams, rounds, bar)
    finally:
        bar.stop()
        spark.stop()
        for prefix in prefixes:
            os.environ["STREAMCORE_KAFKA_TOPIC_PREFIX"] = prefix
            with open_log_manager(load_config()) as manager:
                for stream in (DOCUMENTS, ENTRIES):
                    if manager.exists(stream):
                        manager.delete(stream)
        shutil.rmtree(work, ignore_errors=True)
        if started_kafka:
            subprocess.run([str(KAFKA), "stop"], check=False)

    result = {
        "rows": args.count,
        "rounds": args.rounds,
        "landing": args.landing,
        "partitions": args.partitions,
        "master": args.master,
        "cpus": os.cpu_count(),
        "load_average": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "landings": landings,
        "target": TARGET,
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_results(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
