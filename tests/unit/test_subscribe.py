"""`LogManager.subscribe`: dynamic consumer groups with rebalance callbacks.

The first part runs on every backend of the `manager` fixture (members are tailers of one manager,
polled in turn from the test's thread). The second part covers what only the cursor backends
(memory, local) have: the group state, its compare-and-swap, session expiry. The last part checks
`group_members` on them and through the unified manager (Kafka's is in
tests/integration/test_kafka_subscribe.py). Real processes are in
tests/integration/test_local_groups.py."""

from __future__ import annotations

import gc
import json
import os
import socket
import threading
import time
import tomllib
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from streamcore.config import LogDefaults, StreamcoreConfig
from streamcore.errors import LogNotFoundError
from streamcore.log import (
    LiveMember,
    LogManager,
    LogPartition,
    LogRecord,
    LogTailer,
    RebalanceListener,
)
from streamcore.log.config import LogConfig
from streamcore.log.cursor.membership import GroupMember, held_tasks, surplus, targets
from streamcore.log.local.groups import FileGroupStore, state_stem
from streamcore.log.local.manager import LocalLogManager
from streamcore.log.memory import MemoryLogManager
from streamcore.log.memory.groups import MemoryGroupStore
from streamcore.log.unified import UnifiedLogManager
from streamcore.names import Name

NewLog = Callable[..., str]
GROUP = "test/members"
WAIT = 30.0  # generous: a broker's rebalance takes seconds, the cursor backends milliseconds


class Recorder(RebalanceListener):
    """Keeps every callback; optionally runs `on_revoke(tailer, partitions)` inside on_revoked."""

    def __init__(self, on_revoke: Callable[[LogTailer, list[LogPartition]], None] | None = None):
        self.events: list[tuple[str, list[LogPartition]]] = []
        self._on_revoke = on_revoke

    def on_revoked(self, tailer: LogTailer, partitions: list[LogPartition]) -> None:
        self.events.append(("revoked", list(partitions)))
        if self._on_revoke is not None:
            self._on_revoke(tailer, partitions)

    def on_assigned(self, tailer: LogTailer, partitions: list[LogPartition]) -> None:
        self.events.append(("assigned", list(partitions)))

    def held(self) -> set[LogPartition]:
        out: set[LogPartition] = set()
        for kind, parts in self.events:
            out = out | set(parts) if kind == "assigned" else out - set(parts)
        return out


class Member:
    """A subscribed tailer in mark mode and what it processed."""

    def __init__(self, manager: LogManager, names: list[str], **listener: Any) -> None:
        self.listener = Recorder(**listener)
        if hasattr(manager, "heartbeat_interval"):  # shorter sessions where the backend has them
            manager.heartbeat_interval, manager.session_timeout = 0.1, 0.8
        self.tailer = manager.subscribe(GROUP, names, self.listener)
        self.tailer.commit_interval = 3600  # commits happen on revoke and close only
        self.records: list[LogRecord] = []

    def poll(self, timeout: float = 0.01) -> None:
        rec = self.tailer.read(timeout)
        while rec is not None:
            self.records.append(rec)
            self.tailer.mark(rec)
            rec = self.tailer.read(0)

    def sizes(self) -> int:
        return len(self.tailer.assignments)


