"""The processor against Quix Streams (issue 31, section 2): the same stateless pipeline over the
same records on the same Kafka broker, one process each.

1. Codec. The JSON work of one record, alone: `--codec-records` orders (default 200,000, the
   records of 2.) encoded and decoded by the standard library call JsonCodec made before
   msgspec (`json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)`,
   the decoder's scanner) and by `JsonCodec` (msgspec where its bytes are the same), best of 5.
2. Pipeline. N JSON orders (default 1M, bench/peers/quix_pipeline.py `order(i)`: five fields,
   keys `k0`..`k9999`) in a 4-partition topic each side reads: ours in our `Record` envelope
   (the `avro` codec, as our appenders write), Quix's as plain JSON values with the key as the
   Kafka key (as its producers write). Each side runs `filter(keep)` (drops every tenth) +
   `map_values(enrich)` (adds `cents`) + `to(output)`, in one process, one consumer:
   - ours: `builder.stream(input, codec="json").filter(...).map_values(enrich).to(output)`,
     `StreamProcessor` with `Settings(read_batch=2000, checkpoint_interval=1.0,
     default_partitions=4)`, at_least_once; timed from `start()` until `drain_and_stop()` returns
     (its `drain_quiet` of 0.2 s included, the last checkpoint included);
   - Quix Streams 3.28.1 (its venv and subprocess as in bench/state_bench.py: `quix_python`,
     `quix`, with `--quix-timeout`) with `commit_interval=1.0` (the same commit cadence) and
     with its default of 5 s: `sdf.filter(...).apply(enrich).to_topic(output)`, timed from
     `app.run()` until it returns (its final flush and commit included).
   Every run has its own group and output topic, checked afterwards to hold the 900,000 outputs
   of 1M records. `--rounds` rounds (default 3), the order of the three runs reversed every
   other round (`--first-round 1` starts with a reversed one, for rounds split over several
   runs of the bench). The ratio is ours over Quix's throughput in the same round, median over
   rounds, with its spread (min-max). Target: >= 2x in both settings.
   Beside it, the CPU each side's process used over the same span (`time.process_time()`:
   every thread, librdkafka's included; the broker's is neither's): Quix's CPU seconds over
   ours, per round. On a shared machine the throughput ratio moves with what else runs (other
   work takes CPU from one side more than the other), the CPU per record much less.

Topics and groups are named `bench-quix-<random>-...` on the local test broker of
`scripts/kafka.sh` (started as the tests start it when not running; never stopped here) and
deleted at the end.

    python bench/quix_peer_bench.py [--records N] [--rounds R] [--first-round K]
                                    [--codec-records M] [--no-quix] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import timeit
import uuid
from pathlib import Path
from typing import Any

from peers.quix_pipeline import KEYS, enrich, expected_outputs, keep, order
from state_bench import (
    QUIX_VERSION,
    delete_kafka_names,
    kafka_bootstrap,
    progress,
    quix,
    quix_python,
    run_to_drained,
    table,
)

from streamcore.codecs import JsonCodec, get_codec
from streamcore.computation import Settings, StreamProcessor, Topology
from streamcore.log import LogManager
from streamcore.record import Record
from streamcore.text import Progress

QUIX_SCRIPT = Path(__file__).resolve().parent / "peers" / "quix_pipeline.py"
TARGET_RATIO = 2.0  # ours >= 2x Quix, both commit settings
READ_BATCH = 2000
CHECKPOINT_INTERVAL = 1.0  # s, ours; Quix at 1 s (equal cadence) and at its default 5 s
QUIX_COMMITS = (1.0, 5.0)
PARTITIONS = 4
INPUT = "bench/orders"


# -- 1. codec ---------------------------------------------------------------------------------
def codec_figures(n: int) -> dict[str, float]:
    """Records per second encoded and decoded by the old standard library path and JsonCodec."""
    values = [order(i) for i in range(n)]
    codec = JsonCodec()
    stdlib = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    scan = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
    data = [codec.encode(v) for v in values]
    if data != [stdlib.encode(v).encode("utf-8") for v in values]:
        raise RuntimeError("JsonCodec's bytes differ from the standard library's")

    def old_decode(raw: bytes) -> Any:
        return scan(raw.decode("utf-8"), 0)[0]

    runs = {
        "stdlib_encode": (lambda v: stdlib.encode(v).encode("utf-8"), values),
        "codec_encode": (codec.encode, values),
        "stdlib_decode": (old_decode, data),
        "codec_decode": (codec.decode, data),
    }
    out = {}
    for name, (call, items) in runs.items():
        best = min(timeit.repeat(lambda c=call, xs=items: [c(x) for x in xs], number=1, repeat=5))
        out[name] = n / best
    return out


# -- 2. pipeline ------------------------------------------------------------------------------
def fill_input(manager: LogManager, n: int) -> None:
    manager.create(INPUT, PARTITIONS)
    appender = manager.appender(INPUT, get_codec("avro"))
    encode = JsonCodec().encode
    shown = Progress(f"  writing {INPUT}", n, interval=5.0)
    for start in range(0, n, 10_000):
        batch = []
        for i in range(start, min(n, start + 10_000)):
            key = f"k{i % KEYS}"
            batch.append((key, Record.of(key, encode(order(i)))))  # stamped now, as producers do
        appender.append_batch(batch)
        shown.update(min(n, start + 10_000))
    appender.close()
    shown.done(n)


def count_outputs(manager: LogManager, name: str) -> int:
    """The records of `name` a reader sees from the start, until caught up."""
    tailer = manager.tailer(f"bench/check-{uuid.uuid4().hex[:8]}", name)
    try:
        seen = 0
        while batch := tailer.read_batch(10_000, timeout=2.0):
            seen += len(batch)
        return seen
    finally:
        tailer.close()


def run_ours(manager: LogManager, n: int, folder: Path, run: str) -> tuple[float, float]:
    """Seconds and CPU seconds of the process (every thread) of one run of our pipeline."""
    name = f"bench/pipeline{run}"
    output = f"{name}-out"
    builder = Topology.builder()
    orders = builder.stream(INPUT, codec="json", name=name)
    orders.filter(lambda key, value: keep(value)).map_values(enrich).to(output)
    settings = Settings(
        read_batch=READ_BATCH,
        checkpoint_interval=CHECKPOINT_INTERVAL,
        drain_quiet=0.2,
        default_partitions=PARTITIONS,
        state_dir=folder / f"state{run}",
    )
    processor = StreamProcessor(manager, builder.build(), settings)
    cpu = time.process_time()
    elapsed = run_to_drained(processor, manager, INPUT, name, n, "processor")
    cpu = time.process_time() - cpu
    seen, wanted = count_outputs(manager, output), expected_outputs(n)
    if seen != wanted:
        raise RuntimeError(f"ours: {seen:,} output records, not {wanted:,}")
    return elapsed, cpu


def run_quix(
    python: Path, args: argparse.Namespace, bootstrap: str, topic: str, commit: float, run: str
) -> tuple[float, float]:
    """Seconds and CPU seconds of one run of Quix's pipeline, as its process measured them."""
    output = f"{topic}-out{run}-c{commit:g}"
    progress(f"  Quix Streams, commit_interval {commit:g} s")
    figures = quix(
        python,
        args.quix_timeout,
        "pipeline",
        topic,
        "--bootstrap",
        bootstrap,
        "--prefix",
        args.prefix,
        "--output",
        output,
        "--records",
        str(args.records),
        "--commit-interval",
        str(commit),
        script=QUIX_SCRIPT,
    )
    seen, wanted = high_watermarks(bootstrap, output), expected_outputs(args.records)
    if seen != wanted:
        raise RuntimeError(f"Quix (commit {commit:g} s): {seen:,} output records, not {wanted:,}")
    return float(figures["seconds"]), float(figures["cpu_seconds"])


