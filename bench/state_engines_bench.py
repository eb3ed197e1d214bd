"""The two candidates for the persistent state store engine, on this machine: rocksdict (RocksDB,
an LSM tree: one `Rdict`, a `WriteBatch` per batch) and lmdb (a memory-mapped B+tree: one
environment, one write transaction per batch), doing what a state store does (issue 27).

For each: batched writes of N keys (default 1M, 16-byte keys "key-000000000123" in a shuffled
order, as a restore from a changelog meets them, 8-byte values; batches of 10,000, each with a
checkpoint value written in the same atomic batch, under a key outside the data: a column family
for RocksDB, a named sub-database for lmdb), the reopen after a close, random point gets of 100k
keys, a full ordered scan, and the size on disk. lmdb runs twice: with its default `sync=True`
(an fsync per transaction) and with `sync=False`, which like RocksDB's default (its write-ahead
log written, not fsynced, per batch) survives a killed process but not a power cut. Prints
keys/s per engine and the rocksdict / lmdb ratios. Both sort each batch by key before writing it
(inside the timing), as the engine does: RocksDB's memtable and lmdb's B+tree insert a sorted
batch faster than a shuffled one.

    python bench/state_engines_bench.py [--keys N] [--batch N] [--gets N] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import struct
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

TARGET_WRITE_RATE = 500_000  # keys/s through batched writes: the restore target

CHECKPOINT_KEY = b"checkpoint"


class Engine(Protocol):
    def write(self, items: list[tuple[bytes, bytes]], checkpoint: bytes) -> None: ...
    def get(self, key: bytes) -> bytes | None: ...
    def scan(self) -> Iterator[tuple[bytes, bytes]]: ...
    def checkpoint(self) -> bytes | None: ...
    def close(self) -> None: ...


class Rocks:
    """rocksdict in raw (bytes) mode, the data in the default column family, the checkpoint in
    its own one."""

    def __init__(self, path: Path) -> None:
        from rocksdict import Options, Rdict

        options = Options(raw_mode=True)
        options.create_if_missing(True)
        options.create_missing_column_families(True)
        self.db = Rdict(str(path), options, column_families={"checkpoint": Options(raw_mode=True)})
        self.cf = self.db.get_column_family_handle("checkpoint")
        self.meta = self.db.get_column_family("checkpoint")

    def write(self, items: list[tuple[bytes, bytes]], checkpoint: bytes) -> None:
        from rocksdict import WriteBatch

        batch = WriteBatch(raw_mode=True)
        put = batch.put
        for key, value in sorted(items):  # RocksDB's memtable inserts a sorted batch faster
            put(key, value)
        batch.put(CHECKPOINT_KEY, checkpoint, self.cf)
        self.db.write(batch)

    def get(self, key: bytes) -> bytes | None:
        value: bytes | None = self.db.get(key)
        return value

    def scan(self) -> Iterator[tuple[bytes, bytes]]:
        return self.db.items()  # type: ignore[return-value]

    def checkpoint(self) -> bytes | None:
        value: bytes | None = self.meta.get(CHECKPOINT_KEY)
        return value

    def close(self) -> None:
        # A column family handle keeps the database (and RocksDB's LOCK) open: drop it first.
        del self.cf
        self.meta.close()
        self.db.close()


class Lmdb:
    """One lmdb environment, named sub-databases "data" and "checkpoint" (with named databases,
    the main database holds their names, so the data cannot live there)."""

    def __init__(self, path: Path, sync: bool) -> None:
        import lmdb

        self.env = lmdb.open(str(path), map_size=8 << 30, max_dbs=2, sync=sync)
        self.data = self.env.open_db(b"data")
        self.meta = self.env.open_db(b"checkpoint")

    def write(self, items: list[tuple[bytes, bytes]], checkpoint: bytes) -> None:
        with self.env.begin(write=True) as txn:
            txn.cursor(self.data).putmulti(sorted(items))  # sorted: B+tree pages in order
            txn.put(CHECKPOINT_KEY, checkpoint, db=self.meta)

    def get(self, key: bytes) -> bytes | None:
        with self.env.begin(buffers=False) as txn:
            value: bytes | None = txn.get(key, db=self.data)
            return value

    def scan(self) -> Iterator[tuple[bytes, bytes]]:
        with self.env.begin() as txn:
            yield from txn.cursor(self.data).iternext()

    def checkpoint(self) -> bytes | None:
        with self.env.begin() as txn:
            value: bytes | None = txn.get(CHECKPOINT_KEY, db=self.meta)
            return value

    def close(self) -> None:
        self.env.close()


def disk_bytes(path: Path) -> int:
    """Allocated bytes (st_blocks), not apparent sizes: lmdb's file is sparse up to its map."""
    return sum(p.stat().st_blocks * 512 for p in path.rglob("*") if p.is_file())


