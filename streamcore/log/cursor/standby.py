"""Standby replicas in the cursor groups' state (Kafka Streams' `num.standby.replicas`): where a
task's warm copies are kept, and which free task is kept for the member that holds it warm.

The group protocol (`streamcore.log.cursor.membership`) stores, per member, its `location` (where
its state lives: two members of one location share the same store files, so a copy there is no
copy), the number of standby replicas it asks for (`standby`), and the tasks it holds **warm**
(`warm`: a copy caught up with the task's changelog, as its processor reports). From that state
every member computes the same answers:

- **Placement** (`standby_placement`). Each owned task gets up to R copies (R: the largest
  `standby` of the live members), on members of R distinct locations other than its owner's,
  taken in join order rotated by the task number, so that one member's tasks spread their
  copies over the others. A member keeps a copy of the tasks placed on it, plus the free tasks
  it holds warm: a task is free exactly when its owner died, which is when its copy matters.
- **Preference** (`reserved`). A free task that a live member holds warm, while that member has
  room under its fair share, is left to that member: the others do not claim it, and that member
  claims it first. So when an owner dies, its tasks go to their warm copies and the new owner's
  restore reads only the changelog's tail. A warm member that does not claim (its reads are
  stuck) keeps the task until its own session or max poll interval ends it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["held_counts", "reserved", "standby_placement", "warm_tasks"]


def _order(state: dict[str, Any]) -> list[str]:
    return [
        mid for mid, _ in sorted(state["members"].items(), key=lambda kv: (kv[1]["seq"], kv[0]))
    ]


def _location(state: dict[str, Any], member: str) -> str:
    return str(state["members"][member].get("location") or member)


def standby_placement(state: dict[str, Any], tasks: Sequence[Sequence[str]]) -> dict[str, set[int]]:
    """Task indexes whose copy each member keeps, by the rule of the module doc (owned tasks
    only: a free task stays with those that hold it warm, see `warm_tasks`)."""
    members = state["members"]
    replicas = max((int(info.get("standby", 0)) for info in members.values()), default=0)
    order = _order(state)
    placed: dict[str, set[int]] = {mid: set() for mid in order}
    if replicas <= 0 or len(order) < 2:
        return placed
    owners = state["owners"]
    for index, task in enumerate(tasks):
        owner = owners.get(task[0])
        if owner not in members:
            continue
        taken = {_location(state, owner)}
        first = (order.index(owner) + 1 + index) % len(order)
        for mid in order[first:] + order[:first]:
            location = _location(state, mid)
            if mid == owner or location in taken:
                continue
            placed[mid].add(index)
            taken.add(location)
            if len(taken) > replicas:
                break
    return placed


def warm_tasks(state: dict[str, Any], member: str) -> set[int]:
    """The task indexes `member` reports warm in `state`."""
    info = state["members"].get(member)
    return set() if info is None else {int(i) for i in info.get("warm", ())}


def held_counts(state: dict[str, Any], tasks: Sequence[Sequence[str]]) -> dict[str, int]:
    """How many tasks each member owns (by the owner of a task's first partition)."""
    counts = dict.fromkeys(state["members"], 0)
    owners = state["owners"]
    for task in tasks:
        owner = owners.get(task[0])
        if owner in counts:
            counts[owner] += 1
    return counts


def reserved(
    state: dict[str, Any],
    member: str,
    tasks: Sequence[Sequence[str]],
    targets: dict[str, int],
) -> set[int]:
    """Indexes of the free tasks `member` must leave to another member that holds them warm and
    has room under its target (`targets`), unless `member` holds them warm too."""
    mine = warm_tasks(state, member)
    owners = state["owners"]
    counts = held_counts(state, tasks)
    # Warm tasks of the other members with room under their target: theirs to claim.
    theirs = set().union(
        *(
            warm_tasks(state, mid)
            for mid in state["members"]
            if mid != member and counts[mid] < targets.get(mid, 0)
        )
    )
    return {
        index
        for index, task in enumerate(tasks)
        if index in theirs and index not in mine and not any(key in owners for key in task)
    }
