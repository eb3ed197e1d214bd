"""The Quix Streams side of bench/state_bench.py and bench/window_bench.py: a keyed count with
Quix's RocksDB state, the restore of a store from its changelog topic, and a tumbling-window
count. Runs in its own venv (`.cache/bench/quix-venv`:
quixstreams needs an older confluent-kafka than streamcore), one phase per invocation, each
printing one JSON document on stdout; bench/state_bench.py runs each phase with a timeout.

Phases (all on `--bootstrap`, topics and groups named from `--prefix`):

- `produce TOPIC --records N --keys K [--span-ms S]`: N JSON values `1` keyed `k{i % K}` into a
  new 1-partition topic (a plain confluent-kafka producer, not timed as a figure); with
  `--span-ms`, record i has the Kafka timestamp `1_700_000_000_000 + i * S // N` (event time
  over S ms, what `window_bench.py` writes to our log too).
- `count TOPIC --records N --state-dir D`: an Application (group `<prefix>count-<topic>`,
  earliest) running `sdf.apply(count, stateful=True)` (state.get / state.set per message, its
  RocksDB store, changelog on); it stops itself at the N-th message. Timed from `app.run()` to the
  N-th message processed (group join included, Quix's final commit on stop not included: it is
  timed apart as `stop_s`).
- `restore TOPIC --state-dir D`: the state dir is deleted, then an Application of the same group
  starts on the same (fully committed) topic, so Quix restores every key from the changelog
  before it would process anything. `RecoveryManager.do_recovery` is wrapped (the only change to
  Quix): the restore time is that call's duration (seeking the changelog partitions, the
  recovery loop, until Quix marks the partitions recovered), and the records to restore are
  its partitions' high watermark minus their start offset, read before the call; then the
  wrapper stops the app. `start_to_restored_s` adds the application's start and group join.
- `window TOPIC --records N --state-dir D --size-ms W --grace-ms G`: an Application (group
  `<prefix>window-<topic>`) running `sdf.tumbling_window(W, grace_ms=G).count().final()` on the
  record timestamps, its results sent to `<TOPIC>-windows`; a message counter before the window
  stops the app at the N-th message. Timed from `app.run()` to the N-th message; `windows` is
  the number of final results it produced by then (final results come as windows close).
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
import time
from pathlib import Path
from typing import Any

BASE_MS = 1_700_000_000_000  # the event time of record 0 of `produce --span-ms`


def produce(args: argparse.Namespace) -> dict[str, Any]:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    for future in admin.create_topics([NewTopic(args.topic, 1, 1)]).values():
        future.result(timeout=30)
    producer = Producer(
        {"bootstrap.servers": args.bootstrap, "linger.ms": 50, "batch.size": 1 << 20}
    )
    start = time.perf_counter()
    for i in range(args.records):
        key = f"k{i % args.keys}"
        stamp = (
            {}
            if args.span_ms is None
            else {"timestamp": BASE_MS + i * args.span_ms // args.records}
        )
        while True:
            try:
                producer.produce(args.topic, b"1", key.encode(), **stamp)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(60) != 0:
        raise RuntimeError(f"{args.topic}: records left unsent after 60 s")
    return {"records": args.records, "seconds": time.perf_counter() - start}


def application(args: argparse.Namespace, group: str) -> Any:
    from quixstreams import Application

    return Application(
        broker_address=args.bootstrap,
        consumer_group=group,
        auto_offset_reset="earliest",
        state_dir=args.state_dir,
        loglevel="WARNING",
    )


def count(args: argparse.Namespace) -> dict[str, Any]:
    app = application(args, f"{args.prefix}count-{args.topic}")
    topic = app.topic(args.topic, key_deserializer="str", value_deserializer="json")
    seen = {"n": 0, "first": 0.0, "last": 0.0}

    def add(value: Any, state: Any) -> int:
        total: int = state.get("count", 0) + value
        state.set("count", total)
        seen["n"] += 1
        if seen["n"] == 1:
            seen["first"] = time.perf_counter()
        if seen["n"] == args.records:
            seen["last"] = time.perf_counter()
            app.stop()
        return total

    app.dataframe(topic).apply(add, stateful=True)
    start = time.perf_counter()
    app.run()
    stopped = time.perf_counter()
    if seen["n"] != args.records:
        raise RuntimeError(f"Quix processed {seen['n']} of {args.records} records")
    return {
        "records": args.records,
        "seconds": seen["last"] - start,
        "first_to_last_s": seen["last"] - seen["first"],
        "stop_s": stopped - seen["last"],
    }


def restore(args: argparse.Namespace) -> dict[str, Any]:
    from quixstreams.state.recovery import RecoveryManager

    shutil.rmtree(args.state_dir, ignore_errors=True)  # the restore rebuilds every key
    app = application(args, f"{args.prefix}count-{args.topic}")
    topic = app.topic(args.topic, key_deserializer="str", value_deserializer="json")

    def add(value: Any, state: Any) -> int:
        total: int = state.get("count", 0) + value
        state.set("count", total)
        return total

    app.dataframe(topic).apply(add, stateful=True)
    timing: dict[str, Any] = {}
    original = RecoveryManager.do_recovery

    def timed(manager: RecoveryManager) -> None:
        partitions = [rp for parts in manager.partitions.values() for rp in parts.values()]
        # Records to restore: from the store's changelog offset (none: the partition's low
        # watermark) to the high watermark captured at assignment.
        planned = sum(
            rp.changelog_highwater - max(rp.offset, rp._changelog_lowwater) for rp in partitions
        )
        began = time.perf_counter()
        original(manager)
        timing.setdefault("seconds", 0.0)
        timing["seconds"] += time.perf_counter() - began
        timing["records"] = timing.get("records", 0) + planned
        timing["restored_at"] = time.perf_counter()
        app.stop()

    RecoveryManager.do_recovery = timed  # type: ignore[method-assign]
    start = time.perf_counter()
    app.run()
    if "seconds" not in timing:
        raise RuntimeError("Quix did not restore anything (no recovery ran)")
    return {
        "records": timing["records"],
        "seconds": timing["seconds"],
        "start_to_restored_s": timing["restored_at"] - start,
    }


def window(args: argparse.Namespace) -> dict[str, Any]:
    app = application(args, f"{args.prefix}window-{args.topic}")
    topic = app.topic(args.topic, key_deserializer="str", value_deserializer="json")
    results = app.topic(f"{args.topic}-windows", value_serializer="json")
    seen = {"n": 0, "last": 0.0, "windows": 0}

    def counted(value: Any) -> None:
        seen["n"] += 1
        if seen["n"] == args.records:
            seen["last"] = time.perf_counter()
            app.stop()

    def result(value: Any) -> None:
        seen["windows"] += 1

    sdf = app.dataframe(topic)
    sdf = sdf.update(counted)
    sdf = sdf.tumbling_window(duration_ms=args.size_ms, grace_ms=args.grace_ms).count().final()
    sdf = sdf.update(result)
    sdf.to_topic(results)
    start = time.perf_counter()
    app.run()
    if seen["n"] != args.records:
        raise RuntimeError(f"Quix processed {seen['n']} of {args.records} records")
    return {"records": args.records, "seconds": seen["last"] - start, "windows": seen["windows"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("phase", choices=("produce", "count", "restore", "window"))
    parser.add_argument("topic")
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--state-dir", type=Path)
    parser.add_argument("--span-ms", type=int, default=None, help="event time span of produce")
    parser.add_argument("--size-ms", type=int, default=60_000)
    parser.add_argument("--grace-ms", type=int, default=10_000)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    phases = {"produce": produce, "count": count, "restore": restore, "window": window}
    print(json.dumps(phases[args.phase](args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
