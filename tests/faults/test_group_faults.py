"""Faults of dynamic consumer groups on the local log (`LocalLogManager.subscribe`).

- A member that stops calling `read()` (stuck in processing) must lose its partitions to a live
  member after `max_poll_interval`, and learn it (on_revoked) when it reads again.
- A member frozen with SIGSTOP, in the middle of writing the group state or while reading, must
  not stop the other members' heartbeats or their takeover of its partitions; after SIGCONT it
  must drop what it lost before returning any record of it, and rejoin.
- Deleting the group state under live members must not let a joining member read partitions a
  live member still reads.

Members in separate processes run WORKER and log one line per event (`rec`, `assigned`,
`revoked`, ...) stamped with the wall clock; `check_run` then asserts that every record was
processed, that a record was processed again only when its first member was the one disturbed
(before the disturbance), and that every record was read by the member that was, when it called
`read()`, the latest to be assigned its partition (a member that lost a partition to another
must not get a record of it before it is given back; a read already under way when the process
froze may finish, as with any broker). A read during which the listener ran counts from the
listener's call.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from streamcore.config import LogDefaults, StreamcoreConfig
from streamcore.log import LogPartition, LogTailer, RebalanceListener
from streamcore.log.local.groups import FileGroupStore, state_stem
from streamcore.log.local.manager import LocalLogManager
from streamcore.names import Name

GROUP = "test/workers"
LOG = "test/shared"
HEARTBEAT, SESSION, MAX_POLL, COMMIT_INTERVAL = 0.2, 1.0, 1.5, 0.2
SLACK = 4.0  # a loaded machine delays threads and processes by seconds, never by this much more

WORKER = """
import json, os, signal, sys, time

