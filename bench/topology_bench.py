"""A DSL topology run by the StreamProcessor vs the same work as a hand-written loop, in one run.

The work, on N Record envelopes (default 1M; Avro `Record` codec, payload a JSON document of
about 150 bytes, or its Avro encoding with `--payload avro`) in a 4-partition local log under a
temporary STREAMCORE_HOME:

1. parse: decode the payload (the stream's value codec);
2. enrich: add a region, the total in cents and a tier;
3. route: orders of 1,000.00 and more to one stream, the others to another, payload re-encoded.

- DSL: `builder.stream(events, codec=...).map_values(enrich).branch(is_high, always)` with a `.to()`
  per branch (one fused computation), run by `StreamProcessor.start()` + `drain_and_stop()` with
  `Settings(read_batch=1000)`: the DSL asks for a checkpoint after every record and the
  processor takes it once per read batch, i.e. every 1,000 records (outputs appended, input
  positions committed). Timed from `start()` until `drain_and_stop()` returns.
- Hand-written loop: `tailer.read_batch(1000)` -> parse -> enrich -> route -> `append_batch` per
  output -> `tailer.commit()`, i.e. the same checkpoint every 1,000 records.

Two more rows split the hand-written loop's cost: the work alone in memory (no log, no
framework), and reading + decoding the envelopes + committing alone (no work). Each is an upper
bound for any consumer doing this work on this machine. The loop and the DSL run alternately
`--rounds` times (default 2), each on new groups and outputs, and the best of each is kept, so a
change in machine load hits both. All outputs are checked to hold the same records. Targets
(issue 31 section 3, which raised issue 4's 50%): DSL >= 200k records/s and >= 0.95x the
hand-written loop.

    python bench/topology_bench.py [--records N] [--rounds 2] [--payload json|avro] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from streamcore.codecs import Codec, get_codec
from streamcore.computation import Settings, StreamProcessor, Topology
from streamcore.computation.dsl_values import resolve_value_codec
from streamcore.config import load_config
from streamcore.log import LocalLogManager, LogManager
from streamcore.record import Record
from streamcore.text import Progress

TARGET_RATE = 200_000
TARGET_RATIO = 0.95
PARTITIONS = 4
CHECKPOINT_EVERY = 1000
EVENTS = "bench/events"
HIGH_CENTS = 100_000

ORDER_SCHEMA = {
    "type": "record",
    "name": "Order",
    "namespace": "streamcore.bench",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "user", "type": "string"},
        {"name": "email", "type": "string"},
        {"name": "country", "type": "string"},
        {"name": "amount", "type": "double"},
        {"name": "items", "type": "int"},
        {"name": "sku", "type": "string"},
        {"name": "ts", "type": "long"},
        {"name": "region", "type": "string", "default": ""},
        {"name": "total_cents", "type": "long", "default": 0},
        {"name": "tier", "type": "string", "default": ""},
    ],
}
COUNTRIES = ("FR", "DE", "US", "JP", "BR", "IN", "GB")
REGIONS = {
    "FR": "eu",
    "DE": "eu",
    "GB": "eu",
    "US": "na",
    "JP": "apac",
    "IN": "apac",
    "BR": "latam",
}
BASE_TS = 1_700_000_000_000


def order(i: int, avro: bool) -> dict[str, Any]:
    """The i-th order: deterministic, about 150 bytes of JSON."""
    user = f"user-{(i * 7919) % 99991:05d}"
    doc: dict[str, Any] = {
        "id": i,
        "user": user,
        "email": f"{user}@example.com",
        "country": COUNTRIES[i % len(COUNTRIES)],
        "amount": ((i * 104729) % 50000) / 100,
        "items": i % 5 + 1,
        "sku": f"SKU-{(i * 31) % 50000:05d}",
        "ts": BASE_TS + i,
    }
    if avro:
        doc.update(region="", total_cents=0, tier="")
    return doc


def enrich(doc: dict[str, Any]) -> dict[str, Any]:
    doc["region"] = REGIONS[doc["country"]]
    total = round(doc["amount"] * 100) * doc["items"]
    doc["total_cents"] = total
    doc["tier"] = "gold" if total >= 5 * HIGH_CENTS else "silver" if total >= HIGH_CENTS else "std"
    return doc


def is_high(key: str, doc: dict[str, Any]) -> bool:
    return doc["total_cents"] >= HIGH_CENTS


def always(key: str, doc: dict[str, Any]) -> bool:
    return True


def progress(message: str) -> None:
    print(f"  {message}", file=sys.stderr, flush=True)


def fill(manager: LogManager, n: int, payload: Codec[Any], avro: bool) -> int:
    """Write the N input Records; returns the mean payload size."""
    manager.create(EVENTS, PARTITIONS)
    appender = manager.appender(EVENTS, get_codec("avro"))
    shown = Progress("  writing input", n, interval=5.0)
    size, batch = 0, []
    for i in range(n):
        data = payload.encode(order(i, avro))
        size += len(data)
        key = f"order-{i:08d}"
        batch.append((key, Record(key, data, (BASE_TS + i) << 17)))
        if len(batch) == 10_000:
            appender.append_batch(batch)
            batch.clear()
            shown.update(i + 1)
    if batch:
        appender.append_batch(batch)
    appender.close()
    shown.done(n)
    return size // max(n, 1)


def hand_loop(
    manager: LogManager, n: int, payload: Codec[Any], run: int
) -> tuple[float, dict[str, int]]:
    """The same work without the framework; returns (seconds, records per output)."""
    records = get_codec("avro")
    high, low = f"bench/hand{run}-high", f"bench/hand{run}-low"
    for name in (high, low):
        manager.create(name, PARTITIONS)
    tailer = manager.tailer(f"bench/hand{run}", EVENTS, records)
    to_high = manager.appender(high, records)
    to_low = manager.appender(low, records)
    decode, encode = payload.decode, payload.encode
    shown = Progress(f"  hand-written loop (round {run})", n, interval=5.0)
    done = 0
    start = time.perf_counter()
    while done < n:
        batch = tailer.read_batch(CHECKPOINT_EVERY, timeout=5.0)
        if not batch:
            raise RuntimeError(f"hand-written loop stalled after {done:,} of {n:,} records")
        highs, lows = [], []
        for item in batch:
            record = item.message
            doc = enrich(decode(record.data))
            out = Record(record.key, encode(doc), record.watermark)
            (highs if is_high(record.key, doc) else lows).append((record.key, out))
        if highs:
            to_high.append_batch(highs)
        if lows:
            to_low.append_batch(lows)
        tailer.commit()
        done += len(batch)
        shown.update(done)
    elapsed = time.perf_counter() - start
    shown.done(done)
    for closable in (tailer, to_high, to_low):
        closable.close()
    return elapsed, {high: _count(manager, high), low: _count(manager, low)}


def work_only(n: int, payload: Codec[Any], avro: bool) -> float:
    """Seconds for parse -> enrich -> route of n payloads in memory, no log and no framework (on
    min(n, 100k) payloads, scaled): what the user's work alone costs per record here."""
    sample = min(n, 100_000)
    datas = [payload.encode(order(i, avro)) for i in range(sample)]
    decode, encode = payload.decode, payload.encode
    highs, lows = [], []
    start = time.perf_counter()
    for i, data in enumerate(datas):
        doc = enrich(decode(data))
        out = Record("k", encode(doc), i)
        (highs if is_high("k", doc) else lows).append(out)
    return (time.perf_counter() - start) * n / sample


