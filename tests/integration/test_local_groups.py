"""Dynamic consumer groups on the local log with real processes (`LocalLogManager.subscribe`).

Each member is a separate Python process (the WORKER script below) that reads in mark
mode and appends one line per event to its own file: `assigned`/`revoked` partitions (from its
rebalance listener), every record it processed (`rec partition offset`) and every position it
committed (`commit partition offset`), each stamped with the wall-clock time. The checker then
asserts, over a whole run:

- every record was processed;
- no record was processed twice, except records a SIGKILLed member processed after its last commit
  on that partition (they are re-delivered to the next owner: at-least-once);
- no two members held one partition at the same time (the ownership intervals from the listener
  events, ended by the kill time for killed members, never overlap), and every record was
  processed inside its member's ownership interval.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from streamcore.config import LogDefaults, StreamcoreConfig
from streamcore.log.local.groups import FileGroupStore
from streamcore.log.local.manager import LocalLogManager
from streamcore.names import Name

GROUP = "test/workers"
HEARTBEAT, SESSION, COMMIT_INTERVAL = 0.2, 1.0, 0.2

WORKER = """
import json, os, signal, sys, time

cfg = json.loads(sys.argv[1])
fd = os.open(cfg["out"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

def log(*parts):
    os.write(fd, (" ".join(map(str, (repr(time.time()),) + parts)) + "\\n").encode())

stop = False
def on_term(*_):
    global stop
    stop = True
signal.signal(signal.SIGTERM, on_term)

from streamcore.config import LogDefaults, StreamcoreConfig
from streamcore.log.api import RebalanceListener
from streamcore.log.local.manager import LocalLogManager

def csv(partitions):
    return ",".join(str(p.partition) for p in partitions)

class Listener(RebalanceListener):
    def on_revoked(self, tailer, partitions):
        log("revoked", csv(partitions))
    def on_assigned(self, tailer, partitions):
        log("assigned", csv(partitions))

root = cfg["root"]
m = LocalLogManager(root, config=StreamcoreConfig(home=root, log=LogDefaults()))
tailer = m.subscribe(
    cfg["group"], [cfg["log"]], Listener(),
    heartbeat_interval=cfg["heartbeat"], session_timeout=cfg["session"],
)
tailer.commit_interval = cfg["commit_interval"]
real_commit = tailer.commit_offset
def commit_offset(partition, offset):
    real_commit(partition, offset)
    log("commit", partition.partition, offset)
tailer.commit_offset = commit_offset
log("started", tailer.member.id)
delay = cfg["delay"]
while not stop:
    rec = tailer.read(0.05)
    if rec is None:
        continue
    log("rec", rec.partition.partition, rec.offset)
    if delay:
        time.sleep(delay)
    tailer.mark(rec)
tailer.close()
log("closed")
"""


@dataclass
class Worker:
    name: str
    out: Path
    proc: subprocess.Popen
    killed_at: float | None = None
    stopped: bool = False

    def events(self) -> list[list[str]]:
        if not self.out.exists():
            return []
        return [line.split() for line in self.out.read_text().splitlines()]

    def started(self) -> bool:
        return any(e[1] == "started" for e in self.events())

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self.killed_at = time.time()  # the process is gone: it did nothing after this

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(20) == 0, f"{self.name} did not stop cleanly"
        self.stopped = True
        assert self.events()[-1][1] == "closed"


@dataclass
class Cluster:
    tmp: Path
    manager: LocalLogManager
    name: str
    partitions: int
    delay: float = 0.0
    session: float = SESSION
    workers: dict[str, Worker] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.script = self.tmp / "worker.py"
        self.script.write_text(textwrap.dedent(WORKER))
        self.store = FileGroupStore(self.manager.root, GROUP, [Name.of(self.name)])

    def start(self, name: str, wait: bool = True) -> Worker:
        cfg = {
            "root": str(self.manager.root),
            "group": GROUP,
            "log": self.name,
            "out": str(self.tmp / f"{name}.events"),
            "heartbeat": HEARTBEAT,
            "session": self.session,
            "commit_interval": COMMIT_INTERVAL,
            "delay": self.delay,
        }
        proc = subprocess.Popen([sys.executable, str(self.script), json.dumps(cfg)])
        worker = Worker(name, Path(cfg["out"]), proc)
        self.workers[name] = worker
        if wait:
            wait_for(worker.started, 30, f"{name} did not start")
        return worker

    def owners(self) -> dict[str, int]:
        """Per worker name, how many partitions the group state gives it."""
        state = self.store.load()
        ids = {w.events()[0][2]: n for n, w in self.workers.items() if w.started()}
        counts: Counter = Counter(ids.get(m, m) for m in state["owners"].values())
        return dict(counts)

    def caught_up(self) -> bool:
        committed = self.manager.committed(self.name, GROUP)
        return committed == self.manager.end_offsets(self.name)

    def close(self) -> None:
        for w in self.workers.values():
            if w.proc.poll() is None:
                w.proc.kill()
                w.proc.wait()


def wait_for(condition, timeout: float, what: str) -> float:
    """Seconds it took for `condition()` to hold."""
    start = time.monotonic()
    while not condition():
        assert time.monotonic() - start < timeout, what
        time.sleep(0.02)
    return time.monotonic() - start


@pytest.fixture
def cluster_factory(tmp_path: Path):
    made: list[Cluster] = []

    def make(partitions: int = 4, **options) -> Cluster:
        root = tmp_path / "log"
        manager = LocalLogManager(root, config=StreamcoreConfig(home=tmp_path, log=LogDefaults()))
        name = "test/shared"
        manager.create(name, partitions)
        cluster = Cluster(tmp_path, manager, name, partitions, **options)
        made.append(cluster)
        return cluster

    yield make
    for cluster in made:
        cluster.close()
        cluster.manager.close()


def produce(cluster: Cluster, per_partition: int, start: int = 0) -> None:
    app = cluster.manager.appender(cluster.name)
    for p in range(cluster.partitions):
        items = [(f"k{i}", f"{p}-{i}".encode()) for i in range(start, start + per_partition)]
        app.append_batch(items, partition=p)


def check_run(cluster: Cluster) -> dict[str, int]:
    """The whole-run assertions (see module doc); returns a few counts for the report."""
    ends = cluster.manager.end_offsets(cluster.name)
    processings: dict[tuple[int, int], list[tuple[str, bool]]] = defaultdict(list)
    intervals: dict[int, list[tuple[float, float, str]]] = defaultdict(list)
    redelivered = 0
    for name, worker in cluster.workers.items():
        events = worker.events()
        last_commit: dict[int, int] = {}
        for e in events:
            if e[1] == "commit":
                last_commit[int(e[2])] = int(e[3])
        opened: dict[int, float] = {}
        held: dict[int, list[tuple[float, float]]] = defaultdict(list)
        end_time = worker.killed_at if worker.killed_at is not None else float(events[-1][0])
        for e in events:
            ts, kind = float(e[0]), e[1]
            if kind == "assigned":
                for p in map(int, e[2].split(",")):
                    assert p not in opened, f"{name}: {p} assigned twice"
                    opened[p] = ts
            elif kind == "revoked":
                for p in map(int, e[2].split(",")):
                    held[p].append((opened.pop(p), ts))
            elif kind == "rec":
                p, o = int(e[2]), int(e[3])
                assert p in opened, f"{name} processed {p}:{o} without holding {p}"
                uncommitted = worker.killed_at is not None and o >= last_commit.get(p, -1)
                processings[(p, o)].append((name, uncommitted))
                redelivered += uncommitted
        for p, start in opened.items():
            held[p].append((start, end_time))
        for p, spans in held.items():
            intervals[p] += [(s, e, name) for s, e in spans]
    # Every record processed; twice only when the first was lost in a crash.
    for p, end in enumerate(ends):
        for o in range(end):
            who = processings.get((p, o))
            assert who, f"record {p}:{o} was never processed"
            committed_ones = [n for n, uncommitted in who if not uncommitted]
            assert len(committed_ones) <= 1, f"record {p}:{o} processed by {who}"
    # One holder at a time per partition.
    for p, spans in intervals.items():
        spans.sort()
        for (_, e1, n1), (s2, _, n2) in itertools.pairwise(spans):
            assert s2 >= e1, f"partition {p}: {n1} held it until {e1}, {n2} from {s2}"
    return {
        "records": sum(ends),
        "processings": sum(len(v) for v in processings.values()),
        "crash_redelivered": redelivered,
    }


def test_a_second_process_takes_half_of_the_partitions(cluster_factory) -> None:
    cluster = cluster_factory(partitions=4)
    produce(cluster, 100)
    cluster.start("a")
    wait_for(lambda: cluster.owners() == {"a": 4}, 10, "a did not get every partition")
    b = cluster.start("b")
    took = wait_for(lambda: cluster.owners() == {"a": 2, "b": 2}, 10, "no 2/2 split")
    assert took < 3.0
    produce(cluster, 100, start=100)
    wait_for(cluster.caught_up, 20, "the group did not catch up")
    revoked = [e for e in cluster.workers["a"].events() if e[1] == "revoked"]
    assigned = [e for e in b.events() if e[1] == "assigned"]
    assert sorted(revoked[0][2].split(",")) == sorted(assigned[0][2].split(","))
    assert float(assigned[0][0]) > float(revoked[0][0])
    for w in cluster.workers.values():
        w.stop()
    counts = check_run(cluster)
    assert counts["processings"] == counts["records"] == 800


def test_a_graceful_leave_hands_partitions_over_promptly(cluster_factory) -> None:
    cluster = cluster_factory(partitions=4)
    cluster.start("a")
    cluster.start("b")
    wait_for(lambda: cluster.owners() == {"a": 2, "b": 2}, 10, "no 2/2 split")
    produce(cluster, 200)
    wait_for(cluster.caught_up, 20, "the group did not catch up")
    produce(cluster, 200, start=200)
    started = time.monotonic()
    cluster.workers["b"].stop()
    took = wait_for(lambda: cluster.owners() == {"a": 4}, 10, "a did not take over")
    assert time.monotonic() - started < 2.0, f"takeover took {took:.2f} s after the stop"
    wait_for(cluster.caught_up, 20, "the group did not catch up")
    cluster.workers["a"].stop()
    counts = check_run(cluster)
    assert counts["processings"] == counts["records"] == 1600


def test_a_killed_member_is_replaced_within_the_session_timeout(cluster_factory) -> None:
    cluster = cluster_factory(partitions=4, delay=0.001)
    cluster.start("a")
    b = cluster.start("b")
    wait_for(lambda: cluster.owners() == {"a": 2, "b": 2}, 10, "no 2/2 split")
    produce(cluster, 300)
    wait_for(lambda: sum(e[1] == "rec" for e in b.events()) > 50, 10, "b processes nothing")
    b.kill()
    killed = time.monotonic()
    wait_for(lambda: cluster.owners() == {"a": 4}, 10, "a did not take over")
    took = time.monotonic() - killed
    assert SESSION - 2 * HEARTBEAT <= took <= SESSION + 1.0, f"takeover after {took:.2f} s"
    wait_for(cluster.caught_up, 20, "the group did not catch up")
    cluster.workers["a"].stop()
    counts = check_run(cluster)
    assert counts["records"] == 1200


@pytest.mark.slow
def test_a_whole_run_with_kills_and_joins_processes_everything_once(cluster_factory) -> None:
    """Three members, a concurrent producer, then a kill, a join, a graceful leave and another
    join while records keep coming; the checker covers the whole run."""
    cluster = cluster_factory(partitions=6, delay=0.0005, session=1.5)
    stop = threading.Event()
    produced = [0]

    def producer() -> None:
        app = cluster.manager.appender(cluster.name)
        rng = random.Random(7)
        while not stop.is_set():
            batch = [(f"key-{rng.randrange(10_000)}", b"x" * 50) for _ in range(20)]
            app.append_batch(batch)
            produced[0] += len(batch)
            time.sleep(0.02)

    for name in ("a", "b", "c"):
        cluster.start(name)
    wait_for(lambda: cluster.owners() == {"a": 2, "b": 2, "c": 2}, 15, "no 2/2/2 split")
    thread = threading.Thread(target=producer, daemon=True)
    thread.start()
    try:
        time.sleep(1.5)
        cluster.workers["b"].kill()
        time.sleep(1.0)
        cluster.start("d", wait=False)
        time.sleep(1.5)
        cluster.workers["c"].stop()
        cluster.start("e", wait=False)
        time.sleep(1.5)
        cluster.workers["a"].kill()
        time.sleep(1.0)
    finally:
        stop.set()
        thread.join()
    wait_for(cluster.caught_up, 30, "the group did not catch up")
    wait_for(lambda: cluster.owners() == {"d": 3, "e": 3}, 15, "d and e do not share 3/3")
    for name in ("d", "e"):
        cluster.workers[name].stop()
    counts = check_run(cluster)
    assert counts["records"] == produced[0]
    assert counts["processings"] >= counts["records"]


def test_compare_and_swap_across_processes(tmp_path: Path) -> None:
    """Processes bumping one counter in a group state through `GroupMember.update`: no update is
    lost, and the version counts every write."""
    script = tmp_path / "bump.py"
    script.write_text(
        textwrap.dedent(
            """
            import sys
            from pathlib import Path
            from streamcore.log.local.groups import FileGroupStore
            from streamcore.log.cursor.membership import GroupMember
            from streamcore.names import Name

            store = FileGroupStore(Path(sys.argv[1]), "test/cas", [Name.of("test/cas")])
            member = GroupMember(store, ["test-cas-00"], heartbeat_interval=1, session_timeout=5)

            def bump(state):
                state["counter"] = state.get("counter", 0) + 1
                return True

            for _ in range(int(sys.argv[2])):
                member.update(bump)
            """
        )
    )
    procs = [
        subprocess.Popen([sys.executable, str(script), str(tmp_path), "100"]) for _ in range(4)
    ]
    assert [p.wait(60) for p in procs] == [0] * 4
    state = FileGroupStore(tmp_path, "test/cas", [Name.of("test/cas")]).load()
    assert state["counter"] == state["version"] == 400
    assert not [f for f in os.listdir(tmp_path / "_subscriptions") if f.endswith(".tmp")]
