"""Windowed aggregations (issue 28) in one run: a tumbling-window count through the
StreamProcessor against a plain Python loop doing the same windowed count in a dict, the window
store's size after the run, and Quix Streams doing the same windowed count on the same Kafka
broker.

1. Local log. N records (default 1M; keys `k0`..`k{K-1}`, K = `--keys`, default 10,000, round
   robin; data `1` as JSON in a `Record` envelope, the `avro` codec) whose event times (their
   watermarks) run from 1,700,000,000,000 ms over `--span-ms` (default 600,000: ten 1-minute
   windows, about 10 records per key and window), appended to a 1-partition local log. Then
   `--rounds` rounds (default 3), in turn:
   - loop: `tailer.read_batch(2000)` (the `avro` codec decodes the envelope), the value decoded
     with the standard library's `json` (`stdlib_json`: what a user's loop would use, in its
     fastest form, whatever JSON library streamcore's codec uses), the record's window start
     from its timestamp, the count in a dict per window start and key, each window popped into
     a result list once stream time reaches its end + grace (10 s), `tailer.commit()` per
     batch.
   - processor: the DSL `builder.stream(events, codec="json").group_by_key().windowed_by(
     TumblingWindows(60_000, grace_ms=10_000)).count(emit="final").to_stream().to(out,
     codec="json")`, RocksDB window store with its changelog, `Settings(read_batch=2000,
     checkpoint_interval=1.0)`, timed from `start()` until `drain_and_stop()` returns (its
     `drain_quiet` of 0.2 s included). Its final results are read back and compared with the
     loop's: the same windows with the same counts. Target: processor >= 0.5x the loop (each row
     the median over rounds; the ratio the median of same-round ratios).
   - after the last round: the window store's size: its keys (windows, their end index and the
     marks, as left on disk) and the bytes of its RocksDB directory, with expiry on.
2. Kafka (`scripts/kafka.sh`, started when not running; topics named `bench-window-<random>-`,
   deleted at the end): ours: the same records on a 1-partition topic, the same processor, timed
   the same way. Quix Streams 3.28.1 (its venv as in bench/state_bench.py): the same N JSON
   values `1` with the same keys and Kafka timestamps on its own 1-partition topic,
   `sdf.tumbling_window(60_000, grace_ms=10_000).count().final()` to a topic, timed from
   `app.run()` to its N-th message (bench/peers/quix_state.py, phase `window`). Target: ours >=
   1.5x Quix's throughput.

    python bench/window_bench.py [--records N] [--keys K] [--span-ms S] [--rounds R]
                                 [--no-kafka] [--no-quix] [--json]
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
from pathlib import Path
from typing import Any

from state_bench import (
    delete_kafka_names,
    kafka_bootstrap,
    progress,
    quix,
    quix_python,
    table,
)

from streamcore.codecs import get_codec
from streamcore.computation import Settings, StreamProcessor, Topology
from streamcore.config import load_config
from streamcore.log import LocalLogManager, LogManager
from streamcore.record import Record
from streamcore.state.engines import open_engine
from streamcore.state.windows import TumblingWindows
from streamcore.text import Progress
from streamcore.watermark import Watermark

TARGET_LOOP_RATIO = 0.5
TARGET_QUIX_RATIO = 1.5
BASE_MS = 1_700_000_000_000
SIZE_MS, GRACE_MS = 60_000, 10_000
READ_BATCH = 2000
CHECKPOINT_INTERVAL = 1.0
EVENTS = "bench/clicks"
STORE = "windowed_count"


def fill(manager: LogManager, n: int, keys: int, span: int) -> None:
    manager.create(EVENTS, 1)
    appender = manager.appender(EVENTS, get_codec("avro"))
    shown = Progress(f"  writing {EVENTS}", n, interval=5.0)
    for first in range(0, n, 10_000):
        batch = []
        for i in range(first, min(n, first + 10_000)):
            key = f"k{i % keys}"
            watermark = Watermark.of(BASE_MS + i * span // n).value
            batch.append((key, Record(key, b"1", watermark)))
        appender.append_batch(batch)
        shown.update(min(n, first + 10_000))
    appender.close()
    shown.done(n)


_scan = json.JSONDecoder().scan_once


def stdlib_json(data: bytes) -> Any:
    """A JSON value with the standard library, as streamcore's JSON codec read it until it took
    msgspec (the loop's baseline stays what a user writes): `json.loads`'s own work without its
    type and whitespace checks, so the faster of the two."""
    text = data.decode("utf-8")
    value, end = _scan(text, 0)
    return value if end == len(text) else json.loads(text)


def window_loop(manager: LogManager, n: int, group: str) -> tuple[float, set[tuple[str, int, int]]]:
    """The plain loop (see the module doc); returns its seconds and its final windows."""
    tailer = manager.tailer(group, EVENTS, get_codec("avro"))
    decode = stdlib_json
    open_windows: dict[int, dict[str, int]] = {}  # start -> key -> count
    results: list[tuple[str, int, int]] = []
    stream_time = -1
    next_close = None
    done = 0
    shown = Progress("  plain loop", n, interval=5.0)
    start_s = time.perf_counter()
    while done < n:
        batch = tailer.read_batch(READ_BATCH, timeout=5.0)
        if not batch:
            raise RuntimeError(f"the loop stalled after {done:,} of {n:,} records")
        for item in batch:
            record = item.message
            decode(record.data)
            ts = record.watermark >> 17
            if ts > stream_time:
                stream_time = ts
            start = ts - ts % SIZE_MS
            if start + SIZE_MS + GRACE_MS <= stream_time:
                continue  # late: not counted (none in this input)
            counts = open_windows.get(start)
            if counts is None:
                counts = open_windows[start] = {}
                if next_close is None or start + SIZE_MS + GRACE_MS < next_close:
                    next_close = start + SIZE_MS + GRACE_MS
            counts[record.key] = counts.get(record.key, 0) + 1
            if next_close is not None and stream_time >= next_close:
                for closed in sorted(
                    s for s in open_windows if s + SIZE_MS + GRACE_MS <= stream_time
                ):
                    results += [(k, closed, c) for k, c in open_windows.pop(closed).items()]
                upcoming = [s + SIZE_MS + GRACE_MS for s in open_windows]
                next_close = min(upcoming) if upcoming else None
        tailer.commit()
        done += len(batch)
        shown.update(done)
    elapsed = time.perf_counter() - start_s
    shown.done(done)
    tailer.close()
    return elapsed, set(results)


def topology(name: str, out: str) -> Topology:
    builder = Topology.builder()
    (
        builder.stream(EVENTS, codec="json", name=name)
        .group_by_key()
        .windowed_by(TumblingWindows(SIZE_MS, grace_ms=GRACE_MS))
        .count(emit="final", store=STORE)
        .to_stream()
        .to(out, codec="json")
    )
    return builder.build()


def window_processor(manager: LogManager, n: int, state: Path, run: str) -> tuple[float, str, str]:
    """Seconds from start to drained; the computation's name and its output stream."""
    name, out = f"bench/window-{run}", f"bench/windows-{run}"
    settings = Settings(
        read_batch=READ_BATCH,
        checkpoint_interval=CHECKPOINT_INTERVAL,
        drain_quiet=0.2,
        state_dir=state,
        state_engine="rocksdb",
    )
    processor = StreamProcessor(manager, topology(name, out), settings)
    start = time.perf_counter()
    processor.start()
    if not processor.drain_and_stop(timeout=1800):
        raise RuntimeError(f"the windowed count {name} did not drain within 30 minutes")
    return time.perf_counter() - start, name, out


def final_windows(manager: LogManager, out: str) -> set[tuple[str, int, int]]:
    with manager.tailer("bench/reader", out, get_codec("avro")) as tailer:
        results = []
        for item in tailer:
            value = json.loads(item.message.data)
            results.append((item.message.key, value["start"], value["value"]))
    if len(results) != len(set(results)):
        raise RuntimeError(f"{out}: a window was emitted twice in a run without a crash")
    return set(results)


def store_size(state: Path) -> dict[str, int]:
    (path,) = [p for p in state.rglob(STORE) if p.is_dir()]
    engine = open_engine("rocksdb", path, 30.0)
    try:
        keys = sum(1 for _ in engine.items())
    finally:
        engine.close()
    size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    return {"keys": keys, "bytes": size}


def run_local(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    n = args.records
    manager = LocalLogManager(folder / "log", config=load_config(home=folder))
    try:
        progress(f"1. tumbling-window count, local log: {n:,} records, {args.keys:,} keys ...")
        fill(manager, n, args.keys, args.span_ms)
        os.sync()
        times: dict[str, list[float]] = {"loop": [], "processor": []}
        for r in range(args.rounds):
            progress(f"round {r + 1} of {args.rounds}")
            seconds, expected = window_loop(manager, n, f"bench/window-loop-{r}")
            times["loop"].append(seconds)
            state = folder / f"state-{r}"
            seconds, _name, out = window_processor(manager, n, state, f"local-{r}")
            times["processor"].append(seconds)
            got = final_windows(manager, out)
            if got != expected:
                raise RuntimeError(
                    f"the processor's {len(got):,} final windows differ from the loop's "
                    f"{len(expected):,} ({len(got ^ expected):,} differ)"
                )
        return {"seconds": times, "windows": len(expected), "store": store_size(state)}
    finally:
        manager.close()


def run_kafka(args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    from streamcore.log.kafka import KafkaLogManager

    n = args.records
    bootstrap = kafka_bootstrap()
    prefix = f"bench-window-{uuid.uuid4().hex[:8]}-"
    out: dict[str, Any] = {}
    kafka = KafkaLogManager(bootstrap, topic_prefix=prefix, timeout=30.0)
    try:
        progress(f"2. tumbling-window count, Kafka ({bootstrap}) ...")
        fill(kafka, n, args.keys, args.span_ms)
        seconds, _name, stream = window_processor(kafka, n, folder / "state-kafka", "kafka")
        out["ours_s"] = seconds
        out["ours_windows"] = len(final_windows(kafka, stream))
        kafka.close()  # idle clients of ours while Quix runs would only add noise
        if not args.no_quix:
            python = quix_python()
            topic = f"{prefix}quix-clicks"
            common = ["--bootstrap", bootstrap, "--prefix", prefix, "--records", str(n)]
            quix(
                python,
                args.quix_timeout,
                "produce",
                topic,
                *common,
                "--keys",
                str(args.keys),
                "--span-ms",
                str(args.span_ms),
            )
            try:
                out["quix"] = quix(
                    python,
                    args.quix_timeout,
                    "window",
                    topic,
                    *common,
                    "--state-dir",
                    str(folder / "quix-state"),
                    "--size-ms",
                    str(SIZE_MS),
                    "--grace-ms",
                    str(GRACE_MS),
                )
            except (RuntimeError, subprocess.CalledProcessError) as exc:
                progress(f"Quix Streams failed: {exc}")
                out["quix_error"] = str(exc)
    finally:
        kafka.close()
        delete_kafka_names(bootstrap, prefix)
    return out


def summarize(figures: dict[str, Any]) -> tuple[list[list[Any]], dict[str, Any]]:
    n = figures["records"]
    local = figures["local"]
    times = local["seconds"]
    ratio = statistics.median(
        loop / proc for loop, proc in zip(times["loop"], times["processor"], strict=True)
    )
    loop_s, proc_s = statistics.median(times["loop"]), statistics.median(times["processor"])
    rows = [
        ["windowed count, plain dict loop", "local", n, loop_s, n / loop_s, 1.0, "", ""],
        [
            "windowed count, processor + RocksDB window store",
            "local",
            n,
            proc_s,
            n / proc_s,
            ratio,
            f">= {TARGET_LOOP_RATIO}x loop",
            "met" if ratio >= TARGET_LOOP_RATIO else "NOT met",
        ],
    ]
    out: dict[str, Any] = {
        "local": {
            "loop_per_s": n / loop_s,
            "processor_per_s": n / proc_s,
            "ratio": ratio,
            "met": ratio >= TARGET_LOOP_RATIO,
            "final_windows": local["windows"],
            "store": local["store"],
        }
    }
    kafka = figures.get("kafka")
    if kafka:
        ours = n / kafka["ours_s"]
        rows.append(
            [
                "windowed count, processor + RocksDB window store",
                *("kafka", n, kafka["ours_s"], ours, None, "", ""),
            ]
        )
        out["kafka"] = {"ours_per_s": ours, "ours_windows": kafka["ours_windows"]}
        if "quix" in kafka:
            q = kafka["quix"]
            theirs = n / q["seconds"]
            quix_ratio = ours / theirs
            met = quix_ratio >= TARGET_QUIX_RATIO
            rows.append(
                [
                    "windowed count, Quix Streams .final()",
                    *("kafka", n, q["seconds"], theirs, quix_ratio),
                    *(f"ours >= {TARGET_QUIX_RATIO}x Quix", "met" if met else "NOT met"),
                ]
            )
            out["kafka"].update({"quix_per_s": theirs, "ours_over_quix": quix_ratio, "met": met})
        if "quix_error" in kafka:
            reason = kafka["quix_error"].splitlines()[0][:60]
            rows.append(["Quix Streams: " + reason, "kafka", n, 0.0, 0.0, None, "", "failed"])
    return rows, out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--span-ms", type=int, default=600_000, help="event time of the input")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the local count")
    parser.add_argument("--no-kafka", action="store_true", help="local log only (no Quix either)")
    parser.add_argument("--no-quix", action="store_true", help="skip Quix Streams")
    parser.add_argument("--quix-timeout", type=float, default=300.0, help="s per Quix phase")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    args = parser.parse_args(argv)
    if min(args.records, args.keys, args.span_ms, args.rounds) < 1:
        parser.error("--records, --keys, --span-ms and --rounds must be >= 1")
    folder = Path(tempfile.mkdtemp(prefix="window-bench-"))
    os.environ["STREAMCORE_HOME"] = str(folder)
    figures: dict[str, Any] = {"records": args.records, "keys": args.keys, "span_ms": args.span_ms}
    try:
        figures["local"] = run_local(args, folder)
        if not args.no_kafka:
            figures["kafka"] = run_kafka(args, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    rows, results = summarize(figures)
    if args.json:
        print(json.dumps({**figures, "results": results}, indent=2))
        return 0
    store = figures["local"]["store"]
    print(
        f"tumbling-window count: {args.records:,} records over {args.keys:,} keys and "
        f"{args.span_ms // 1000:,} s of event time, 1-minute windows, grace 10 s, emit final; "
        f"{figures['local']['windows']:,} final windows; window store after the run: "
        f"{store['keys']:,} keys, {store['bytes']:,} bytes"
    )
    print(table(rows, "records"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
