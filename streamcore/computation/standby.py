"""`StandbyTasks`: the warm copies a unit keeps of tasks it does not own (standby replicas, Kafka
Streams' `num.standby.replicas`; docs/state.md, "Standby replicas").

The group decides which tasks a member keeps a copy of (`streamcore.log.cursor.standby`). A
thread of the unit, beside its processing thread, asks the tailer for that list about every
`interval` seconds and brings each copy up to its changelog's end with
`streamcore.state.restore.follow`: the same read loop as a restore, holding back the records of
inputs not committed yet, and never writing to the changelog. A task whose every store reached
the end it saw is **warm**; the tailer publishes the warm tasks to the group, which leaves a
dead owner's task to its warm copy. When the unit is given a task, `take` stops following it
and hands its open engines to the restore (`TaskStores.assign`), which then reads only the
changelog's tail.

A copy lives in the unit's state directory, at the path the task's own stores would use, so the
group places copies only on members of another location (`location`): a member of the owner's
location would share the owner's files (and their lock)."""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Protocol

from streamcore.errors import RestoreAbandonedError, StateError
from streamcore.log import LogManager, LogPartition
from streamcore.log.capabilities import GroupRouting, StandbyGroups, standby_groups_of
from streamcore.state.engine import StoreEngine
from streamcore.state.restore import RestoreProgress, follow

if TYPE_CHECKING:
    from streamcore.computation.task_stores import TaskStores

__all__ = ["StandbyTailer", "StandbyTasks", "location", "standby_groups"]

logger = logging.getLogger(__name__)


class StandbyTailer(Protocol):
    """What `StandbyTasks` needs of its unit's tailer (a `SubscribedTailer`)."""

    def standby_tasks(self) -> list[int]: ...

    def owned_tasks(self) -> set[int]: ...

    def set_warm(self, tasks: set[int]) -> None: ...


def standby_groups(manager: LogManager, group: str, inputs: Iterable[str]) -> StandbyGroups:
    """`manager` as the `StandbyGroups` that `group` subscribes through; raises
    `UnsupportedOperationError` (`standby_groups_of`'s) when the backend of its inputs has none,
    which a routing manager would only say at the first subscribe."""
    if isinstance(manager, GroupRouting):
        for name in inputs:
            standby_groups_of(manager.backend_for(name, group))
    return standby_groups_of(manager)


def location(stores: TaskStores) -> str:
    """Where the unit's stores live: its host and state directory, or the unit itself when its
    stores are in memory (no other member shares them)."""
    if stores.state_dir is None or stores.engine == "memory":
        return f"{socket.gethostname()}:memory:{os.getpid()}:{id(stores)}"
    return f"{socket.gethostname()}:{os.path.realpath(stores.state_dir)}"


class StandbyTasks:
    """The standby copies of one unit (see the module doc)."""

    def __init__(self, stores: TaskStores, tailer: StandbyTailer, interval: float = 0.5) -> None:
        self.stores = stores
        self.tailer = tailer
        self.interval = interval
        self.copies: dict[int, dict[str, StoreEngine]] = {}  # task -> store -> open engine
        self.warm: set[int] = set()
        # The last pass of each (task, store): its position and the changelog end it saw.
        self.progress: dict[tuple[int, str], RestoreProgress] = {}
        self._taking: set[int] = set()  # tasks `take` waits for: their pass stops early
        self._lock = threading.Lock()  # held by a pass; `take` and `close` wait for it
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"streamcore-standby-{stores.computation}", daemon=True
        )
        self._thread.start()

    def take(self, task: int) -> dict[str, StoreEngine]:
        """Stop keeping `task` and hand over its open engines (empty if there is no copy)."""
        self._taking.add(task)
        try:
            with self._lock:
                engines = self.copies.pop(task, {})
                self._forget(task)
        finally:
            self._taking.discard(task)
        if engines:
            logger.info(
                "computation %s: task %d taken over from its standby copy",
                self.stores.computation,
                task,
            )
        return engines

    def close(self) -> None:
        """Stop the thread and close every copy (they stay on disk for a later pass)."""
        self._stop.set()
        self._thread.join()
        with self._lock:
            for task in list(self.copies):
                self._drop(task)

    # -- the thread -----------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self._pass()
            except Exception:  # a copy is an optimisation: keep trying, the owner is unaffected
                logger.exception(
                    "standby copies of computation %s: pass failed; retrying",
                    self.stores.computation,
                )

    def _pass(self) -> None:
        wanted = set(self.tailer.standby_tasks())
        keep = wanted | self.tailer.owned_tasks()  # owned, not taken yet: `take` will want it
        with self._lock:
            for task in [t for t in self.copies if t not in keep]:
                self._drop(task)
        for task in sorted(wanted):
            if self._stop.is_set():
                return
            with self._lock:
                # Claimed since `wanted` was read: the unit opens it, the copy must not.
                if task in self._taking or task in self.stores.tasks:
                    continue
                if task in self.tailer.owned_tasks():
                    continue
                if self._follow(task):
                    self.warm.add(task)
        self.tailer.set_warm(set(self.warm))

    def _follow(self, task: int) -> bool:
        """One pass over the stores of `task`; True when every one reached its end."""
        stores = self.stores
        engines = self.copies.get(task)
        if engines is None:
            engines = {}
            try:
                for name, spec in stores.specs.items():
                    # No wait for a lock: its holder is the task's owner, and a copy can wait.
                    engines[name] = stores.open_engine(task, spec, lock_timeout=0.0)
            except StateError as exc:  # e.g. its files still locked by a closing owner
                for engine in engines.values():
                    engine.close()
                logger.info(
                    "computation %s: no standby copy of task %d yet: %s",
                    stores.computation,
                    task,
                    exc,
                )
                return False
            self.copies[task] = engines
        committed: Mapping[LogPartition, int] = stores.committed(task)
        for name, engine in engines.items():
            changelog = LogPartition.of(stores.changelogs[name], task)
            progress = self.progress[task, name] = RestoreProgress(changelog, name)
            try:
                follow(
                    stores.manager,
                    changelog,
                    name,
                    engine,
                    committed,
                    settings=stores.restore_settings,
                    keep_going=lambda: task not in self._taking and not self._stop.is_set(),
                    progress=progress,
                )
            except RestoreAbandonedError:
                return False
        return True

    def _drop(self, task: int) -> None:
        for engine in self.copies.pop(task, {}).values():
            engine.close()
        self._forget(task)

    def _forget(self, task: int) -> None:
        self.warm.discard(task)
        for key in [k for k in self.progress if k[0] == task]:
            del self.progress[key]
