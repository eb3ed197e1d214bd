"""Failover with and without a standby replica (issue 29, section 2): the time from a SIGKILL of
a task's owner to the first record the new owner processes, for a store of 1M keys.

Each round, on a fresh local log under a temporary folder, for `standby_replicas` = 0 and then 1:

1. N records (default 1M, keys `k0`..`k{N-1}`: one key each, so the store ends with N keys)
   are appended to a 1-partition log, and process A (its own state directory, as on its own
   machine) counts them per key in a RocksDB store with its changelog
   (`Settings(read_batch=2000, checkpoint_interval=1.0)`), until the group's committed position
   is the log's end.
2. Process B (another state directory, same settings) joins the group. A keeps the task (it is
   older); with a standby, B follows the store's changelog, and the bench waits until the group
   state says B holds the task warm; without, until B is a member.
3. A is SIGKILLed, then 100 `probe-*` records are appended (A counts nothing more, so they
   are B's first records). Timed: from the kill until the first probe's count appears on the
   output stream (the processor forwards the count of `probe-*` keys only). Both processes use
   a heartbeat of 0.5 s and a session of 2 s, so about 2 s of each figure is the group noticing
   the death (the same with and without standby); B's restore line (its seconds, and whether it
   read the changelog from the start) is taken from B's log.

    python bench/standby_bench.py [--records N] [--rounds R] [--json]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from streamcore.codecs import get_codec
from streamcore.computation import Processor, Settings, StreamProcessor, Topology
from streamcore.config import LogDefaults, StreamcoreConfig
from streamcore.log import LocalLogManager
from streamcore.log.local.groups import group_states
from streamcore.record import Record
from streamcore.text import Progress, TextColumn, render_table

IN, OUT, COMPUTATION, STORE = "bench/standby-in", "bench/standby-out", "bench/standby", "counts"
PROBES = 100
HEARTBEAT, SESSION = 0.5, 2.0


class CountPerKey(Processor):
    """Counts records per key in the store; forwards the counts of `probe-*` keys only."""

    def init(self, context: Any) -> None:
        self.context = context

    def process(self, key: str, value: Any) -> None:
        store = self.context.get_state_store(STORE)
        count = (store.get(key) or 0) + 1
        store.put(key, count)
        if key.startswith("probe-"):
            self.context.forward(key, count)


def manager(root: Path) -> LocalLogManager:
    made = LocalLogManager(root / "log", config=StreamcoreConfig(home=root, log=LogDefaults()))
    made.heartbeat_interval, made.session_timeout = HEARTBEAT, SESSION
    return made


def child(root: Path, state: Path, standby: int) -> None:
    """One member: the counting processor until killed (its log on stderr: the restore's line)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    topology = (
        Topology.builder()
        .add_processor(
            COMPUTATION, CountPerKey, inputs=[IN], outputs=[OUT], codec="json", stores=[STORE]
        )
        .build()
    )
    settings = Settings(
        state_dir=state, read_batch=2000, checkpoint_interval=1.0, standby_replicas=standby
    )
    StreamProcessor(manager(root), topology, settings).start()
    print("ready", flush=True)
    threading.Event().wait()


def spawn(root: Path, state: Path, standby: int, log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, __file__, "--child", str(root), str(state), str(standby)],
        stdout=subprocess.DEVNULL,
        stderr=log.open("wb"),
        env={**os.environ, "STREAMCORE_HOME": str(root)},
    )


def wait_for(what: str, check: Any, timeout: float = 900.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"gave up waiting for {what} after {timeout:.0f} s")
        time.sleep(0.05)


def warm_members(root: Path) -> int:
    states = group_states(root / "log", COMPUTATION)
    return sum(1 for state in states for info in state["members"].values() if info.get("warm"))


