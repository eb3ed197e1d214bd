"""Exactly-once processing (issue 29 §1): the throughput cost of
`Settings(processing_guarantee="exactly_once")` against `"at_least_once"` on Kafka, the same
processor on the same input.

N records (default 200,000; keys `k0`..`k{K-1}`, K = `--keys`, default 10,000, round robin; JSON
data `{"v": i}` in a `Record` envelope, the `avro` codec) are appended once to a 1-partition
topic of the local test broker (`scripts/kafka.sh`, started as the tests start it when not
running; never stopped here). Two processors, each run with both guarantees, in turn, `--rounds`
times (default 2), each run on its own group, output topic and changelog:

- stateless: a `Processor` that drops the records whose `v` is a multiple of 10 and forwards
  `{"v": v, "double": 2 v}` for the others to an output topic (a filter + map_values + to);
- keyed count: a `Processor` counting per key in a RocksDB store (`get` + `put`) and forwarding
  each new count to an output topic (outputs, changelog records and input positions).

`Settings(read_batch=2000, checkpoint_interval=1.0)` for both guarantees (`--interval 0`: a
checkpoint per read batch of 2,000 records, where a transaction's round trips weigh most):
at_least_once appends the outputs, then the changelog, then commits the group's position;
exactly_once does the same inside one Kafka transaction per checkpoint
(send_offsets_to_transaction, commit) and writes the store's engine after the commit. Timed from
`start()` until `drain_and_stop()` returns (its `drain_quiet` of 0.2 s included). Each run is
checked: its output topic, read committed from the start, holds exactly the expected number of
records. Each row gives the median seconds over the rounds; the ratio is the median over rounds
of exactly_once's throughput over at_least_once's in the same round (paired: the machine's load
drifts between rounds more than between the runs of one round). No target: the figure is the
cost.

Topics and groups are named `bench-eos-<random>-...` and deleted at the end.

    python bench/eos_bench.py [--records N] [--keys K] [--rounds R] [--interval S] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

from state_bench import delete_kafka_names, kafka_bootstrap, progress, run_to_drained, table

from streamcore.codecs import get_codec
from streamcore.computation import Processor, Settings, StreamProcessor, Topology
from streamcore.log import LogManager
from streamcore.record import Record
from streamcore.text import Progress

READ_BATCH = 2000
CHECKPOINT_INTERVAL = 1.0  # s, both guarantees (`--interval`)
EVENTS = "bench/events"
STORE = "counts"
GUARANTEES = ("at_least_once", "exactly_once")
WORKLOADS = ("stateless", "count")


class FilterMap(Processor):
    """Drops every tenth record, forwards `{"v", "double"}` for the others."""

    def init(self, context: Any) -> None:
        self.context = context

    def process(self, key: str, value: Any) -> None:
        v = value["v"]
        if v % 10:
            self.context.forward(key, {"v": v, "double": 2 * v})


class CountAndForward(Processor):
    """Counts per key in the store `counts` and forwards each new count."""

    def init(self, context: Any) -> None:
        self.context = context

    def process(self, key: str, value: Any) -> None:
        store = self.context.get_state_store(STORE)
        count = (store.get(key) or 0) + 1
        store.put(key, count)
        self.context.forward(key, count)


def fill_events(manager: LogManager, n: int, keys: int) -> None:
    manager.create(EVENTS, 1)
    appender = manager.appender(EVENTS, get_codec("avro"))
    shown = Progress(f"  writing {EVENTS}", n, interval=5.0)
    for start in range(0, n, 10_000):
        batch = []
        for i in range(start, min(n, start + 10_000)):
            key = f"k{i % keys}"
            batch.append((key, Record(key, json.dumps({"v": i}).encode())))
        appender.append_batch(batch)
        shown.update(min(n, start + 10_000))
    appender.close()
    shown.done(n)


def expected_outputs(workload: str, n: int) -> int:
    return n - (n + 9) // 10 if workload == "stateless" else n


def count_outputs(manager: LogManager, name: str) -> int:
    """The records of `name` a read_committed reader sees from the start, until caught up."""
    tailer = manager.tailer(f"bench/check{uuid.uuid4().hex[:8]}", name)
    try:
        seen = 0
        while batch := tailer.read_batch(10_000, timeout=2.0):
            seen += len(batch)
        return seen
    finally:
        tailer.close()


def run_once(
    manager: LogManager,
    n: int,
    workload: str,
    guarantee: str,
    state_dir: Path,
    run: str,
    interval: float,
) -> tuple[float, int]:
    """Seconds from start to drained, and the checkpoints taken."""
    name = f"bench/{workload}-{guarantee.replace('_', '')}{run}"
    out = f"{name}-out"
    builder = Topology.builder()
    if workload == "stateless":
        builder.add_processor(name, FilterMap, inputs=[EVENTS], outputs=[out], codec="json")
    else:
        builder.add_processor(
            name, CountAndForward, inputs=[EVENTS], outputs=[out], codec="json", stores=[STORE]
        )
    settings = Settings(
        read_batch=READ_BATCH,
        checkpoint_interval=interval,
        drain_quiet=0.2,
        state_dir=state_dir,
        state_engine="rocksdb",
        processing_guarantee=guarantee,
        instance_id="bench",
    )
    processor = StreamProcessor(manager, builder.build(), settings)
    elapsed = run_to_drained(processor, manager, EVENTS, name, n, f"{workload}, {guarantee}")
    seen, wanted = count_outputs(manager, out), expected_outputs(workload, n)
    if seen != wanted:
        raise RuntimeError(f"{workload} ({guarantee}): {seen:,} output records, not {wanted:,}")
    return elapsed, sum(s.checkpoints for s in processor.unit_stats())


def run(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    from streamcore.log.kafka import KafkaLogManager

    n = args.records
    bootstrap = kafka_bootstrap()
    prefix = f"bench-eos-{uuid.uuid4().hex[:8]}-"
    kafka = KafkaLogManager(bootstrap, topic_prefix=prefix, timeout=30.0)
    seconds: dict[str, list[float]] = {}
    checkpoints: dict[str, list[int]] = {}
    try:
        progress(f"writing {n:,} records over {min(n, args.keys):,} keys ({bootstrap}) ...")
        fill_events(kafka, n, args.keys)
        for r in range(args.rounds):
            progress(f"round {r + 1} of {args.rounds}")
            for workload in WORKLOADS:
                for guarantee in GUARANTEES:
                    key = f"{workload}/{guarantee}"
                    state = folder / f"state-{workload}-{guarantee}-{r}"
                    took, taken = run_once(
                        kafka, n, workload, guarantee, state, f"-{r}", args.interval
                    )
                    seconds.setdefault(key, []).append(took)
                    checkpoints.setdefault(key, []).append(taken)
    finally:
        kafka.close()
        delete_kafka_names(bootstrap, prefix)
    return {
        "records": n,
        "keys": args.keys,
        "read_batch": READ_BATCH,
        "checkpoint_interval": args.interval,
        "seconds": seconds,
        "checkpoints": checkpoints,
    }


def summarize(figures: dict[str, Any]) -> tuple[list[list[Any]], dict[str, Any]]:
    """The table's rows and the JSON summary: per workload, each guarantee's rate and the
    exactly_once / at_least_once throughput ratio (paired per round)."""
    n = figures["records"]
    times = figures["seconds"]
    rows: list[list[Any]] = []
    out: dict[str, Any] = {}
    labels = {"stateless": "filter + map_values + to", "count": "keyed count (RocksDB) + to"}
    for workload in WORKLOADS:
        alo, eos = times[f"{workload}/at_least_once"], times[f"{workload}/exactly_once"]
        ratio = statistics.median(a / e for a, e in zip(alo, eos, strict=True))
        out[workload] = {
            "at_least_once_per_s": n / statistics.median(alo),
            "exactly_once_per_s": n / statistics.median(eos),
            "ratio": ratio,
        }
        for guarantee, runs in (("at_least_once", alo), ("exactly_once", eos)):
            seconds = statistics.median(runs)
            rows.append(
                [
                    f"{labels[workload]}, {guarantee}",
                    "kafka",
                    n,
                    seconds,
                    n / seconds,
                    1.0 if guarantee == "at_least_once" else ratio,
                    "",
                    "",
                ]
            )
    return rows, out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=200_000, help="input records (200,000)")
    parser.add_argument("--keys", type=int, default=10_000, help="keys (10,000)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of the four runs (2)")
    parser.add_argument(
        "--interval",
        type=float,
        default=CHECKPOINT_INTERVAL,
        help="checkpoint_interval of both guarantees, s (1; 0: a checkpoint per read batch)",
    )
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    args = parser.parse_args(argv)
    if args.records < 1 or args.keys < 1 or args.rounds < 1 or args.interval < 0:
        parser.error("--records, --keys and --rounds must be >= 1, --interval >= 0")
    folder = Path(tempfile.mkdtemp(prefix="eos-bench-"))
    os.environ["STREAMCORE_HOME"] = str(folder)
    try:
        figures = run(args, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    rows, ratios = summarize(figures)
    if args.json:
        print(json.dumps({**figures, "results": ratios}, indent=2))
        return 0
    print(
        f"exactly-once cost on Kafka: {args.records:,} records over {args.keys:,} keys, "
        f"read_batch {READ_BATCH:,}, checkpoint_interval {args.interval:g} s; ratio: "
        "exactly_once throughput / at_least_once's (paired rounds, median)"
    )
    print(table(rows, "records"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