def poll_until(members: list[Member], done: Callable[[], bool], timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "condition not reached in time: " + ", ".join(
            f"{[str(p) for p in m.tailer.assignments]}" for m in members
        )
        for m in members:
            m.poll()


def fill(manager: LogManager, name: str, partitions: int, per_partition: int, start: int = 0):
    app = manager.appender(name)
    for p in range(partitions):
        items = [(f"k{i}", f"{p}-{i}".encode()) for i in range(start, start + per_partition)]
        app.append_batch(items, partition=p)


def processed(members: list[Member]) -> Counter:
    return Counter((r.partition, r.offset) for m in members for r in m.records)


def tasks_of(member: Member) -> set[int]:
    """The task numbers (partition numbers) `member` reads."""
    return {p.partition for p in member.tailer.assignments}


def whole_tasks(member: Member, names: list[str]) -> bool:
    """Whether `member` reads partition p of every log in `names` for each task p it has."""
    expected = {LogPartition.of(n, p) for n in names for p in tasks_of(member)}
    return set(member.tailer.assignments) == expected


def events_are_whole_tasks(member: Member, names: list[str]) -> bool:
    """Whether every partition set `member` was assigned or had revoked holds whole tasks."""
    for _, parts in member.listener.events:
        numbers = {p.partition for p in parts}
        if set(parts) != {LogPartition.of(n, p) for n in names for p in numbers}:
            return False
    return True


# -- every backend ------------------------------------------------------------------------------
def test_a_single_member_gets_every_partition_of_every_log(
    manager: LogManager, new_log: NewLog
) -> None:
    a, b = new_log(2), new_log(1)
    fill(manager, a, 2, 5)
    fill(manager, b, 1, 5)
    member = Member(manager, [a, b])
    everything = {LogPartition.of(a, 0), LogPartition.of(a, 1), LogPartition.of(b, 0)}
    poll_until([member], lambda: len(member.records) == 15)
    assert set(member.tailer.assignments) == everything
    assert member.listener.held() == everything
    assert member.listener.events[0][0] == "assigned"
    member.tailer.close()
    assert member.listener.events[-1] == ("revoked", member.listener.events[-1][1])
    assert member.listener.held() == set()
    assert manager.committed(a, GROUP) == [5, 5]
    assert manager.committed(b, GROUP) == [5]


def test_a_second_member_takes_half_of_the_partitions(manager: LogManager, new_log: NewLog) -> None:
    name = new_log(4)
    fill(manager, name, 4, 10)
    first = Member(manager, [name])
    poll_until([first], lambda: len(first.records) == 40)
    second = Member(manager, [name])
    poll_until([first, second], lambda: first.sizes() == 2 and second.sizes() == 2)
    assert not set(first.tailer.assignments) & set(second.tailer.assignments)
    # The partitions that moved were revoked from the first member, with its marks committed.
    # (The cursor backends revoke only those; a broker's eager rebalance may revoke all.)
    revoked = {p for kind, parts in first.listener.events if kind == "revoked" for p in parts}
    assert set(second.tailer.assignments) <= revoked
    for p in second.tailer.assignments:
        assert manager.committed(name, GROUP)[p.partition] == 10
    fill(manager, name, 4, 10, start=10)
    poll_until([first, second], lambda: len(first.records) + len(second.records) == 80)
    counts = processed([first, second])
    assert set(counts.values()) == {1}, "a record was processed twice"
    for r in second.records:
        assert r.partition in second.tailer.assignments and r.offset >= 10
    first.tailer.close()
    second.tailer.close()


def test_revoke_runs_the_listener_then_commits_the_marks(
    manager: LogManager, new_log: NewLog
) -> None:
    name = new_log(2)
    fill(manager, name, 2, 6)
    seen_in_callback: list[list[int | None]] = []

    def on_revoke(tailer: LogTailer, partitions: list[LogPartition]) -> None:
        seen_in_callback.append(manager.committed(name, GROUP))
        assert set(partitions) <= set(tailer.assignments)  # still assigned during the callback

    first = Member(manager, [name], on_revoke=on_revoke)
    poll_until([first], lambda: len(first.records) == 12)
    second = Member(manager, [name])
    poll_until([first, second], lambda: first.sizes() == 1 and second.sizes() == 1)
    moved = second.tailer.assignments[0].partition
    assert seen_in_callback[0][moved] is None  # marks are committed after the callback
    assert manager.committed(name, GROUP)[moved] == 6
    revoked = {p for kind, parts in first.listener.events if kind == "revoked" for p in parts}
    for p in set(first.tailer.assignments) - revoked:
        assert manager.committed(name, GROUP)[p.partition] is None  # no implicit commit
    first.tailer.close()
    second.tailer.close()


def test_a_closed_member_hands_its_partitions_over(manager: LogManager, new_log: NewLog) -> None:
    name = new_log(4)
    first, second = Member(manager, [name]), Member(manager, [name])
    poll_until([first, second], lambda: first.sizes() == 2 and second.sizes() == 2)
    fill(manager, name, 4, 8)
    poll_until([first, second], lambda: len(first.records) + len(second.records) == 32)
    first.tailer.close()
    assert first.listener.held() == set()
    fill(manager, name, 4, 8, start=8)
    poll_until([second], lambda: second.sizes() == 4 and len(second.records) == 16 + 32)
    counts = processed([first, second])
    assert len(counts) == 64 and set(counts.values()) == {1}
    second.tailer.close()
    assert manager.committed(name, GROUP) == [16, 16, 16, 16]


def test_three_members_share_four_partitions(manager: LogManager, new_log: NewLog) -> None:
    name = new_log(4)
    members = [Member(manager, [name]) for _ in range(3)]
    poll_until(members, lambda: sorted(m.sizes() for m in members) == [1, 1, 2])
    assigned = [p for m in members for p in m.tailer.assignments]
    assert sorted(assigned) == [LogPartition.of(name, p) for p in range(4)]
    for m in members:
        m.tailer.close()


def test_members_beyond_the_partition_count_stay_idle(manager: LogManager, new_log: NewLog) -> None:
    name = new_log(2)
    members = [Member(manager, [name]) for _ in range(3)]
    poll_until(members, lambda: sorted(m.sizes() for m in members) == [0, 1, 1])
    idle = next(m for m in members if m.sizes() == 0)
    busy = [m for m in members if m is not idle]
    busy[0].tailer.close()  # the idle member takes over
    poll_until([idle, busy[1]], lambda: idle.sizes() == 1 and busy[1].sizes() == 1)
    idle.tailer.close()
    busy[1].tailer.close()


def test_members_of_several_logs_get_whole_tasks_and_keep_them(
    manager: LogManager, new_log: NewLog, backend: str
) -> None:
    a, b = new_log(4), new_log(4)
    names = [a, b]
    fill(manager, a, 4, 5)
    fill(manager, b, 4, 5)
    first, second = Member(manager, names), Member(manager, names)
    members = [first, second]

    def shared(members: list[Member], sizes: list[int]) -> bool:
        """Every task to one member, whole, with these task counts."""
        held = [tasks_of(m) for m in members]
        return (
            sorted(map(len, held)) == sizes
            and set().union(*held) == {0, 1, 2, 3}
            and sum(map(len, held)) == 4
            and all(whole_tasks(m, names) for m in members)
        )

    poll_until(members, lambda: shared(members, [2, 2]))
    before = {id(m): tasks_of(m) for m in members}

    third = Member(manager, names)
    members.append(third)
    poll_until(members, lambda: shared(members, [1, 1, 2]))
    if backend != "kafka":  # Kafka's range assignor is eager: it may move any task
        # Sticky: the two first members kept tasks they had, and only the moved one was revoked.
        assert tasks_of(first) <= before[id(first)] and tasks_of(second) <= before[id(second)]
        moved = tasks_of(third)
        for m in (first, second):
            revoked = {p.partition for k, ps in m.listener.events if k == "revoked" for p in ps}
            assert revoked == moved & before[id(m)]

    gone = tasks_of(first)
    first.tailer.close()
    remaining = [second, third]
    kept = {id(m): tasks_of(m) for m in remaining}
    poll_until(remaining, lambda: shared(remaining, [2, 2]))
    if backend != "kafka":
        for m in remaining:
            assert kept[id(m)] <= tasks_of(m)  # the others kept theirs and took those that left
        assert set().union(*(tasks_of(m) - kept[id(m)] for m in remaining)) == gone
    for m in members:
        assert events_are_whole_tasks(m, names), m.listener.events
    poll_until(remaining, lambda: len(processed(members)) == 40)
    assert set(processed(members).values()) == {1}, "a record was processed twice"
    for m in remaining:
        m.tailer.close()


# -- the cursor backends (memory, local) ----------------------------------------------------------
def _local(tmp_path: Path) -> LocalLogManager:
    return LocalLogManager(tmp_path / "log", StreamcoreConfig(home=tmp_path, log=LogDefaults()))


@pytest.fixture(params=["memory", "local"])
def cursor_manager(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LogManager]:
    m = MemoryLogManager() if request.param == "memory" else _local(tmp_path)
    m.heartbeat_interval, m.session_timeout = 0.1, 0.8
    yield m
    m.close()


def test_an_expired_member_loses_its_partitions_without_committing(
    cursor_manager: LogManager,
) -> None:
    manager = cursor_manager
    manager.create("test/expiry", 4)
    first, second = Member(manager, ["test/expiry"]), Member(manager, ["test/expiry"])
    poll_until([first, second], lambda: first.sizes() == 2 and second.sizes() == 2)
    fill(manager, "test/expiry", 4, 5)
    poll_until([first, second], lambda: len(first.records) + len(second.records) == 20)
    # The second member stalls: no heartbeat, no read. Its session ends, the first takes over.
    second.tailer.member.stop()
    stalled = time.monotonic()
    poll_until([first], lambda: first.sizes() == 4, timeout=5.0)
    assert 0.5 < time.monotonic() - stalled < 3.0
    # It re-reads what the second processed but did not commit (at-least-once).
    redelivered = {(r.partition, r.offset) for r in second.records}
    poll_until([first], lambda: len(first.records) == 20, timeout=5.0)
    assert {(r.partition, r.offset) for r in first.records[10:]} == redelivered
    fill(manager, "test/expiry", 4, 5, start=5)
    poll_until([first], lambda: len(first.records) == 40, timeout=5.0)
    first.tailer.commit_marked()
    assert manager.committed("test/expiry", GROUP) == [10] * 4
    # When it wakes up, it must not commit the partitions it lost (that would move their
    # positions back to 5), and it drops them at its next read.
    lost = list(second.tailer.assignments)
    assert len(lost) == 2
    second.tailer.commit()
    second.tailer.commit_marked()
    assert manager.committed("test/expiry", GROUP) == [10] * 4
    second.poll()
    assert not set(second.tailer.assignments) & set(lost)
    assert ("revoked", lost) in second.listener.events
    second.tailer.close()
    first.tailer.close()
    assert manager.committed("test/expiry", GROUP) == [10] * 4


def test_the_group_state_file(tmp_path: Path) -> None:
    manager = _local(tmp_path)
    manager.create("test/state", 3)
    member = Member(manager, ["test/state"])
    member.poll()
    folder = manager.root / "_subscriptions" / state_stem(GROUP, [Name.of("test/state")])
    assert folder.name == "test-members@test-state"

    def newest() -> dict[str, Any]:  # one file per version: <version>.json
        version = max(int(p.stem) for p in folder.glob("*.json"))
        return json.loads((folder / f"{version}.json").read_text())

    state = newest()
    me = member.tailer.member.id
    assert state["group"] == GROUP and state["logs"] == ["test/state"]
    assert list(state["members"]) == [me]
    assert state["members"][me]["session_timeout"] == 0.8
    assert state["owners"] == {f"test-state-0{p}": me for p in range(3)}
    version = state["version"]
    time.sleep(0.35)  # heartbeats bump the version
    assert newest()["version"] > version
    member.tailer.close()
    state = newest()
    assert state["members"] == {} and state["owners"] == {}
    assert manager.list_logs() == [Name.of("test/state")]
    manager.close()


def test_subscribe_to_a_missing_log_raises(cursor_manager: LogManager) -> None:
    with pytest.raises(LogNotFoundError):
        cursor_manager.subscribe(GROUP, ["test/missing"])


def test_a_dropped_tailer_stops_its_heartbeat(cursor_manager: LogManager) -> None:
    cursor_manager.create("test/dropped", 1)
    tailer = cursor_manager.subscribe(GROUP, ["test/dropped"])
    member = tailer.member
    del tailer
    gc.collect()
    assert member._stop.is_set()


@pytest.mark.parametrize("store_kind", ["file", "memory"])
def test_compare_and_swap_loses_no_update(store_kind: str, tmp_path: Path) -> None:
    names = [Name.of("test/cas")]
    if store_kind == "file":
        store: Any = FileGroupStore(tmp_path, GROUP, names)
    else:
        store = MemoryGroupStore(GROUP, ["test/cas"])
    threads, increments = 6, 40

    def work() -> None:
        member = GroupMember(store, ["test-cas-00"], heartbeat_interval=1, session_timeout=5)

        def bump(state: dict[str, Any]) -> bool:
            state["counter"] = state.get("counter", 0) + 1
            return True

        for _ in range(increments):
            member.update(bump)

    pool = [threading.Thread(target=work) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    state = store.load()
    assert state["counter"] == threads * increments
    assert state["version"] == threads * increments


def test_fair_share_targets() -> None:
    def state(n: int) -> dict[str, Any]:
        members = {f"m{i}": {"seq": n - i} for i in range(n)}  # m{n-1} joined first
        return {"members": members}

    assert targets(state(1), 4) == {"m0": 4}
    assert targets(state(2), 4) == {"m1": 2, "m0": 2}
    assert targets(state(3), 4) == {"m2": 2, "m1": 1, "m0": 1}  # the oldest gets the ceiling
    assert targets(state(3), 2) == {"m2": 1, "m1": 1, "m0": 0}
    assert targets({"members": {}}, 4) == {}
    assert sum(targets(state(7), 30).values()) == 30


def test_members_of_names_in_any_order_join_one_group_by_task(cursor_manager: LogManager) -> None:
    manager = cursor_manager
    manager.create("test/x", 4)
    manager.create("test/y", 4)
    members = [Member(manager, ["test/x", "test/y"]) for _ in range(2)]
    poll_until(members, lambda: [m.sizes() for m in members] == [4, 4])
    # Names in any order make the same group state: a member of ["y", "x"] joins the same group.
    third = Member(manager, ["test/y", "test/x"])
    members.append(third)
    poll_until(members, lambda: sorted(m.sizes() for m in members) == [2, 2, 4])
    owners: dict[LogPartition, int] = defaultdict(int)
    for m in members:
        assert whole_tasks(m, ["test/x", "test/y"])
        for p in m.tailer.assignments:
            owners[p] += 1
    assert len(owners) == 8 and set(owners.values()) == {1}
    for m in members:
        m.tailer.close()


def test_surplus_gives_up_whole_tasks_unread_ones_first() -> None:
    tasks = [(f"x-0{p}", f"y-0{p}") for p in range(4)]
    state = {"owners": {key: "m" for task in tasks for key in task}}
    # Two tasks too many: the one not read yet (2), then the highest read one (3).
    read = {"x-00", "y-00", "x-01", "y-01", "x-03", "y-03"}
    assert surplus(state, "m", tasks, 2, read) == ["x-02", "y-02", "x-03", "y-03"]
    assert surplus(state, "m", tasks, 4, read) == []
    assert held_tasks(state, "m", tasks) == tasks


def test_a_task_split_between_members_is_completed_by_the_owner_of_its_first_partition() -> None:
    # A member of a version that assigned single partitions holds y-00 of task 0.
    tasks = [("x-00", "y-00"), ("x-01", "y-01")]
    state = {"owners": {"x-00": "a", "y-00": "b", "x-01": "b", "y-01": "b"}}
    assert surplus(state, "b", tasks, 1, set()) == ["y-00"]  # b gives its part of task 0 up
    assert surplus(state, "a", tasks, 1, set()) == []  # a keeps it, and claims y-00 once free


def test_a_writer_resuming_after_its_version_was_collected_loses_the_swap(tmp_path: Path) -> None:
    """A writer paused between reading version 1 and linking version 2, while others wrote on
    and old versions were deleted, must not believe its write went in."""
    store = FileGroupStore(tmp_path, GROUP, [Name.of("test/cas")])
    member = GroupMember(store, ["test-cas-00"], heartbeat_interval=1, session_timeout=5)

    def bump(state: dict[str, Any]) -> bool:
        state["counter"] = state.get("counter", 0) + 1
        return True

    member.update(bump)
    paused = store.load()  # version 1
    for _ in range(40):
        member.update(bump)
    for path in store.folder.glob("*.json"):
        os.utime(path, (time.time() - 3600, time.time() - 3600))
    member.update(bump)  # collects the old versions, 2.json among them
    assert not (store.folder / "2.json").exists()
    paused["counter"] = -1
    assert store.swap(paused, 1) is False
    assert store.load()["counter"] == store.load()["version"] == 42


# -- group_members: who is live in a group (cursor backends; Kafka in test_kafka_subscribe.py) ---
def test_a_subscribed_tailer_is_the_one_live_member(cursor_manager: LogManager) -> None:
    manager = cursor_manager
    manager.create("test/live", 2)
    assert manager.group_members(GROUP) == []
    tailer = manager.subscribe(GROUP, ["test/live"])
    assert manager.group_members(GROUP) == [
        LiveMember(tailer.member.id, socket.gethostname(), ("test/live",))
    ]
    # A static-assignment tailer has no session: its group has no member.
    static = manager.tailer("test/static", "test/live")
    assert manager.group_members("test/static") == []
    static.close()
    tailer.close()


def test_every_subscriber_of_every_log_set_is_a_member(cursor_manager: LogManager) -> None:
    manager = cursor_manager
    manager.create("test/one", 2)
    manager.create("test/two", 1)
    first = manager.subscribe(GROUP, ["test/one"])
    second = manager.subscribe(GROUP, ["test/one"])
    # The same group on another set of logs has its own state (another folder on the local log).
    third = manager.subscribe(GROUP, ["test/two", "test/one"])
    other = manager.subscribe("test/other", ["test/one"])
    members = manager.group_members(GROUP)
    assert [m.member_id for m in members] == sorted(t.member.id for t in (first, second, third))
    logs = {m.member_id: m.logs for m in members}
    assert logs[first.member.id] == logs[second.member.id] == ("test/one",)
    assert logs[third.member.id] == ("test/one", "test/two")
    assert [m.member_id for m in manager.group_members("test/other")] == [other.member.id]
    for tailer in (first, second, third, other):
        tailer.close()
    assert manager.group_members(GROUP) == []
    assert manager.group_members("test/other") == []


def test_a_member_without_heartbeat_is_not_live_and_its_state_is_left_alone(
    cursor_manager: LogManager,
) -> None:
    manager = cursor_manager
    manager.create("test/stale", 1)
    live = manager.subscribe(GROUP, ["test/stale"])
    stalled = manager.subscribe(GROUP, ["test/stale"])
    assert len(manager.group_members(GROUP)) == 2
    stalled.member.stop()
    live.member.stop()  # so that no member expires it from the state either
    time.sleep(0.8 + 0.3)  # the fixture's session timeout, and some
    assert manager.group_members(GROUP) == []
    # Read only: the expired members are still registered; only the members themselves tidy.
    assert set(stalled.member.store.load()["members"]) == {live.member.id, stalled.member.id}
    live.member.refresh()  # one heartbeat: live again (and it expires the stalled one)
    assert [m.member_id for m in manager.group_members(GROUP)] == [live.member.id]
    live.close()
    stalled.close()


def test_local_members_seen_from_another_manager_and_old_heartbeats(tmp_path: Path) -> None:
    """Another manager on the same folder (another process) sees the members; a state written
    with an old heartbeat (a killed process nobody expired yet) has none; asking writes nothing."""
    fresh = _local(tmp_path / "fresh")
    assert fresh.group_members(GROUP) == []
    assert not (fresh.root / "_subscriptions").exists()
    fresh.close()
    manager, observer = _local(tmp_path), _local(tmp_path)
    manager.create("test/seen", 1)
    member = Member(manager, ["test/seen"])
    assert [m.member_id for m in observer.group_members(GROUP)] == [member.tailer.member.id]
    assert observer.group_members(GROUP)[0].logs == ("test/seen",)
    # A dead member in the state of another set of logs: a heartbeat a minute old.
    store = FileGroupStore(manager.root, GROUP, [Name.of("test/dead")])
    state = store.load()
    now = time.time()
    for mid, beat in (("dead", now - 60), ("recent", now - 0.2)):
        state["members"][mid] = {
            "seq": len(state["members"]) + 1,
            "heartbeat": beat,
            "session_timeout": 10.0,
            "host": "elsewhere",
            "pid": 1,
        }
    assert store.swap(state, state["version"])
    folder = store.folder
    files = sorted(p.name for p in folder.iterdir())
    members = observer.group_members(GROUP)
    assert {m.member_id: (m.host, m.logs) for m in members} == {
        member.tailer.member.id: (socket.gethostname(), ("test/seen",)),
        "recent": ("elsewhere", ("test/dead",)),
    }
    assert sorted(p.name for p in folder.iterdir()) == files
    member.tailer.close()
    assert [m.member_id for m in observer.group_members(GROUP)] == ["recent"]
    manager.close()
    observer.close()


def test_unified_members_are_the_union_of_its_backends(tmp_path: Path) -> None:
    text = '[log.configs.mem]\ntype = "memory"\n[[log.match]]\nnamespace = "fast"\nconfig = "mem"\n'
    config = StreamcoreConfig(home=tmp_path, log=LogDefaults(), table=tomllib.loads(text))
    unified = UnifiedLogManager(config, LogConfig.from_settings(config, environ={}))
    unified.create("test/slow", 1)
    unified.create("fast/quick", 1)
    on_disk = unified.subscribe(GROUP, ["test/slow"])
    in_memory = unified.subscribe(GROUP, ["fast/quick"])
    assert isinstance(unified.backend_for("fast/quick"), MemoryLogManager)
    host = socket.gethostname()
    expected = [
        LiveMember(on_disk.member.id, host, ("test/slow",)),
        LiveMember(in_memory.member.id, host, ("fast/quick",)),
    ]
    assert unified.group_members(GROUP) == sorted(expected, key=lambda m: m.member_id)
    on_disk.close()
    in_memory.close()
    assert unified.group_members(GROUP) == []
    unified.close()
