"""Static vs pool worker allocation on a skewed load (issue 30, Nuclio's `workerAllocationMode`).

A 4-partition log holds `--records` records (default 4,000), `--hot` of them (default 85%) on
partition 0 with 200 keys, the rest spread over partitions 1-3 (20 keys each). One computation
with `concurrency` 4 processes them; its handler waits 1 ms per record (`time.sleep(0.001)`,
which releases the GIL as a network call would) and asks for a checkpoint. Each run has its
own log and group: the processor starts on the empty log, and once every thread has its
partitions (the group formed: 4 members under static, 1 under pool) the records are appended.
Timed: from the append until the group's committed positions reach the log's end, for:

- `static`: each of the 4 threads is a group member owning one partition, so the hot
  partition's thread does most of the work while the others idle;
- `pool`: one member, its 4 workers share the 4 partitions (per-key order kept).

Each round runs both sides, alternating which goes first. Reported: the median records/s per
side, its spread (min-max over the rounds), pool's median over static's, and the load average
(`uptime`) before and after. With `--hot 0.25` the load is even: the control.

    python bench/pool_bench.py [--records N] [--hot FRACTION] [--rounds R] [--log local|memory]
                               [--json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from streamcore.codecs import get_codec
from streamcore.computation import Computation, Settings, StreamProcessor, Topology
from streamcore.config import LogDefaults, StreamcoreConfig
from streamcore.log import LocalLogManager, LogManager
from streamcore.log.memory import MemoryLogManager
from streamcore.record import Record
from streamcore.text import render_table

PARTITIONS, WORKERS = 4, 4
_groups = itertools.count()


class Call(Computation):
    """One I/O-like wait per record (a service call), then a checkpoint request."""

    def __init__(self, name: str) -> None:
        super().__init__(name, 1, 0)

    def process_record(self, context: Any, input_stream: str, record: Record) -> None:
        time.sleep(0.001)
        context.ask_for_checkpoint()


def fill(manager: LogManager, stream: str, records: int, hot: float) -> None:
    appender = manager.appender(stream, get_codec("avro"))
    on_hot = int(records * hot)
    appender.append_batch(
        [(f"hot-{i % 200}", Record(f"hot-{i % 200}", b"x")) for i in range(on_hot)], partition=0
    )
    cold = records - on_hot
    for partition in range(1, PARTITIONS):
        share = cold // (PARTITIONS - 1) + (1 if partition <= cold % (PARTITIONS - 1) else 0)
        keys = [f"cold-{partition}-{i % 20}" for i in range(share)]
        appender.append_batch([(k, Record(k, b"x")) for k in keys], partition=partition)
    appender.close()


def run_side(manager: LogManager, allocation: str, records: int, hot: float) -> float:
    """Seconds from the append until the group committed every record."""
    run = next(_groups)
    name, stream = f"bench/pool-{allocation}-{run}", f"bench/pool-in-{run}"
    manager.create(stream, PARTITIONS)
    topology = Topology.builder().add_computation(lambda: Call(name), [f"i1:{stream}"]).build()
    settings = Settings(default_concurrency=WORKERS, default_partitions=PARTITIONS)
    settings.set_worker_allocation(name, allocation)
    processor = StreamProcessor(manager, topology, settings).start()
    try:
        if not processor.wait_for_assignments(60):
            raise RuntimeError(f"{allocation}: the group did not form within 60 s")
        started = time.perf_counter()
        fill(manager, stream, records, hot)
        while manager.lag(stream, name).pos < records:
            if processor.failed_computations():
                raise RuntimeError(f"{allocation}: {processor.unit_stats(name)}")
            time.sleep(0.002)
        return time.perf_counter() - started
    finally:
        processor.stop(30)


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=4000)
    parser.add_argument("--hot", type=float, default=0.85, help="share on partition 0")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--log", choices=("local", "memory"), default="local")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    load_before = load_average()
    with tempfile.TemporaryDirectory(prefix="pool-bench-") as folder:
        root = Path(folder)
        manager: LogManager = (
            MemoryLogManager()
            if args.log == "memory"
            else LocalLogManager(
                root / "log", config=StreamcoreConfig(home=root, log=LogDefaults())
            )
        )
        seconds: dict[str, list[float]] = {"static": [], "pool": []}
        for round_ in range(args.rounds):
            sides = ("static", "pool") if round_ % 2 == 0 else ("pool", "static")
            for side in sides:
                seconds[side].append(run_side(manager, side, args.records, args.hot))
        manager.close()
    load_after = load_average()
    rates = {side: [args.records / s for s in values] for side, values in seconds.items()}
    medians = {side: statistics.median(values) for side, values in rates.items()}
    result = {
        "records": args.records,
        "hot": args.hot,
        "rounds": args.rounds,
        "log": args.log,
        "workers": WORKERS,
        "partitions": PARTITIONS,
        "seconds": seconds,
        "records_per_s": rates,
        "median_records_per_s": medians,
        "ratio_pool_over_static": medians["pool"] / medians["static"],
        "load_before": load_before,
        "load_after": load_after,
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    rows = [
        [
            side,
            f"{statistics.median(seconds[side]):.2f}",
            f"{medians[side]:,.0f}",
            f"{min(rates[side]):,.0f}-{max(rates[side]):,.0f}",
            f"{medians[side] / medians['static']:.2f}x",
        ]
        for side in ("static", "pool")
    ]
    print(
        f"{args.records:,} records, {args.hot:.0%} on one of {PARTITIONS} partitions, {WORKERS} "
        f"threads, 1 ms wait per record, {args.log} log, {args.rounds} rounds"
    )
    print(render_table(["allocation", "s (median)", "records/s", "spread", "vs static"], rows))
    print(f"load average before: {load_before}; after: {load_after}")


if __name__ == "__main__":
    main()