def read_only(manager: LogManager, n: int) -> float:
    """The floor of any consumer here: read and decode the envelopes, commit every 1,000."""
    tailer = manager.tailer("bench/read-only", EVENTS, get_codec("avro"))
    shown = Progress("  read only", n, interval=5.0)
    done = 0
    start = time.perf_counter()
    while done < n:
        batch = tailer.read_batch(CHECKPOINT_EVERY, timeout=5.0)
        if not batch:
            raise RuntimeError(f"read stalled after {done:,} of {n:,} records")
        tailer.commit()
        done += len(batch)
        shown.update(done)
    elapsed = time.perf_counter() - start
    shown.done(done)
    tailer.close()
    return elapsed


def dsl_topology(payload_codec: Codec[Any], run: int) -> tuple[Any, list[str]]:
    builder = Topology.builder()
    events = builder.stream(EVENTS, codec=payload_codec, name=f"bench/route-orders{run}")
    high, low = events.map_values(enrich).branch(is_high, always)
    outputs = [f"bench/dsl{run}-high", f"bench/dsl{run}-low"]
    high.to(outputs[0])
    low.to(outputs[1])
    return builder.build(), outputs


def run_dsl(
    manager: LogManager, n: int, payload: Codec[Any], run: int
) -> tuple[float, dict[str, int]]:
    topology, outputs = dsl_topology(payload, run)
    group = f"bench/route-orders{run}"
    settings = Settings(default_partitions=PARTITIONS, read_batch=CHECKPOINT_EVERY, drain_quiet=0.2)
    processor = StreamProcessor(manager, topology, settings)
    shown = Progress(f"  DSL on StreamProcessor (round {run})", n, interval=5.0)
    stop = threading.Event()

    def report() -> None:
        while not stop.wait(5.0):
            shown.update(manager.lag(EVENTS, group).pos, None)

    reporter = threading.Thread(target=report, daemon=True)
    start = time.perf_counter()
    processor.start()
    reporter.start()
    drained = processor.drain_and_stop(timeout=3600)
    elapsed = time.perf_counter() - start
    stop.set()
    reporter.join()
    shown.done(manager.lag(EVENTS, group).pos)
    if not drained:
        raise RuntimeError("the processor did not drain within an hour")
    return elapsed, {name: _count(manager, name) for name in outputs}


def _count(manager: LogManager, name: str) -> int:
    return sum(manager.end_offsets(name))


