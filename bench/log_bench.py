"""Local-log throughput against the physical limit and a peer library, in one run.

Workload: N records (default 1M) of 100-byte values with 10-byte keys. Every figure is records/s
and a ratio: against raw sequential write/read of the same bytes in the same run (the I/O limit
this machine gives Python: 1 MiB `write`/`readinto` calls, page cache, no fsync), and against
persist-queue, a Python disk queue, doing the same appends and reads.

persist-queue is far slower per record, so it runs on fewer records (`--peer-records`); rates are
comparable, totals are not. Its durable per-put queue is compared with our fsync=always append.

    python bench/log_bench.py [--records N] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa

from streamcore.config import load_config
from streamcore.log import LocalLogManager

TARGETS = {  # records/s, and fraction of raw write, from the issue
    "append, batched (lists)": (2_000_000, 0.25),
    "append, batched, 1 partition": (2_000_000, 0.25),
    "append, batched (arrow)": (2_000_000, 0.25),
    "append, single record": (300_000, None),
    "read, batch (arrow)": (3_000_000, None),
    "read, per record": (500_000, None),
}


class Bench:
    def __init__(self, records: int, value_bytes: int, batch: int, folder: Path) -> None:
        self.n = records
        self.batch = batch
        self.folder = folder
        self.rows: list[dict] = []
        blob = os.urandom(records * value_bytes)
        self.values = [blob[i * value_bytes : (i + 1) * value_bytes] for i in range(records)]
        self.keys = [f"k{i:09d}" for i in range(records)]
        self.record_bytes = value_bytes + 10

    def timed(
        self, label: str, count: int, fn: Callable[[], object], baseline: str | None
    ) -> float:
        print(f"  running: {label} ({count:,} records) ...", file=sys.stderr, flush=True)
        start = time.perf_counter()
        fn()
        seconds = time.perf_counter() - start
        rate = count / seconds
        self.rows.append(
            {
                "operation": label,
                "records": count,
                "seconds": round(seconds, 3),
                "records_per_s": round(rate),
                "baseline": baseline,
                "mb_per_s": round(rate * self.record_bytes / 1e6, 1),
            }
        )
        return rate

    def manager(self, sub: str) -> LocalLogManager:
        config = load_config(home=self.folder / sub)
        return LocalLogManager(self.folder / sub / "log", config=config)

    # -- the physical limit -------------------------------------------------------------------
    def raw(self) -> None:
        path = self.folder / "raw.bin"
        payload = b"".join(k.encode() + v for k, v in zip(self.keys, self.values, strict=True))
        chunk = 1 << 20
        chunks = [payload[i : i + chunk] for i in range(0, len(payload), chunk)]
        del payload

        def write() -> None:
            with open(path, "wb", buffering=0) as f:
                for c in chunks:
                    f.write(c)

        def read() -> None:
            buf = bytearray(chunk)
            with open(path, "rb", buffering=0) as f:
                while f.readinto(buf):
                    pass

        self.timed("raw write (same bytes)", self.n, write, None)
        self.timed("raw read (same bytes)", self.n, read, None)

    # -- streamcore local log -----------------------------------------------------------------
    def local(self) -> None:
        n, batch, keys, values = self.n, self.batch, self.keys, self.values
        manager = self.manager("lists")
        manager.create("bench/lists", 4)
        appender = manager.appender("bench/lists")
        chunks = [
            list(zip(keys[i : i + batch], values[i : i + batch], strict=True))
            for i in range(0, n, batch)
        ]

        def batched_keyed() -> None:
            for items in chunks:
                appender.append_batch(items)

        self.timed("append, batched (lists)", n, batched_keyed, "raw write (same bytes)")

        one = self.manager("one")
        one.create("bench/one", 1)
        one_appender = one.appender("bench/one")

        def batched_one_partition() -> None:
            for items in chunks:
                one_appender.append_batch(items, partition=0)

        self.timed(
            "append, batched, 1 partition", n, batched_one_partition, "raw write (same bytes)"
        )
        one.close()

        arrow_manager = self.manager("arrow")
        arrow_manager.create("bench/arrow", 1)
        arrow_appender = arrow_manager.appender("bench/arrow")
        key_chunks = [pa.array(keys[i : i + batch], pa.string()) for i in range(0, n, batch)]
        value_chunks = [pa.array(values[i : i + batch], pa.binary()) for i in range(0, n, batch)]

        def batched_arrow() -> None:
            for k, v in zip(key_chunks, value_chunks, strict=True):
                arrow_appender.append_arrow(0, k, v)

        self.timed("append, batched (arrow)", n, batched_arrow, "raw write (same bytes)")
        arrow_manager.close()

        single_manager = self.manager("single")
        single_manager.create("bench/single", 4)
        single = single_manager.appender("bench/single")

        def single_append() -> None:
            append = single.append
            for k, v in zip(keys, values, strict=True):
                append(k, v)

        self.timed("append, single record", n, single_append, "raw write (same bytes)")
        single_manager.close()

        def per_record() -> None:
            tailer = manager.tailer("bench/reader", "bench/lists")
            read = tailer.read
            got = 0
            while read() is not None:
                got += 1
            assert got == n, got
            tailer.close()

        def batch_arrow() -> None:
            tailer = manager.tailer("bench/arrow-reader", "bench/lists")
            got = 0
            while (b := tailer.read_arrow(65536)) is not None:
                got += b.num_rows
            assert got == n, got
            tailer.close()

        self.timed("read, per record", n, per_record, "raw read (same bytes)")
        self.timed("read, batch (arrow)", n, batch_arrow, "raw read (same bytes)")
        manager.close()

    def durable(self, count: int) -> None:
        config = load_config(home=self.folder / "durable")
        manager = LocalLogManager(self.folder / "durable" / "log", config=config)
        manager.create("bench/durable", 1, fsync="always")
        appender = manager.appender("bench/durable")

        def run() -> None:
            for k, v in zip(self.keys[:count], self.values[:count], strict=True):
                appender.append_to(0, k, v)

        self.timed("append, single, fsync=always", count, run, "persist-queue put (file, durable)")
        manager.close()

    # -- peer: persist-queue ------------------------------------------------------------------
    def peer(self, count: int, durable_count: int) -> None:
        import persistqueue

        keys, values = self.keys[:count], self.values[:count]
        queue = persistqueue.SQLiteQueue(
            str(self.folder / "pq-sqlite"), auto_commit=False, multithreading=False
        )

        def batched() -> None:
            for i in range(0, count, self.batch):
                for k, v in zip(keys[i : i + self.batch], values[i : i + self.batch], strict=True):
                    queue.put((k, v))
                queue.task_done()

        def read() -> None:
            for _ in range(count):
                queue.get()
            queue.task_done()

        self.timed("persist-queue put (sqlite, batched commit)", count, batched, None)
        self.timed("persist-queue get (sqlite)", count, read, None)

        file_queue = persistqueue.Queue(str(self.folder / "pq-file"), chunksize=10_000)

        def durable_put() -> None:
            for k, v in zip(keys[:durable_count], values[:durable_count], strict=True):
                file_queue.put((k, v))

        self.timed("persist-queue put (file, durable)", durable_count, durable_put, None)


def ratios(rows: list[dict]) -> None:
    by_name = {r["operation"]: r for r in rows}
    peers = {
        "append, batched (lists)": "persist-queue put (sqlite, batched commit)",
        "append, batched, 1 partition": "persist-queue put (sqlite, batched commit)",
        "append, batched (arrow)": "persist-queue put (sqlite, batched commit)",
        "read, per record": "persist-queue get (sqlite)",
        "append, single, fsync=always": "persist-queue put (file, durable)",
    }
    for row in rows:
        base = by_name.get(row["baseline"] or "")
        row["vs_raw"] = round(row["records_per_s"] / base["records_per_s"], 3) if base else None
        peer = by_name.get(peers.get(row["operation"], ""))
        row["vs_peer"] = round(row["records_per_s"] / peer["records_per_s"], 1) if peer else None
        target = TARGETS.get(row["operation"])
        if target:
            rate_ok = row["records_per_s"] >= target[0]
            raw_ok = target[1] is None or (row["vs_raw"] or 0) >= target[1]
            row["target"] = f">= {target[0] / 1e6:g}M/s" + (
                f", >= {target[1]:.0%} raw" if target[1] else ""
            )
            row["met"] = rate_ok and raw_ok
        else:
            row["target"], row["met"] = "", None


def print_table(rows: list[dict]) -> None:
    columns = [
        ("operation", "operation", "<"),
        ("records", "records", ">"),
        ("records_per_s", "records/s", ">"),
        ("mb_per_s", "MB/s", ">"),
        ("vs_raw", "x raw I/O", ">"),
        ("vs_peer", "x persist-queue", ">"),
        ("target", "target", "<"),
        ("met", "met", "<"),
    ]

    def cell(row: dict, key: str) -> str:
        value = row.get(key)
        if value is None or value == "":
            return "-"
        if key == "met":
            return "yes" if value else "NO"
        if isinstance(value, int):
            return f"{value:,}"
        return str(value)

    table = [[cell(r, k) for k, _, _ in columns] for r in rows]
    widths = [max(len(h), *(len(t[i]) for t in table)) for i, (_, h, _) in enumerate(columns)]
    fmt = "  ".join(f"{{:{a}{w}}}" for (_, _, a), w in zip(columns, widths, strict=True))
    print(fmt.format(*(h for _, h, _ in columns)))
    print("  ".join("-" * w for w in widths))
    for t in table:
        print(fmt.format(*t))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--peer-records", type=int, default=100_000)
    parser.add_argument("--durable-records", type=int, default=2_000)
    parser.add_argument("--dir", type=Path, default=None, help="scratch folder (default: temp)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="log-bench-", dir=args.dir))
    try:
        print(
            f"log bench: {args.records:,} records of {args.value_bytes} B in {folder}",
            file=sys.stderr,
        )
        bench = Bench(args.records, args.value_bytes, args.batch, folder)
        bench.raw()
        bench.local()
        bench.durable(args.durable_records)
        bench.peer(min(args.peer_records, args.records), args.durable_records)
        ratios(bench.rows)
        if args.json:
            print(json.dumps(bench.rows, indent=2))
        else:
            print_table(bench.rows)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