def high_watermarks(bootstrap: str, topic: str) -> int:
    """The records in `topic` (the sum of its partitions' high watermarks: none compacted)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-check-{topic}"})
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        return sum(
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in partitions
        )
    finally:
        consumer.close()


def run(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    from streamcore.log.kafka import KafkaLogManager

    n = args.records
    figures: dict[str, Any] = {"records": n, "load_before": os.getloadavg()}
    progress(f"1. codec: {args.codec_records:,} orders, encode and decode, best of 5 ...")
    figures["codec"] = codec_figures(args.codec_records)
    bootstrap = kafka_bootstrap()
    prefix = args.prefix = f"bench-quix-{uuid.uuid4().hex[:8]}-"
    common = ["--bootstrap", bootstrap, "--prefix", prefix]
    kafka = KafkaLogManager(bootstrap, topic_prefix=prefix, timeout=30.0)
    seconds: dict[str, list[float]] = {"ours": [], **{f"quix_{c:g}s": [] for c in QUIX_COMMITS}}
    cpu: dict[str, list[float]] = {name: [] for name in seconds}
    try:
        progress(f"2. writing {n:,} orders to {PARTITIONS} partitions, both formats ...")
        fill_input(kafka, n)
        python = None if args.no_quix else quix_python()
        topic = f"{prefix}quix-orders"
        if python is not None:
            quix(python, args.quix_timeout, "produce", topic, *common, "--records", str(n),
                 "--partitions", str(PARTITIONS), script=QUIX_SCRIPT)  # fmt: skip
        for r in range(args.first_round, args.first_round + args.rounds):
            progress(f"round {r + 1 - args.first_round} of {args.rounds}")
            runs = ["ours", *([] if python is None else [f"quix_{c:g}s" for c in QUIX_COMMITS])]
            for which in runs if r % 2 == 0 else reversed(runs):
                if which == "ours":
                    took, used = run_ours(kafka, n, folder, f"-{r}")
                else:
                    commit = float(which.removeprefix("quix_").removesuffix("s"))
                    assert python is not None
                    took, used = run_quix(python, args, bootstrap, topic, commit, f"-{r}")
                seconds[which].append(took)
                cpu[which].append(used)
    finally:
        kafka.close()
        delete_kafka_names(bootstrap, prefix)
    figures["seconds"] = seconds
    figures["cpu_seconds"] = cpu
    figures["load_after"] = os.getloadavg()
    return figures


def summarize(figures: dict[str, Any]) -> tuple[list[list[Any]], dict[str, Any]]:
    """The table's rows (wall time, then CPU time: per s is records per CPU-second there) and
    the ratios for --json."""
    n = figures["records"]
    rows: list[list[Any]] = []
    out: dict[str, Any] = {"codec": figures["codec"]}
    for kind, label in (("seconds", ""), ("cpu_seconds", ", CPU")):
        times = figures[kind]
        ours = times["ours"]
        median = statistics.median(ours)
        rows.append([f"filter + map_values + to, processor{label}", "kafka", n, median,
                     n / median, None, "", ""])  # fmt: skip
        for commit in QUIX_COMMITS:
            theirs = times.get(f"quix_{commit:g}s") or []
            if not theirs:
                continue
            ratios = [q / o for o, q in zip(ours, theirs, strict=True)]
            ratio = statistics.median(ratios)
            median = statistics.median(theirs)
            name = f"  Quix Streams {QUIX_VERSION}, commit_interval {commit:g} s{label}"
            found = out.setdefault(f"quix_{commit:g}s", {})
            if kind == "seconds":
                ok = ratio >= TARGET_RATIO
                rows.append([name, "kafka", n, median, n / median, ratio,
                             f"ours >= {TARGET_RATIO:g}x", "met" if ok else "NOT met"])  # fmt: skip
                found.update(per_s=n / median, ours_over_quix=ratio, met=ok)
                found["spread"] = [min(ratios), max(ratios)]
            else:
                rows.append([name, "kafka", n, median, n / median, ratio, "", ""])
                found["cpu_ours_over_quix"] = ratio
                found["cpu_spread"] = [min(ratios), max(ratios)]
    out["ours_per_s"] = n / statistics.median(figures["seconds"]["ours"])
    out["ours_per_cpu_s"] = n / statistics.median(figures["cpu_seconds"]["ours"])
    return rows, out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--first-round",
        type=int,
        default=0,
        help="number the rounds from here (odd ones run in reverse order): rounds split over runs",
    )
    parser.add_argument("--codec-records", type=int, default=200_000)
    parser.add_argument("--no-quix", action="store_true", help="ours only")
    parser.add_argument("--quix-timeout", type=float, default=300.0, help="s per Quix phase")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    args = parser.parse_args(argv)
    if args.records < 10 or args.rounds < 1 or args.codec_records < 1:
        parser.error("--records >= 10, --rounds and --codec-records >= 1")
    folder = Path(tempfile.mkdtemp(prefix="quix-peer-bench-"))
    os.environ["STREAMCORE_HOME"] = str(folder)
    try:
        figures = run(args, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    rows, ratios = summarize(figures)
    if args.json:
        print(json.dumps({**figures, "results": ratios}, indent=2))
        return 0
    codec = figures["codec"]
    print(
        f"codec, {args.codec_records:,} orders: encode {codec['stdlib_encode']:,.0f}/s (stdlib) "
        f"-> {codec['codec_encode']:,.0f}/s (JsonCodec), decode {codec['stdlib_decode']:,.0f}/s "
        f"-> {codec['codec_decode']:,.0f}/s"
    )
    print(f"seconds per round: {json.dumps(figures['seconds'])}")
    print(f"CPU seconds per round: {json.dumps(figures['cpu_seconds'])}")
    print(f"load average before {figures['load_before']}, after {figures['load_after']}")
    print(table(rows, "records"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
