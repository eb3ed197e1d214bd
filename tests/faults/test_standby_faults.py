"""Standby faults: two processors of a keyed count on the local log, each with a state folder of
its own (two machines) and `standby_replicas=1`. Once the second holds a warm copy of the
first's task, the first is SIGKILLed at a random record of a new batch. The survivor takes the
task over from its copy (its restore is not a rebuild from the changelog's start) and drains:
every key's count equals its number of input records, in three trials."""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

from audit_support import wait_until

from streamcore.codecs import get_codec
from streamcore.computation.dsl_values import resolve_value_codec
from streamcore.config import LogDefaults, StreamcoreConfig
from streamcore.log.local.groups import group_states
from streamcore.log.local.manager import LocalLogManager
from streamcore.names import Name
from streamcore.record import Record
from streamcore.state.engines import open_engine
from streamcore.state.store import KeyValueStore

IN, COMPUTATION, STORE = "app/in", "app/count", "counts"
PARTITIONS = 2
WAIT = 120.0

CHILD = """
import logging, sys, threading
from streamcore.computation import Processor, Settings, StreamProcessor, Topology
from streamcore.config import LogDefaults, StreamcoreConfig
from streamcore.log.local.manager import LocalLogManager

logging.basicConfig(level=logging.INFO, stream=sys.stderr)
root, state = sys.argv[1], sys.argv[2]

class Count(Processor):
    def init(self, context):
        self.context = context

    def process(self, key, value):
        store = self.context.get_state_store("counts")
        store.put(key, (store.get(key) or 0) + 1)
        print("rec", flush=True)

manager = LocalLogManager(root + "/log", config=StreamcoreConfig(home=root, log=LogDefaults()))
manager.heartbeat_interval, manager.session_timeout = 0.1, 0.8
topology = Topology.builder().add_processor(
    "app/count", Count, inputs=["app/in"], codec="json", stores=["counts"]
).build()
settings = Settings(state_dir=state, read_batch=20, standby_replicas=1)
settings.set_partitions("app/in", 2)
StreamProcessor(manager, topology, settings).start()
threading.Event().wait()
"""


class Child:
    """A processor process: its printed records counted, its stderr kept in a file."""

    def __init__(self, root: Path, name: str) -> None:
        self.log = root / f"{name}.log"
        self.records = 0
        self.process = subprocess.Popen(
            [sys.executable, str(root / "child.py"), str(root), str(root / f"state-{name}")],
            stdout=subprocess.PIPE,
            stderr=self.log.open("w"),
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        threading.Thread(target=self._count, daemon=True).start()

    def _count(self) -> None:
        for _ in self.process.stdout:  # type: ignore[union-attr]
            self.records += 1

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)


def drained(manager: LocalLogManager) -> bool:
    committed = manager.committed(IN, COMPUTATION)
    return all(c == e for c, e in zip(committed, manager.end_offsets(IN), strict=True))


def warm(root: Path, task: int) -> bool:
    members = [m for s in group_states(root / "log", COMPUTATION) for m in s["members"].values()]
    return any(task in m.get("warm", ()) for m in members)


def stored(state: Path) -> dict[str, int]:
    codec = resolve_value_codec("json", where="test")
    counts: dict[str, int] = {}
    for task in range(PARTITIONS):
        engine = open_engine("rocksdb", state / Name.of(COMPUTATION).id / str(task) / STORE, 5.0)
        try:
            counts.update(KeyValueStore(STORE, engine, codec).all())
        finally:
            engine.close()
    return counts


def trial(root: Path, rng: random.Random) -> None:
    root.mkdir()
    (root / "child.py").write_text(textwrap.dedent(CHILD))
    manager = LocalLogManager(root / "log", config=StreamcoreConfig(home=root, log=LogDefaults()))
    manager.create(IN, PARTITIONS)
    appender = manager.appender(IN, get_codec("avro"))
    expected: dict[str, int] = {}

    def append(count: int) -> None:
        keys = [f"k{rng.randrange(30)}" for _ in range(count)]
        appender.append_batch([(k, Record(k, b"1")) for k in keys])
        for key in keys:
            expected[key] = expected.get(key, 0) + 1

    append(300)
    first = Child(root, "a")
    second = None
    try:
        wait_until(lambda: drained(manager), WAIT, "the first processor to count")
        second = Child(root, "b")
        # The first keeps task 0 (the older member keeps its lowest task); the second's copy:
        wait_until(lambda: warm(root, 0), WAIT, "the second processor's warm copy of task 0")
        before = first.records
        append(300)
        kill_at = before + rng.randint(1, 120)
        wait_until(lambda: first.records >= kill_at, WAIT, "the first processor to count more")
        first.kill()
        append(100)  # the first may have counted its share already: work for the new owner
        wait_until(
            lambda: "task 0: store counts restored" in second.log.read_text(), WAIT, "the takeover"
        )
        wait_until(lambda: drained(manager), WAIT, "the second processor to drain")
        second.kill()
    finally:
        for child in (first, second):
            if child is not None:
                child.kill()
        manager.close()
    restores = re.findall(r"task 0: store counts restored \((.*)\)", second.log.read_text())
    assert restores, f"the second processor never restored task 0:\n{second.log.read_text()}"
    assert "full=False" in restores[-1], restores[-1]  # from its copy, not the changelog start
    assert stored(root / "state-b") == expected


def test_a_standby_takes_over_a_killed_owner_without_loss_or_double_count(
    tmp_path: Path,
) -> None:
    rng = random.Random(29)
    for number in range(3):
        trial(tmp_path / f"trial-{number}", rng)
