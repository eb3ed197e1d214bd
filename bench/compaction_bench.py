"""Key compaction of the local log (issue 13): `LocalLogManager.compact` against the raw-I/O
floor of any compaction, copying the same segment files (read, write, fsync).

Setup, untimed: a 1-partition local log of `--records` records (default 1,000,000), keys drawn
at random (seeded) from `--keys` keys (default 10,000), ~200-byte values, 16 MiB segments,
appended with back-dated timestamps; the archiver's position at the end (so it holds nothing).
Its folder is copied aside, and each of the `--repeat` runs (default 3; the best is kept)
starts from a fresh copy of it, after an `os.sync()`.

* `raw copy`: every sealed segment read whole and written to a new file, fsynced: what a
  compaction that removed nothing would cost at least.
* `compact`: `LocalLogManager.compact()`: the latest offset of each key over the sealed
  segments, then each segment rewritten with its survivors (`COMPACTED` batches), fsynced and
  renamed over the original.
* `read before` / `read after`: every record of the partition read with `next_records`, before
  and after compaction (fewer records after; the rate counts records read).

Prints records/s (records of the compacted range per second) and MB/s (segment bytes before),
the ratio to the raw copy, and the bytes and records before and after.

    python bench/compaction_bench.py [--records 1000000] [--keys 10000] [--repeat 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from streamcore.config import LogDefaults, StreamcoreConfig
from streamcore.log import LogPartition
from streamcore.log.config import ARCHIVER
from streamcore.log.local.manager import LocalLogManager
from streamcore.log.local.reader import PartitionCursor
from streamcore.log.local.segment import list_segments, segment_name
from streamcore.text import TextColumn, render_table

NAME = "bench/state"
APPEND_BATCH = 10_000


def manager(home: Path) -> LocalLogManager:
    return LocalLogManager(home / "log", config=StreamcoreConfig(home=home, log=LogDefaults()))


def build(home: Path, records: int, keys: int) -> None:
    rng = random.Random(13)
    m = manager(home)
    try:
        m.create(NAME, 1, segment_bytes=16 << 20, retention="0")
        app = m.appender(NAME)
        t0 = time.time_ns() // 1_000_000 - 86_400_000
        for first in range(0, records, APPEND_BATCH):
            n = min(APPEND_BATCH, records - first)
            items = [
                (f"key-{rng.randrange(keys):06d}", f"{first + i:012d}".encode().ljust(200, b"v"))
                for i in range(n)
            ]
            app.append_batch(items, timestamps=[t0 + first + i for i in range(n)])
        m.commit_position(LogPartition.of(NAME, 0), ARCHIVER, records)
    finally:
        m.close()


def folder(home: Path) -> Path:
    return home / "log" / "bench-state" / "P-00"


def sealed(home: Path) -> list[Path]:
    bases = list_segments(folder(home))
    return [folder(home) / segment_name(b) for b in bases[:-1]]


def raw_copy(home: Path) -> float:
    start = time.perf_counter()
    for path in sealed(home):
        data = path.read_bytes()
        out = path.with_name(path.name + ".copy")
        fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
    return time.perf_counter() - start


def read_all(home: Path) -> tuple[float, int]:
    cursor = PartitionCursor(folder(home), "bench")
    start, count = time.perf_counter(), 0
    while records := cursor.next_records(10_000):
        count += len(records)
    elapsed = time.perf_counter() - start
    cursor.close()
    return elapsed, count


def run(args: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="compaction-bench-"))
    try:
        pristine = work / "pristine"
        build(pristine, args.records, args.keys)
        sizes = sum(p.stat().st_size for p in sealed(pristine))
        best: dict[str, Any] = {}
        for rep in range(args.repeat):
            home = work / f"run-{rep}"
            shutil.copytree(pristine, home)
            os.sync()
            copy_s = raw_copy(home)
            for copy in folder(home).glob("*.copy"):
                copy.unlink()
            os.sync()
            read_before_s, before = read_all(home)
            m = manager(home)
            try:
                start = time.perf_counter()
                [result] = m.compact(NAME)
                compact_s = time.perf_counter() - start
            finally:
                m.close()
            read_after_s, after = read_all(home)
            run_ = {
                "raw_copy_s": copy_s,
                "compact_s": compact_s,
                "read_before_s": read_before_s,
                "read_after_s": read_after_s,
                "records_before": before,
                "records_after": after,
                "range_records": result.records,
                "removed": result.removed,
                "bytes_before": result.bytes_before,
                "bytes_after": result.bytes_after,
            }
            if not best or compact_s < best["compact_s"]:
                best = {**run_, "raw_copy_s": min(copy_s, best.get("raw_copy_s", copy_s))}
            shutil.rmtree(home)
        best["sealed_bytes"] = sizes
        best["records"], best["keys"] = args.records, args.keys
        best["load_average"] = os.getloadavg()
        return best
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = run(args)
    if args.json:
        print(json.dumps(result))
        return 0
    n, mb = result["range_records"], result["sealed_bytes"] / 1e6
    rows = [
        ("raw copy (read, write, fsync)", n / result["raw_copy_s"], mb / result["raw_copy_s"], 1.0),
        (
            "compact",
            n / result["compact_s"],
            mb / result["compact_s"],
            result["raw_copy_s"] / result["compact_s"],
        ),
    ]
    print(
        render_table(
            [
                TextColumn("operation"),
                TextColumn("records/s", align="right"),
                TextColumn("MB/s", align="right"),
                TextColumn("x raw copy", align="right"),
            ],
            [(op, f"{r:,.0f}", f"{m:,.1f}", f"{x:.3f}") for op, r, m, x in rows],
        )
    )
    print()
    print(
        render_table(
            ["", "before", "after"],
            [
                ("records", f"{result['records_before']:,}", f"{result['records_after']:,}"),
                (
                    "bytes of rewritten segments",
                    f"{result['bytes_before']:,}",
                    f"{result['bytes_after']:,}",
                ),
                (
                    "read every record (records/s)",
                    f"{result['records_before'] / result['read_before_s']:,.0f}",
                    f"{result['records_after'] / result['read_after_s']:,.0f}",
                ),
            ],
        )
    )
    print(f"\nload average after: {' '.join(f'{x:.2f}' for x in result['load_average'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