def failover(root: Path, n: int, standby: int) -> dict[str, Any]:
    logs = manager(root)
    codec = get_codec("avro")
    logs.create(IN, 1)
    logs.create(OUT, 1)
    appender = logs.appender(IN, codec)
    shown = Progress(f"  fill {n:,} keys", n, interval=5.0)
    for start in range(0, n, 10_000):
        keys = [f"k{i}" for i in range(start, min(n, start + 10_000))]
        appender.append_batch([(k, Record(k, b"1")) for k in keys])
        shown.update(start + len(keys))
    appender.flush()
    shown.done(n)
    end = logs.end_offsets(IN)[0]
    first = spawn(root, root / "state-a", standby, root / "a.log")
    second = None
    try:
        counted = Progress("  A counts", n, interval=5.0)

        def drained() -> bool:
            position = logs.committed(IN, COMPUTATION)[0] or 0
            counted.update(position)
            return position >= end

        wait_for("A to count every record", drained)
        counted.done(n)
        second = spawn(root, root / "state-b", standby, root / "b.log")
        if standby:
            wait_for("B's warm copy", lambda: warm_members(root) > 0)
        else:
            wait_for("B to join", lambda: len(logs.group_members(COMPUTATION)) == 2)
        tailer = logs.tailer("bench/standby-reader", OUT, get_codec("avro"))
        first.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        first.wait()
        appender.append_batch([(f"probe-{i}", Record(f"probe-{i}", b"1")) for i in range(PROBES)])
        appender.flush()
        while tailer.read(timeout=0.05) is None:
            if time.monotonic() - killed > 600:
                raise RuntimeError("the new owner processed nothing within 600 s")
        seconds = time.monotonic() - killed
        tailer.close()
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()
        logs.close()
    restored = re.search(r"restored \(RestoreResult\((.*?)\)\)", (root / "b.log").read_text())
    fields = dict(re.findall(r"(\w+)=([\w.]+)", restored.group(1))) if restored else {}
    return {
        "standby": standby,
        "seconds": seconds,
        "restore_seconds": float(fields.get("seconds", "nan")),
        "restored_records": int(fields.get("restored", "0")),
        "full_restore": fields.get("full") == "True",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000, help="keys in the store")
    parser.add_argument("--rounds", type=int, default=2, help="failovers of each kind")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(Path(args.child[0]), Path(args.child[1]), int(args.child[2]))
        return 0
    runs: list[dict[str, Any]] = []
    for round_ in range(args.rounds):
        for standby in (0, 1):
            folder = Path(tempfile.mkdtemp(prefix="standby-bench-"))
            try:
                print(f"round {round_ + 1}, standby_replicas={standby}", file=sys.stderr)
                runs.append(failover(folder, args.records, standby))
            finally:
                shutil.rmtree(folder, ignore_errors=True)
    summary = []
    for standby in (0, 1):
        mine = [r for r in runs if r["standby"] == standby]
        summary.append(
            {
                "standby_replicas": standby,
                "kill_to_first_record_s": statistics.median(r["seconds"] for r in mine),
                "restore_s": statistics.median(r["restore_seconds"] for r in mine),
                "restored_records": statistics.median(r["restored_records"] for r in mine),
                "full_restores": sum(r["full_restore"] for r in mine),
                "rounds": len(mine),
            }
        )
    if args.json:
        print(json.dumps({"records": args.records, "runs": runs, "summary": summary}, indent=2))
        return 0
    print(
        f"failover of a {args.records:,}-key store (heartbeat {HEARTBEAT} s, session "
        f"{SESSION} s; medians of {args.rounds} rounds)"
    )
    columns = [
        TextColumn("standby replicas", "right"),
        TextColumn("SIGKILL -> first record (s)", "right"),
        TextColumn("restore (s)", "right"),
        TextColumn("records restored", "right"),
        TextColumn("full restores", "right"),
    ]
    rows = [
        [
            str(s["standby_replicas"]),
            f"{s['kill_to_first_record_s']:.2f}",
            f"{s['restore_s']:.2f}",
            f"{s['restored_records']:,.0f}",
            f"{s['full_restores']}/{s['rounds']}",
        ]
        for s in summary
    ]
    print(render_table(columns, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
