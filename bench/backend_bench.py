"""Local log vs Kafka, in one run: batched append of N records (default 1M, 100-byte values,
10-byte keys, by key over 4 partitions, batches of 10,000) and a read of all of them through a
consumer group (`read_batch`). Prints records/s per backend and local/Kafka ratios.

The Kafka broker is the single-node KRaft broker of `scripts/kafka.sh` (started if not running,
and stopped again if this run started it). Both sides go through the same streamcore API, so the
figures compare the backends as a streamcore user sees them.

    python bench/backend_bench.py [--records N] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from streamcore.config import load_config, project_root
from streamcore.log import LocalLogManager, LogManager

ROOT = project_root()
KAFKA = ROOT / "scripts" / "kafka.sh"
TARGET_APPEND_RATIO = 1.0  # local append >= 1.0x Kafka append (issue 3)


def kafka_running() -> bool:
    return subprocess.run([str(KAFKA), "status"], capture_output=True).returncode == 0


def measure(
    manager: LogManager, name: str, keys: list[str], values: list[bytes], batch: int
) -> dict[str, float]:
    manager.create(name, 4)
    appender = manager.appender(name)
    n = len(keys)
    chunks = [
        list(zip(keys[i : i + batch], values[i : i + batch], strict=True))
        for i in range(0, n, batch)
    ]
    start = time.perf_counter()
    for items in chunks:
        appender.append_batch(items)
    append_s = time.perf_counter() - start
    appender.close()
    tailer = manager.tailer("bench/reader", name)
    got = 0
    start = time.perf_counter()
    while got < n:
        records = tailer.read_batch(batch, timeout=5.0)
        if not records:
            raise RuntimeError(f"read stalled after {got} of {n} records on {name}")
        got += len(records)
    tailer.commit()
    read_s = time.perf_counter() - start
    tailer.close()
    return {
        "append_per_s": n / append_s,
        "read_per_s": n / read_s,
        "append_s": append_s,
        "read_s": read_s,
    }


def progress(message: str) -> None:
    print(f"  {message}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    n = args.records
    blob = os.urandom(n * 100)
    values = [blob[i * 100 : (i + 1) * 100] for i in range(n)]
    keys = [f"k{i:09d}" for i in range(n)]

    started_kafka = False
    if not kafka_running():
        progress("starting the local Kafka broker (scripts/kafka.sh start) ...")
        subprocess.run([str(KAFKA), "start"], check=True)
        started_kafka = True
    folder = Path(tempfile.mkdtemp(prefix="backend-bench-"))
    results: dict[str, dict[str, float]] = {}
    try:
        from streamcore.log.kafka import KafkaLogManager

        backends: dict[str, Callable[[], LogManager]] = {
            "local": lambda: LocalLogManager(folder / "log", config=load_config(home=folder)),
            "kafka": lambda: KafkaLogManager(
                os.environ.get("STREAMCORE_KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092"),
                topic_prefix=f"bench-{uuid.uuid4().hex[:8]}-",
            ),
        }
        for backend, make in backends.items():
            progress(f"{backend}: appending and reading {n:,} records ...")
            manager = make()
            try:
                os.sync()
                results[backend] = measure(manager, "bench/backend", keys, values, args.batch)
                if backend == "kafka":
                    manager.delete("bench/backend")
            finally:
                manager.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        if started_kafka:
            subprocess.run([str(KAFKA), "stop"], check=False)

    ratio_append = results["local"]["append_per_s"] / results["kafka"]["append_per_s"]
    ratio_read = results["local"]["read_per_s"] / results["kafka"]["read_per_s"]
    summary = {
        "records": n,
        "results": results,
        "local_vs_kafka_append": ratio_append,
        "local_vs_kafka_read": ratio_read,
        "append_target_met": ratio_append >= TARGET_APPEND_RATIO,
    }
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print(f"{'backend':<8}  {'append records/s':>16}  {'read records/s':>14}")
    print(f"{'-' * 8}  {'-' * 16}  {'-' * 14}")
    for backend, r in results.items():
        print(f"{backend:<8}  {r['append_per_s']:>16,.0f}  {r['read_per_s']:>14,.0f}")
    print(f"{'local/kafka':<8}  {ratio_append:>15.2f}x  {ratio_read:>13.2f}x")
    met = "met" if ratio_append >= TARGET_APPEND_RATIO else "NOT met"
    print(f"target: local append >= {TARGET_APPEND_RATIO:.1f}x Kafka append: {met}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
