"""Standby replicas in the cursor groups (streamcore.log.cursor.standby): where copies are
placed, and a dead owner's task left to the member that holds it warm."""

from __future__ import annotations

from typing import Any

import pytest

from streamcore.errors import ConfigError, UnsupportedOperationError
from streamcore.log.capabilities import StandbyGroups, standby_groups_of
from streamcore.log.cursor.membership import GroupMember, owned_by
from streamcore.log.cursor.standby import reserved, standby_placement
from streamcore.log.memory import MemoryLogManager
from streamcore.log.memory.groups import MemoryGroupStore

GROUP = "test/standby"


def state(owners: dict[str, str], locations: dict[str, str], standby: int = 1) -> dict[str, Any]:
    """Members in the order of `locations` (seq), each with that location."""
    members = {
        mid: {"seq": seq, "location": loc, "standby": standby, "warm": []}
        for seq, (mid, loc) in enumerate(locations.items())
    }
    return {"members": members, "owners": owners}


TASKS = [(f"t-0{p}",) for p in range(4)]


def test_each_task_gets_its_copies_on_other_locations_spread_over_the_members() -> None:
    owners = {"t-00": "a", "t-01": "a", "t-02": "b", "t-03": "c"}
    placed = standby_placement(state(owners, {"a": "h1", "b": "h2", "c": "h3"}), TASKS)
    copies = {i: {m for m, tasks in placed.items() if i in tasks} for i in range(4)}
    assert all(len(holders) == 1 for holders in copies.values())
    assert all(owners[f"t-0{i}"] not in holders for i, holders in copies.items())
    # A's two tasks do not both go to the same member: rotated by the task number.
    assert copies[0] != copies[1]

    two = standby_placement(state(owners, {"a": "h1", "b": "h2", "c": "h3"}, standby=2), TASKS)
    assert all(sum(i in tasks for tasks in two.values()) == 2 for i in range(4))


def test_no_copy_on_the_owners_location_nor_two_on_one_location() -> None:
    owners = {key: "a" for (key,) in TASKS}
    # b shares a's state folder (a second unit of the same process): a copy there is no copy;
    # c and d share one location: one copy per location.
    locations = {"a": "h1", "b": "h1", "c": "h2", "d": "h2"}
    placed = standby_placement(state(owners, locations, standby=3), TASKS)
    assert placed["a"] == placed["b"] == set()
    assert all((i in placed["c"]) != (i in placed["d"]) for i in range(4))
    assert standby_placement(state(owners, locations, standby=0), TASKS) == {
        m: set() for m in locations
    }


def test_a_free_task_is_left_to_the_member_holding_it_warm_while_it_has_room() -> None:
    current = state({"t-02": "b", "t-03": "c"}, {"b": "h2", "c": "h3"})
    current["members"]["b"]["warm"] = [0]
    targets = {"b": 2, "c": 2}
    assert reserved(current, "c", TASKS, targets) == {0}  # c leaves task 0 to b
    assert reserved(current, "b", TASKS, targets) == set()
    # b has no room: c may take it (a restore beats a task nobody processes).
    assert reserved(current, "c", TASKS, {"b": 1, "c": 3}) == set()
    # Both hold it warm: whoever claims first.
    current["members"]["c"]["warm"] = [0]
    assert reserved(current, "c", TASKS, targets) == set()


def member(store: MemoryGroupStore, name: str, location: str) -> GroupMember:
    return GroupMember(
        store,
        [key for (key,) in TASKS],
        member_id=name,
        heartbeat_interval=1,
        session_timeout=5,
        standby_replicas=1,
        location=location,
    )


def test_when_an_owner_dies_its_tasks_go_to_their_warm_copies() -> None:
    store = MemoryGroupStore(GROUP, ["test/in"])
    a, b, c = (member(store, n, f"host-{n}") for n in "abc")
    for m in (a, b, c):
        m.refresh()
    for m in (a, b, c):
        m.claim()
    assert [len(owned_by(store.load(), m)) for m in "abc"] == [2, 1, 1]
    a_tasks = sorted(int(k[-1]) for k in owned_by(store.load(), "a"))
    # Each of b and c keeps a copy of one of a's tasks, and says it is warm.
    b_copies = set(b.standby_tasks(store.load())) & set(a_tasks)
    c_copies = set(c.standby_tasks(store.load())) & set(a_tasks)
    assert len(b_copies) == len(c_copies) == 1 and b_copies != c_copies
    b.warm, c.warm = frozenset(b_copies), frozenset(c_copies)

    def kill_a(current: dict[str, Any]) -> bool:
        current["members"]["a"]["heartbeat"] = 0.0  # its session ended long ago
        return True

    a.update(kill_a)
    # c claims first: it takes only the task it holds warm, not the first free one.
    c.claim()
    b.claim()
    after = store.load()
    assert "a" not in after["members"]
    assert {int(k[-1]) for k in owned_by(after, "c")} >= c_copies
    assert {int(k[-1]) for k in owned_by(after, "b")} >= b_copies
    assert len(after["owners"]) == 4
    # The warm tasks are no longer free: nobody keeps a copy of a task because it once was.
    assert not set(b.standby_tasks(after)) & b_copies


def test_standby_replicas_are_checked() -> None:
    with pytest.raises(ConfigError, match="standby_replicas must be 0 or more"):
        GroupMember(MemoryGroupStore(GROUP, ["test/in"]), ["t-00"], standby_replicas=-1)


def test_the_cursor_logs_have_standby_groups_and_others_say_why_not() -> None:
    assert isinstance(MemoryLogManager(), StandbyGroups)

    class NoGroups:
        pass

    with pytest.raises(UnsupportedOperationError, match="cannot keep standby replicas"):
        standby_groups_of(NoGroups())