def progress(message: str) -> None:
    print(f"  {message}", file=sys.stderr, flush=True)


def measure(
    open_engine: Callable[[Path], Engine],
    path: Path,
    keys: list[bytes],
    values: list[bytes],
    batch: int,
    lookups: list[bytes],
) -> dict[str, float]:
    n = len(keys)
    chunks = [
        list(zip(keys[i : i + batch], values[i : i + batch], strict=True))
        for i in range(0, n, batch)
    ]
    os.sync()
    engine = open_engine(path)
    start = time.perf_counter()
    for number, items in enumerate(chunks):
        engine.write(items, struct.pack(">q", number))
    write_s = time.perf_counter() - start
    start = time.perf_counter()
    engine.close()
    close_s = time.perf_counter() - start

    start = time.perf_counter()
    engine = open_engine(path)
    reopen_s = time.perf_counter() - start
    assert engine.checkpoint() == struct.pack(">q", len(chunks) - 1)

    get = engine.get
    start = time.perf_counter()
    for key in lookups:
        if get(key) is None:
            raise RuntimeError(f"key {key!r} missing")
    get_s = time.perf_counter() - start

    start = time.perf_counter()
    count = 0
    last = b""
    for key, _ in engine.scan():
        if key <= last:
            raise RuntimeError(f"scan out of order at {key!r}")
        last = key
        count += 1
    scan_s = time.perf_counter() - start
    if count != n:
        raise RuntimeError(f"scan saw {count} keys of {n}")
    engine.close()
    return {
        "write_keys_per_s": n / write_s,
        "get_per_s": len(lookups) / get_s,
        "scan_keys_per_s": n / scan_s,
        "write_s": write_s,
        "close_s": close_s,
        "reopen_s": reopen_s,
        "disk_mib": disk_bytes(path) / (1 << 20),
    }


ROWS = [
    ("batched write (keys/s)", "write_keys_per_s", "{:,.0f}"),
    ("random get (gets/s)", "get_per_s", "{:,.0f}"),
    ("ordered scan (keys/s)", "scan_keys_per_s", "{:,.0f}"),
    ("close after writes (s)", "close_s", "{:.3f}"),
    ("reopen (s)", "reopen_s", "{:.3f}"),
    ("disk (MiB)", "disk_mib", "{:.1f}"),
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--gets", type=int, default=100_000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    n = args.keys
    rng = random.Random(27)
    order = list(range(n))
    rng.shuffle(order)
    keys = [f"key-{i:012d}".encode() for i in order]
    values = [struct.pack(">q", i) for i in order]
    lookups = rng.sample(keys, min(args.gets, n))

    candidates: dict[str, Callable[[Path], Any]] = {
        "rocksdict": Rocks,
        "lmdb": lambda path: Lmdb(path, sync=True),
        "lmdb_nosync": lambda path: Lmdb(path, sync=False),
    }
    folder = Path(tempfile.mkdtemp(prefix="state-engines-bench-"))
    results: dict[str, dict[str, float]] = {}
    try:
        for name, make in candidates.items():
            progress(f"{name}: {n:,} keys in batches of {args.batch:,}, {len(lookups):,} gets ...")
            results[name] = measure(make, folder / name, keys, values, args.batch, lookups)
            shutil.rmtree(folder / name)
    finally:
        shutil.rmtree(folder, ignore_errors=True)

    ratios = {
        other: {
            field: results["rocksdict"][field] / results[other][field]
            for _, field, _ in ROWS
            if results[other][field]
        }
        for other in ("lmdb", "lmdb_nosync")
    }
    summary = {
        "keys": n,
        "batch": args.batch,
        "gets": len(lookups),
        "results": results,
        "rocksdict_over": ratios,
        "write_target_keys_per_s": TARGET_WRITE_RATE,
    }
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    names = list(results)
    header = f"{'':<24}" + "".join(f"{name:>14}" for name in names)
    header += f"{'rocks/lmdb':>12}{'rocks/nosync':>14}"
    print(header)
    print("-" * len(header))
    for label, field, fmt in ROWS:
        line = f"{label:<24}" + "".join(f"{fmt.format(results[k][field]):>14}" for k in names)
        over = ratios["lmdb"].get(field, 0), ratios["lmdb_nosync"].get(field, 0)
        line += f"{over[0]:>11.2f}x{over[1]:>13.2f}x"
        print(line)
    for name in names:
        rate = results[name]["write_keys_per_s"]
        met = "met" if rate >= TARGET_WRITE_RATE else "NOT met"
        print(f"{name}: batched writes {rate:,.0f} keys/s, target >= {TARGET_WRITE_RATE:,}: {met}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
