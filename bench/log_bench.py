"""Local-log throughput against the physical limit and a peer library, in one run.

Workload: N records (default 1M) of 100-byte values with 10-byte keys. Every figure is records/s
and a ratio: against raw sequential write/read of the same bytes in the same run (the I/O limit
this machine gives Python: 1 MiB `write`/`readinto` calls, page cache, no fsync), and against
persist-queue, a Python disk queue, doing the same appends and reads.

persist-queue is far slower per record, so it runs on fewer records (`--peer-records`); rates are
comparable, totals are not. Its durable per-put queue is compared with our fsync=always append,
and so is the honest floor of that promise: a raw `write` + `fsync` per record of the same bytes
(persist-queue's `put` does not fsync per put, so it promises less). The single append is also
compared with a raw `write` per record (one syscall each, the floor of an unbuffered append).

Each run starts after an `os.sync()` so no dirty pages of the previous one land in it; on a
machine shared with other writers that can wait long on their pages: `--no-sync` skips it.

    python bench/log_bench.py [--records N] [--no-sync] [--json]
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
from streamcore.log import LocalLogManager, LogTailer
from streamcore.log.local.appender import LocalAppender

TARGETS = {  # records/s, and fraction of raw write, from the issue
    "append, batched (lists)": (2_000_000, 0.25),
    "append, batched, 1 partition": (2_000_000, 0.25),
    "append, batched (arrow)": (2_000_000, 0.25),
    "append, single record": (300_000, None),
    "read, batch (arrow)": (3_000_000, None),
    "read, per record": (500_000, None),
}


class Bench:
    def __init__(
        self,
        records: int,
        value_bytes: int,
        batch: int,
        folder: Path,
        repeat: int,
        sync: bool = True,
    ) -> None:
        self.n = records
        self.sync = sync
        self.repeat = repeat
        self.batch = batch
        self.folder = folder
        self.rows: list[dict] = []
        blob = os.urandom(records * value_bytes)
        self.values = [blob[i * value_bytes : (i + 1) * value_bytes] for i in range(records)]
        self.keys = [f"k{i:09d}" for i in range(records)]
        self.record_bytes = value_bytes + 10

    def timed(
        self,
        label: str,
        count: int,
        prepare: Callable[[int], tuple[Callable[[], object], Callable[[], None]]],
        baseline: str | None,
    ) -> float:
        """Best of `self.repeat` runs. `prepare(i)` sets up run i untimed and returns the timed
        callable and an (untimed) clean-up, so every run starts from a fresh log."""
        print(f"  running: {label} ({count:,} records) ...", file=sys.stderr, flush=True)
        best = float("inf")
        for i in range(self.repeat):
            fn, cleanup = prepare(i)
            # No dirty pages from the previous run: their writeback would land in this one.
            if self.sync:
                os.sync()
            start = time.perf_counter()
            fn()
            best = min(best, time.perf_counter() - start)
            cleanup()
        self._row(label, count, best, baseline)
        return count / best

    def _row(self, label: str, count: int, seconds: float, baseline: str | None) -> None:
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

    def manager(self, sub: str) -> LocalLogManager:
        config = load_config(home=self.folder / sub)
        return LocalLogManager(self.folder / sub / "log", config=config)

    # -- the physical limit -------------------------------------------------------------------
    def raw(self, repeat: int = 3) -> None:
        """Best of `repeat` runs: page-cache write speed swings between runs, and the best run
        is the honest physical limit (it can only lower our ratios)."""
        payload = b"".join(k.encode() + v for k, v in zip(self.keys, self.values, strict=True))
        chunk = 1 << 20
        chunks = [payload[i : i + chunk] for i in range(0, len(payload), chunk)]
        del payload

        def write(path: Path) -> None:
            with open(path, "wb", buffering=0) as f:
                for c in chunks:
                    f.write(c)

        def read(path: Path) -> None:
            buf = bytearray(chunk)
            with open(path, "rb", buffering=0) as f:
                while f.readinto(buf):
                    pass

        best: dict[str, float] = {}
        for i in range(repeat):
            path = self.folder / f"raw-{i}.bin"
            for label, fn in (("raw write (same bytes)", write), ("raw read (same bytes)", read)):
                if self.sync:
                    os.sync()
                start = time.perf_counter()
                fn(path)
                best[label] = min(best.get(label, float("inf")), time.perf_counter() - start)
            path.unlink()
        for label, seconds in best.items():
            self._row(label, self.n, seconds, None)

    def raw_per_record(self, count: int, durable_count: int) -> None:
        """The floors of unbuffered single appends: one `write` per record of a record's bytes
        with its framing (key, value, the 56-byte header and offsets), then the same with an
        `fsync` after each write, the promise of `fsync=always`."""
        record = os.urandom(self.record_bytes + 56)

        def per_record(
            sync: bool, n: int
        ) -> Callable[[int], tuple[Callable[[], object], Callable[[], None]]]:
            def prepare(i: int) -> tuple[Callable[[], object], Callable[[], None]]:
                path = self.folder / f"raw-single-{i}.bin"
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

                def run() -> None:
                    write, fsync = os.write, os.fsync
                    for _ in range(n):
                        write(fd, record)
                        if sync:
                            fsync(fd)

                def cleanup() -> None:
                    os.close(fd)
                    path.unlink()

                return run, cleanup

            return prepare

        self.timed("raw write, one per record", count, per_record(False, count), None)
        self.timed(
            "raw write + fsync, one per record",
            durable_count,
            per_record(True, durable_count),
            None,
        )

    # -- streamcore local log -----------------------------------------------------------------
    def appending(
        self, partitions: int, body: Callable[[LocalAppender], None]
    ) -> Callable[[int], tuple[Callable[[], object], Callable[[], None]]]:
        """A `prepare` for `timed`: a fresh log per run, removed after it."""

        def prepare(i: int) -> tuple[Callable[[], object], Callable[[], None]]:
            folder = self.folder / f"append-{i}"
            manager = LocalLogManager(folder / "log", config=load_config(home=folder))
            manager.create("bench/log", partitions)
            appender = manager.appender("bench/log")

            def cleanup() -> None:
                manager.close()
                shutil.rmtree(folder)

            return (lambda: body(appender)), cleanup

        return prepare

    def local(self) -> None:
        n, batch, keys, values = self.n, self.batch, self.keys, self.values
        raw_write, raw_read = "raw write (same bytes)", "raw read (same bytes)"
        chunks = [
            list(zip(keys[i : i + batch], values[i : i + batch], strict=True))
            for i in range(0, n, batch)
        ]
        key_chunks = [pa.array(keys[i : i + batch], pa.string()) for i in range(0, n, batch)]
        value_chunks = [pa.array(values[i : i + batch], pa.binary()) for i in range(0, n, batch)]

        def batched_keyed(appender: LocalAppender) -> None:
            for items in chunks:
                appender.append_batch(items)

        def batched_one_partition(appender: LocalAppender) -> None:
            for items in chunks:
                appender.append_batch(items, partition=0)

        def batched_arrow(appender: LocalAppender) -> None:
            for k, v in zip(key_chunks, value_chunks, strict=True):
                appender.append_arrow(0, k, v)

        def single_append(appender: LocalAppender) -> None:
            append = appender.append
            for k, v in zip(keys, values, strict=True):
                append(k, v)

        self.timed("append, batched (lists)", n, self.appending(4, batched_keyed), raw_write)
        self.timed(
            "append, batched, 1 partition", n, self.appending(1, batched_one_partition), raw_write
        )
        self.timed("append, batched (arrow)", n, self.appending(1, batched_arrow), raw_write)
        self.timed(
            "append, single record",
            n,
            self.appending(4, single_append),
            "raw write, one per record",
        )

        manager = self.manager("reads")
        manager.create("bench/reads", 4)
        batched_keyed(manager.appender("bench/reads"))

        def reading(how: Callable[[LogTailer], int]):
            def prepare(i: int) -> tuple[Callable[[], object], Callable[[], None]]:
                tailer = manager.tailer(f"bench/reader-{i}", "bench/reads")

                def run() -> None:
                    got = how(tailer)
                    assert got == n, f"read {got} records, expected {n}"

                return run, tailer.close

            return prepare

        def per_record(tailer: LogTailer) -> int:
            read, got = tailer.read, 0
            while read() is not None:
                got += 1
            return got

        def batch_arrow(tailer: LogTailer) -> int:
            got = 0
            while (b := tailer.read_arrow(65536)) is not None:
                got += b.num_rows
            return got

        self.timed("read, per record", n, reading(per_record), raw_read)
        self.timed("read, batch (arrow)", n, reading(batch_arrow), raw_read)
        manager.close()

    def durable(self, count: int) -> None:
        keys, values = self.keys[:count], self.values[:count]

        def prepare(i: int) -> tuple[Callable[[], object], Callable[[], None]]:
            folder = self.folder / f"durable-{i}"
            manager = LocalLogManager(folder / "log", config=load_config(home=folder))
            manager.create("bench/durable", 1, fsync="always")
            appender = manager.appender("bench/durable")

            def run() -> None:
                for k, v in zip(keys, values, strict=True):
                    appender.append_to(0, k, v)

            def cleanup() -> None:
                manager.close()
                shutil.rmtree(folder)

            return run, cleanup

        self.timed(
            "append, single, fsync=always", count, prepare, "raw write + fsync, one per record"
        )

    # -- peer: persist-queue ------------------------------------------------------------------
    def peer(self, count: int, durable_count: int) -> None:
        import persistqueue

        keys, values, batch = self.keys[:count], self.values[:count], self.batch
        queues: dict[int, persistqueue.SQLiteQueue] = {}

        def sqlite_queue(i: int) -> persistqueue.SQLiteQueue:
            if i not in queues:
                queues[i] = persistqueue.SQLiteQueue(
                    str(self.folder / f"pq-sqlite-{i}"), auto_commit=False, multithreading=False
                )
            return queues[i]

        def put_batched(i: int) -> tuple[Callable[[], object], Callable[[], None]]:
            queue = sqlite_queue(i)

            def run() -> None:
                for start in range(0, count, batch):
                    for k, v in zip(
                        keys[start : start + batch], values[start : start + batch], strict=True
                    ):
                        queue.put((k, v))
                    queue.task_done()

            return run, lambda: None

        def get_all(i: int) -> tuple[Callable[[], object], Callable[[], None]]:
            queue = sqlite_queue(i)

            def run() -> None:
                for _ in range(count):
                    queue.get()
                queue.task_done()

            return run, lambda: None

        def put_durable(i: int) -> tuple[Callable[[], object], Callable[[], None]]:
            queue = persistqueue.Queue(str(self.folder / f"pq-file-{i}"), chunksize=10_000)

            def run() -> None:
                for k, v in zip(keys[:durable_count], values[:durable_count], strict=True):
                    queue.put((k, v))

            return run, lambda: None

        self.timed("persist-queue put (sqlite, batched commit)", count, put_batched, None)
        self.timed("persist-queue get (sqlite)", count, get_all, None)
        self.timed("persist-queue put (file, durable)", durable_count, put_durable, None)


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
    parser.add_argument("--repeat", type=int, default=3, help="runs per row; the best is kept")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument(
        "--no-sync",
        action="store_true",
        help="skip the os.sync() before each run (it may wait long on a shared machine)",
    )
    args = parser.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="log-bench-", dir=args.dir))
    try:
        print(
            f"log bench: {args.records:,} records of {args.value_bytes} B in {folder}",
            file=sys.stderr,
        )
        bench = Bench(
            args.records, args.value_bytes, args.batch, folder, args.repeat, not args.no_sync
        )
        bench.raw(args.repeat)
        bench.raw_per_record(args.records, args.durable_records)
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