cfg = json.loads(sys.argv[1])
fd = os.open(cfg["out"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

def log(*parts, at=None):
    at = time.time() if at is None else at
    os.write(fd, (" ".join(map(str, (repr(at),) + parts)) + "\\n").encode())

stop = False
def on_term(*_):
    global stop
    stop = True
signal.signal(signal.SIGTERM, on_term)

import streamcore.log.local.groups as groups
from streamcore.config import LogDefaults, StreamcoreConfig
from streamcore.log.api import RebalanceListener
from streamcore.log.local.manager import LocalLogManager

class FreezingJson:
    # Freezes the whole process in the middle of a group state write (under its flock, in a
    # design that has one) once the test creates the trigger file.
    loads = staticmethod(json.loads)

    @staticmethod
    def dumps(obj, **kw):
        if os.path.exists(cfg["freeze_in_write"]):
            os.unlink(cfg["freeze_in_write"])
            log("frozen")
            os.kill(os.getpid(), signal.SIGSTOP)
        return json.dumps(obj, **kw)

groups.json = FreezingJson

def csv(partitions):
    return ",".join(str(p.partition) for p in partitions)

listened = 0.0  # when the listener last ran

class Listener(RebalanceListener):
    def on_revoked(self, tailer, partitions):
        global listened
        listened = time.time()
        log("revoked", csv(partitions), at=listened)
    def on_assigned(self, tailer, partitions):
        global listened
        listened = time.time()
        log("assigned", csv(partitions), at=listened)

root = cfg["root"]
m = LocalLogManager(root, config=StreamcoreConfig(home=root, log=LogDefaults()))
m.heartbeat_interval, m.session_timeout = cfg["heartbeat"], cfg["session"]
m.max_poll_interval = cfg["max_poll"]
tailer = m.subscribe(cfg["group"], [cfg["log"]], Listener())
tailer.commit_interval = cfg["commit_interval"]
log("started", tailer.member.id)
while not stop:
    called = time.time()  # a record counts as read when read() was called (see check_run)
    rec = tailer.read(0.05)
    if rec is not None:
        log("rec", rec.partition.partition, rec.offset, at=max(called, listened))
    if os.path.exists(cfg["stall"]):  # stuck in processing: no read() until the file goes
        log("stalled")
        while os.path.exists(cfg["stall"]) and not stop:
            time.sleep(0.02)
        log("resumed")
    if os.path.exists(cfg["freeze"]):
        os.unlink(cfg["freeze"])
        log("frozen")
        os.kill(os.getpid(), signal.SIGSTOP)
    if rec is not None:
        time.sleep(cfg["delay"])
        tailer.mark(rec)
tailer.close()
log("closed")
"""


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> float:
    """Seconds it took for `condition()` to hold; fails after `timeout` s."""
    start = time.monotonic()
    while not condition():
        assert time.monotonic() - start < timeout, what
        time.sleep(0.02)
    return time.monotonic() - start


@dataclass
class Worker:
    name: str
    folder: Path
    proc: subprocess.Popen

    @property
    def out(self) -> Path:
        return self.folder / f"{self.name}.events"

    def trigger(self, what: str) -> Path:
        return self.folder / f"{self.name}.{what}"

    def events(self) -> list[list[str]]:
        if not self.out.exists():
            return []
        return [line.split() for line in self.out.read_text().splitlines() if line]

    def first(self, kind: str) -> float | None:
        return next((float(e[0]) for e in self.events() if e[1] == kind), None)

    def member_id(self) -> str | None:
        return next((e[2] for e in self.events() if e[1] == "started"), None)

    def frozen(self) -> bool:
        """The process is stopped (SIGSTOP): state `T` in /proc/<pid>/stat."""
        try:
            stat = Path(f"/proc/{self.proc.pid}/stat").read_text()
        except FileNotFoundError:
            return False
        return stat.rsplit(")", 1)[1].split()[0] in ("T", "t")

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(30) == 0, f"{self.name} did not stop cleanly"
        assert self.events()[-1][1] == "closed"


@dataclass
class Cluster:
    tmp: Path
    manager: LocalLogManager
    partitions: int
    delay: float
    workers: dict[str, Worker] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.script = self.tmp / "worker.py"
        self.script.write_text(textwrap.dedent(WORKER))
        self.store = FileGroupStore(self.manager.root, GROUP, [Name.of(LOG)])

    def start(self, name: str) -> Worker:
        folder = self.tmp
        cfg = {
            "root": str(self.manager.root),
            "group": GROUP,
            "log": LOG,
            "out": str(folder / f"{name}.events"),
            "heartbeat": HEARTBEAT,
            "session": SESSION,
            "max_poll": MAX_POLL,
            "commit_interval": COMMIT_INTERVAL,
            "delay": self.delay,
            "stall": str(folder / f"{name}.stall"),
            "freeze": str(folder / f"{name}.freeze"),
            "freeze_in_write": str(folder / f"{name}.freeze_in_write"),
        }
        proc = subprocess.Popen([sys.executable, str(self.script), json.dumps(cfg)])
        worker = Worker(name, folder, proc)
        self.workers[name] = worker
        wait_for(lambda: worker.member_id() is not None, 30, f"{name} did not start")
        return worker

    def state(self) -> dict[str, Any]:
        return self.store.load()

    def owners(self) -> dict[str, int]:
        """Per worker name, how many partitions the group state gives it."""
        ids = {w.member_id(): n for n, w in self.workers.items()}
        return dict(Counter(ids.get(m, m) for m in self.state()["owners"].values()))

    def produce(self, per_partition: int) -> None:
        app = self.manager.appender(LOG)
        for p in range(self.partitions):
            app.append_batch([(f"k{i}", b"x") for i in range(per_partition)], partition=p)

    def caught_up(self) -> bool:
        return self.manager.committed(LOG, GROUP) == self.manager.end_offsets(LOG)

    def close(self) -> None:
        for w in self.workers.values():
            if w.proc.poll() is None:
                w.proc.send_signal(signal.SIGCONT)
                w.proc.kill()
                w.proc.wait(30)


@pytest.fixture
def cluster_factory(tmp_path: Path) -> Iterator[Callable[..., Cluster]]:
    made: list[Cluster] = []

    def make(partitions: int = 4, delay: float = 0.0) -> Cluster:
        manager = LocalLogManager(
            tmp_path / "log", config=StreamcoreConfig(home=tmp_path, log=LogDefaults())
        )
        manager.create(LOG, partitions)
        cluster = Cluster(tmp_path, manager, partitions, delay)
        made.append(cluster)
        return cluster

    yield make
    for cluster in made:
        cluster.close()  # SIGCONT and kill every child, even when the test failed
        cluster.manager.close()


Event = tuple[float, str, str, list[int]]  # (time, member, kind, partitions or [partition, offset])


def exclusive_processing(events: list[Event], ends: list[int]) -> dict[tuple[int, int], list]:
    """Asserts that each record was processed by the member latest assigned its partition (and
    not revoked since) at that moment, and that every record was processed; returns, per record,
    who processed it and when."""
    timeline: dict[int, list[tuple[float, str, str]]] = defaultdict(list)
    recs: list[tuple[float, str, int, int]] = []
    for ts, member, kind, values in events:
        if kind in ("assigned", "revoked"):
            for p in values:
                timeline[p].append((ts, kind, member))
        elif kind == "rec":
            recs.append((ts, member, values[0], values[1]))
    for spans in timeline.values():
        spans.sort()
    processed: dict[tuple[int, int], list[tuple[str, float]]] = defaultdict(list)
    for ts, member, p, o in sorted(recs):
        holder = None
        for when, kind, who in timeline[p]:
            if when > ts:
                break
            if kind == "assigned":
                holder = who
            elif who == holder:
                holder = None
        assert holder == member, (
            f"{member} processed {p}:{o} at {ts:.3f} while {holder} was the latest member "
            f"assigned partition {p}"
        )
        processed[(p, o)].append((member, ts))
    missing = [(p, o) for p, end in enumerate(ends) for o in range(end) if (p, o) not in processed]
    assert not missing, f"{len(missing)} records never processed, e.g. {missing[:5]}"
    return processed


def worker_events(cluster: Cluster) -> list[Event]:
    out: list[Event] = []
    for name, worker in cluster.workers.items():
        for e in worker.events():
            if e[1] in ("assigned", "revoked"):
                out.append((float(e[0]), name, e[1], [int(p) for p in e[2].split(",")]))
            elif e[1] == "rec":
                out.append((float(e[0]), name, "rec", [int(e[2]), int(e[3])]))
    return out


def check_run(cluster: Cluster, disturbed: str, since: float) -> dict[str, int]:
    """The whole-run checks (module doc): duplicates only of records the disturbed member
    processed before `since`. Returns counts for the report."""
    processed = exclusive_processing(worker_events(cluster), cluster.manager.end_offsets(LOG))
    duplicated = 0
    for record, who in processed.items():
        if len(who) > 1:
            duplicated += len(who) - 1
            first, ts = min(who, key=lambda w: w[1])
            assert first == disturbed and ts <= since, f"{record} processed by {who}"
    return {"records": len(processed), "duplicated": duplicated}


def test_a_member_that_stops_reading_loses_its_partitions_after_max_poll_interval(
    cluster_factory: Callable[..., Cluster],
) -> None:
    cluster = cluster_factory(partitions=4)
    a = cluster.start("a")
    wait_for(lambda: cluster.owners() == {"a": 4}, 15, "a did not get every partition")
    cluster.start("b")
    wait_for(lambda: cluster.owners() == {"a": 2, "b": 2}, 15, "no 2/2 split")
    cluster.produce(50)
    wait_for(cluster.caught_up, 20, "the group did not catch up")

    a.trigger("stall").touch()  # a is stuck in processing: its heartbeat thread still runs
    wait_for(lambda: a.first("stalled") is not None, 10, "a did not stall")
    stalled = a.first("stalled")
    assert stalled is not None
    wait_for(
        lambda: cluster.owners() == {"b": 4}, MAX_POLL + SESSION + SLACK, "b did not take over"
    )
    took = time.time() - stalled
    assert took >= MAX_POLL - 0.2, f"a lost its partitions {took:.2f} s into its stall"
    cluster.produce(50)
    wait_for(cluster.caught_up, 20, "b did not process a's partitions")

    a.trigger("stall").unlink()  # a reads again: it is told it lost them, and rejoins
    wait_for(lambda: cluster.owners() == {"a": 2, "b": 2}, 15, "a did not rejoin")
    after = [e for e in a.events() if float(e[0]) >= stalled and e[1] in ("revoked", "assigned")]
    assert after[0][1] == "revoked" and len(after[0][2].split(",")) == 2, after
    cluster.produce(50)
    wait_for(cluster.caught_up, 20, "the group did not catch up")
    for w in cluster.workers.values():
        w.stop()
    counts = check_run(cluster, "a", stalled)
    assert counts["records"] == 600


@pytest.mark.parametrize("where", ["in_state_write", "while_reading"])
def test_a_frozen_member_does_not_stop_the_group(
    cluster_factory: Callable[..., Cluster], where: str
) -> None:
    """SIGSTOP in the middle of a group state write (where a lock would be held) or while
    reading with fetched records pending; the other member keeps beating and takes over; after
    SIGCONT the frozen one processes nothing of what it lost, and rejoins."""
    cluster = cluster_factory(partitions=4, delay=0.002)
    a = cluster.start("a")
    wait_for(lambda: cluster.owners() == {"a": 4}, 15, "a did not get every partition")
    b = cluster.start("b")
    wait_for(lambda: cluster.owners() == {"a": 2, "b": 2}, 15, "no 2/2 split")
    cluster.produce(300)
    wait_for(lambda: sum(e[1] == "rec" for e in a.events()) > 20, 15, "a processes nothing")

    a.trigger("freeze_in_write" if where == "in_state_write" else "freeze").touch()
    wait_for(a.frozen, 15, "a did not freeze")
    frozen_at = time.time()
    b_id = b.member_id()
    wait_for(lambda: cluster.owners() == {"b": 4}, SESSION + SLACK, "b did not take over")
    wait_for(
        lambda: time.time() - cluster.state()["members"][b_id]["heartbeat"] < 1.0,
        5,
        "b's heartbeat stopped",
    )
    wait_for(cluster.caught_up, 30, "b did not process a's partitions")
    assert a.frozen()

    a.proc.send_signal(signal.SIGCONT)
    wait_for(lambda: cluster.owners() == {"a": 2, "b": 2}, 15, "a did not rejoin")
    cluster.produce(50)
    wait_for(cluster.caught_up, 30, "the group did not catch up")
    for w in cluster.workers.values():
        w.stop()
    counts = check_run(cluster, "a", frozen_at)
    assert counts["records"] == 1400


# -- the group state deleted under live members (threads of one process) ------------------------
class Member(RebalanceListener):
    """A subscribed tailer read by its own thread; events stamped with time.monotonic()."""

    def __init__(self, manager: LocalLogManager, name: str, events: list[Event]) -> None:
        self.name = name
        self.events = events
        self.listened = 0.0  # when the listener last ran
        self.tailer = manager.subscribe(GROUP, [LOG], self)
        self.tailer.commit_interval = 0.1
        self.running = True
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def on_revoked(self, tailer: LogTailer, partitions: list[LogPartition]) -> None:
        self.listened = time.monotonic()
        self.events.append((self.listened, self.name, "revoked", [p.partition for p in partitions]))

    def on_assigned(self, tailer: LogTailer, partitions: list[LogPartition]) -> None:
        self.listened = time.monotonic()
        self.events.append(
            (self.listened, self.name, "assigned", [p.partition for p in partitions])
        )

    def _run(self) -> None:
        while self.running:
            called = time.monotonic()
            rec = self.tailer.read(0.02)
            if rec is not None:
                at = max(called, self.listened)
                self.events.append((at, self.name, "rec", [rec.partition.partition, rec.offset]))
                time.sleep(0.001)
                self.tailer.mark(rec)

    def held(self) -> int:
        return len(self.tailer.assignments)

    def stop(self) -> None:
        self.running = False
        self.thread.join(10)
        assert not self.thread.is_alive()
        self.tailer.close()


def delete_group_state(root: Path, how: str) -> None:
    """Delete the state files of GROUP on LOG (`files`) or the whole state (`folder`); the
    state is `<stem>.json` in one layout, files in a `<stem>/` folder in another."""
    folder = root / "_subscriptions"
    stem = state_stem(GROUP, [Name.of(LOG)])
    (folder / f"{stem}.json").unlink(missing_ok=True)
    if (folder / stem).is_dir():
        if how == "folder":
            shutil.rmtree(folder / stem)
        else:
            for path in (folder / stem).glob("*.json"):
                path.unlink()


@pytest.mark.parametrize("how", ["files", "folder"])
def test_deleting_the_group_state_keeps_ownership_exclusive(
    local_manager_factory: Callable[..., LocalLogManager], how: str
) -> None:
    manager = local_manager_factory()
    manager.heartbeat_interval, manager.session_timeout = HEARTBEAT, SESSION
    manager.create(LOG, 4)
    app = manager.appender(LOG)
    events: list[Event] = []
    members: list[Member] = []
    stop = threading.Event()

    def produce() -> None:
        while not stop.is_set():
            for p in range(4):
                app.append_batch([("k", b"x")] * 5, partition=p)
            time.sleep(0.02)

    producer = threading.Thread(target=produce, daemon=True)
    try:
        a = Member(manager, "a", events)
        members.append(a)
        producer.start()
        wait_for(lambda: a.held() == 4, 15, "a did not get every partition")
        wait_for(lambda: sum(e[2] == "rec" for e in events) > 100, 15, "a processes nothing")
        deleted = time.monotonic()
        delete_group_state(manager.root, how)
        b = Member(manager, "b", events)
        members.append(b)
        wait_for(lambda: a.held() == 2 and b.held() == 2, 15, "no 2/2 split after the reset")
        time.sleep(1.0)
        stop.set()
        producer.join(10)
        wait_for(
            lambda: manager.committed(LOG, GROUP) == manager.end_offsets(LOG),
            20,
            "the group did not catch up",
        )
    finally:
        stop.set()
        for m in members:
            m.stop()
    exclusive_processing(list(events), manager.end_offsets(LOG))
    # a was told: it lost every partition at the reset, before it got two of them back.
    after = [e for e in events if e[1] == "a" and e[0] >= deleted and e[2] != "rec"]
    assert after[0][2] == "revoked" and sorted(after[0][3]) == [0, 1, 2, 3], after


@pytest.mark.parametrize("backend", ["memory", "local"])
def test_max_poll_interval_on_both_cursor_backends(
    backend: str, local_manager_factory: Callable[..., LocalLogManager]
) -> None:
    """Members in threads: one stops reading; the other takes its partitions after
    max_poll_interval; the idle one, reading again, gets on_revoked and rejoins."""
    from streamcore.log.memory import MemoryLogManager

    manager: Any = MemoryLogManager() if backend == "memory" else local_manager_factory()
    manager.heartbeat_interval, manager.session_timeout = 0.1, 0.8
    manager.max_poll_interval = 0.6
    manager.create(LOG, 4)
    events: list[Event] = []
    a, b = Member(manager, "a", events), Member(manager, "b", events)
    try:
        wait_for(lambda: a.held() == 2 and b.held() == 2, 15, "no 2/2 split")
        held = sorted(p.partition for p in a.tailer.assignments)
        a.running = False  # a stops calling read(); its heartbeat thread goes on
        a.thread.join(10)
        idle = time.monotonic()
        wait_for(lambda: b.held() == 4, 0.6 + SLACK, "b did not take a's partitions")
        assert time.monotonic() - idle >= 0.5
        assert a.tailer.read(0.0) is None  # reading again: a drops what it lost...
        assert [e[2:] for e in events if e[1] == "a"][-1] == ("revoked", held)
        a.running = True
        a.thread = threading.Thread(target=a._run, daemon=True)
        a.thread.start()
        wait_for(lambda: a.held() == 2 and b.held() == 2, 15, "a did not rejoin")  # ...rejoins
    finally:
        a.stop()
        b.stop()
        if backend == "memory":
            manager.close()