def _table(rows: list[dict[str, Any]]) -> str:
    header = ("run", "records", "seconds", "records/s", "x hand loop", "target", "met")
    lines = [header]
    for row in rows:
        lines.append(
            (
                row["run"],
                f"{row['records']:,}",
                f"{row['seconds']:.2f}",
                f"{row['rate']:,.0f}",
                f"{row['ratio']:.2f}",
                row["target"],
                row["met"],
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    out = []
    for index, line in enumerate(lines):
        cells = [
            cell.ljust(w) if i == 0 or i >= 5 else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(line, widths, strict=True))
        ]
        out.append("  ".join(cells).rstrip())
        if index == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000, help="default 1,000,000")
    parser.add_argument("--payload", choices=("json", "avro"), default="json")
    parser.add_argument(
        "--rounds", type=int, default=2, help="alternated runs of each side, best kept (2)"
    )
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    args = parser.parse_args(argv)
    n = args.records
    if n < 1 or args.rounds < 1:
        parser.error("--records and --rounds must be >= 1")
    avro = args.payload == "avro"
    payload = resolve_value_codec(
        args.payload, ORDER_SCHEMA if avro else None, where="topology_bench"
    )
    folder = Path(tempfile.mkdtemp(prefix="topology-bench-"))
    os.environ["STREAMCORE_HOME"] = str(folder)
    manager = LocalLogManager(folder / "log", config=load_config(home=folder))
    try:
        progress(f"{n:,} orders ({args.payload}) into {EVENTS}, {PARTITIONS} partitions ...")
        size = fill(manager, n, payload, avro)
        os.sync()
        work_s = work_only(n, payload, avro)
        floor_s = read_only(manager, n)
        hand_runs, dsl_runs = [], []
        for run in range(1, args.rounds + 1):  # alternated: load changes hit both sides
            hand_runs.append(hand_loop(manager, n, payload, run))
            dsl_runs.append(run_dsl(manager, n, payload, run))
    finally:
        manager.close()
        shutil.rmtree(folder, ignore_errors=True)
    for (_, hand_out), (_, dsl_out) in zip(hand_runs, dsl_runs, strict=True):
        check(n, hand_out, dsl_out)
    hand_s = min(t for t, _ in hand_runs)
    dsl_s = min(t for t, _ in dsl_runs)
    hand_rate, dsl_rate = n / hand_s, n / dsl_s
    ratio = dsl_rate / hand_rate
    rows = [
        {
            "run": "parse + enrich + route in memory (no log)",
            "records": n,
            "seconds": work_s,
            "rate": n / work_s,
            "ratio": hand_s / work_s,
            "target": "",
            "met": "",
        },
        {
            "run": "read + decode + commit only (no work)",
            "records": n,
            "seconds": floor_s,
            "rate": n / floor_s,
            "ratio": hand_s / floor_s,
            "target": "",
            "met": "",
        },
        {
            "run": "hand-written loop",
            "records": n,
            "seconds": hand_s,
            "rate": hand_rate,
            "ratio": 1.0,
            "target": "",
            "met": "",
        },
        {
            "run": "DSL on StreamProcessor",
            "records": n,
            "seconds": dsl_s,
            "rate": dsl_rate,
            "ratio": ratio,
            "target": f">= {TARGET_RATE // 1000}k/s, >= {TARGET_RATIO:.2f}x hand loop",
            "met": _met(dsl_rate >= TARGET_RATE, ratio >= TARGET_RATIO),
        },
    ]
    summary = {
        "records": n,
        "payload": args.payload,
        "payload_bytes": size,
        "partitions": PARTITIONS,
        "checkpoint_every": CHECKPOINT_EVERY,
        "work_in_memory_per_s": n / work_s,
        "read_only_per_s": n / floor_s,
        "hand_loop_per_s": hand_rate,
        "dsl_per_s": dsl_rate,
        "dsl_vs_hand_loop": ratio,
        "rate_target_met": dsl_rate >= TARGET_RATE,
        "ratio_target_met": ratio >= TARGET_RATIO,
        "rounds": args.rounds,
        "hand_loop_seconds": [t for t, _ in hand_runs],
        "dsl_seconds": [t for t, _ in dsl_runs],
        "outputs": {**hand_runs[-1][1], **dsl_runs[-1][1]},
    }
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print(
        f"parse -> enrich -> route, {n:,} records ({args.payload} payload, ~{size} bytes), "
        f"{PARTITIONS} partitions, checkpoint every {CHECKPOINT_EVERY:,} records, best of "
        f"{args.rounds} alternated rounds"
    )
    print(_table(rows))
    return 0


def _met(rate_ok: bool, ratio_ok: bool) -> str:
    if rate_ok and ratio_ok:
        return "yes"
    if ratio_ok:
        return "ratio only"
    return "rate only" if rate_ok else "no"


def check(n: int, hand: dict[str, int], dsl: dict[str, int]) -> None:
    """Both runs routed every record, and to the same side."""
    if sum(hand.values()) != n or list(hand.values()) != list(dsl.values()):
        raise RuntimeError(f"outputs differ: hand-written loop {hand}, DSL {dsl} (of {n:,})")


if __name__ == "__main__":
    sys.exit(main())
