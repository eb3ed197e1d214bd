"""`TaskStores`: the state stores of one concurrency unit, per task it owns (docs/state.md).

A task is a partition number of the computation's inputs (task *p* reads partition *p* of every
input). When the unit's group assigns it partitions, the stores of their tasks are opened and
restored from their changelogs before any record of them is processed (on the tailer's thread,
inside the assignment callback); when partitions are revoked, the unit rewinds to its last
checkpoint, so every store drops its buffered writes and the stores of the tasks that left are
closed at once (releasing their lock for the new owner).

At each checkpoint, after the outputs are appended and before the inputs are committed, every
store with buffered writes appends them to its changelog (with the input positions about to be
committed) and writes them to its engine together with the changelog position, in one atomic
write: the checkpoint order of docs/state.md, "Checkpoints".
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streamcore.computation.dsl_values import resolve_value_codec
from streamcore.config import load_config
from streamcore.errors import TopologyError
from streamcore.log import LogAppender, LogManager, LogPartition
from streamcore.log.capabilities import writer_locks_of
from streamcore.names import Name
from streamcore.state.changelog import ChangelogWriter, changelog_name
from streamcore.state.engine import StoreEngine
from streamcore.state.engines import open_engine
from streamcore.state.restore import (
    RestoreProgress,
    RestoreSettings,
    StateRestoreListener,
    restore,
)
from streamcore.state.spec import StoreSpec
from streamcore.state.store import KeyValueStore

if TYPE_CHECKING:
    from streamcore.computation.settings import Settings
    from streamcore.computation.standby import StandbyTasks
    from streamcore.computation.topology import Topology

__all__ = ["TaskStores", "task_stores"]

logger = logging.getLogger(__name__)


def task_stores(
    computation: str,
    topology: Topology,
    manager: LogManager,
    settings: Settings,
    *,
    keep_going: Callable[[], bool] = lambda: True,
    listener: StateRestoreListener | None = None,
    changelog_appender: Callable[[str], LogAppender[Any]] | None = None,
) -> TaskStores:
    """The `TaskStores` of one unit of `computation`, with the settings' state directory, engine
    and lock timeout, or the configuration's (`[state]`, docs/configuration.md)."""
    engine, lock_timeout = settings.state_engine, settings.state_lock_timeout
    state_dir = None if settings.state_dir is None else Path(settings.state_dir)
    if engine is None or lock_timeout is None or state_dir is None:
        config = load_config()
        engine = engine or config.state_engine
        lock_timeout = config.state_lock_timeout if lock_timeout is None else lock_timeout
        state_dir = state_dir or config.home / "state"
    return TaskStores(
        computation,
        topology.stores(computation),
        topology.input_streams(computation),
        manager,
        computation,
        state_dir=state_dir,
        default_engine=engine,
        lock_timeout=lock_timeout,
        restore_settings=settings.restore,
        listener=listener,
        keep_going=keep_going,
        changelog_appender=changelog_appender,
    )


class TaskStores:
    """The stores of one unit of computation `computation`, keyed by task then store name."""

    def __init__(
        self,
        computation: str,
        specs: Sequence[StoreSpec],
        inputs: Sequence[str],
        manager: LogManager,
        group: str,
        *,
        state_dir: Path | None,
        default_engine: str,
        lock_timeout: float,
        restore_settings: RestoreSettings,
        listener: StateRestoreListener | None = None,
        keep_going: Callable[[], bool] = lambda: True,
        engine: str | None = None,
        changelog_appender: Callable[[str], LogAppender[Any]] | None = None,
    ) -> None:
        self.computation = computation
        self.engine = engine  # every store on this engine (the test driver's "memory")
        self.specs = {spec.name: spec for spec in specs}
        self.inputs = [Name.of(s).urn for s in inputs]
        self.manager = manager
        self.group = group
        self.state_dir = state_dir
        self.default_engine = default_engine
        self.lock_timeout = lock_timeout
        self.restore_settings = restore_settings
        self.listener = listener
        self.keep_going = keep_going
        self.codecs = {
            spec.name: resolve_value_codec(
                spec.codec, spec.schema, where=f"state store {spec.name!r} of {computation}"
            )
            for spec in specs
        }
        self.changelogs = {spec.name: changelog_name(computation, spec.name) for spec in specs}
        self._writers: dict[str, ChangelogWriter] = {}
        # Exactly-once: the checkpoints append through the unit's transaction (the restore's
        # compensations, outside any checkpoint, through the manager's appender).
        self.changelog_appender = changelog_appender
        self._checkpoint_writers: dict[str, ChangelogWriter] = {}
        self.tasks: dict[int, dict[str, KeyValueStore[Any]]] = {}
        # The last restore of each (task, store) of this unit, read by the metrics collector.
        self.restores: dict[tuple[int, str], RestoreProgress] = {}
        self._positions: dict[LogPartition, int] = {}  # committed input positions, per partition
        # The runner's journal of what the current record did: store writes join it, so a
        # failed attempt's writes are undone with its outputs before the retry.
        self.journal: list[Any] | None = None
        # Warm copies of tasks this unit does not own; a task given to it is taken from there.
        self.standby: StandbyTasks | None = None

    # -- tasks ----------------------------------------------------------------------------------
    def task_partitions(self, task: int) -> list[LogPartition]:
        """The input partitions of `task`: partition `task` of every input."""
        return [LogPartition.of(stream, task) for stream in self.inputs]

    def assign(self, tasks: Iterable[int]) -> None:
        """Open and restore the stores of the tasks not open yet."""
        for task in sorted(set(tasks) - set(self.tasks)):
            committed = self.committed(task)
            self._positions.update(committed)
            copies = {} if self.standby is None else self.standby.take(task)
            stores: dict[str, KeyValueStore[Any]] = {}
            try:
                for name, spec in self.specs.items():
                    stores[name] = self._open(task, spec, committed, copies.pop(name, None))
            except BaseException:
                for engine in [*(s.engine for s in stores.values()), *copies.values()]:
                    engine.close()
                raise
            self.tasks[task] = stores

    def revoke(self, tasks: Iterable[int]) -> None:
        """Close the stores of `tasks` (their buffered writes dropped: the unit rewinds) and
        release their changelog partitions for the next owner (`WriterLocks`)."""
        for task in tasks:
            for store in self.tasks.pop(task, {}).values():
                store.discard()
                store.engine.close()
                locks = writer_locks_of(self.manager, self.changelogs[store.name])
                if locks is not None:
                    locks.release_writer(self.changelogs[store.name], task)
            for partition in self.task_partitions(task):
                self._positions.pop(partition, None)

    def sync(self, partitions: Iterable[LogPartition]) -> None:
        """Own exactly the tasks of `partitions` (the tailer's assignment)."""
        wanted = {p.partition for p in partitions}
        self.revoke([t for t in self.tasks if t not in wanted])
        self.assign(wanted)

    def store(self, name: str, task: int | None) -> KeyValueStore[Any]:
        """The store `name` of `task` (the only task when None and the unit owns one)."""
        stores = self.tasks.get(task)  # type: ignore[arg-type]
        if stores is not None:  # every record's path: the checks below only when it misses
            found = stores.get(name)
            if found is not None:
                return found
        if name not in self.specs:
            raise TopologyError(
                f"computation {self.computation!r} has no state store {name!r} (it declares "
                f"{', '.join(sorted(self.specs)) or 'none'}); add it to stores=[...] on the "
                "topology"
            )
        if task is None:
            if len(self.tasks) != 1:
                raise TopologyError(
                    f"computation {self.computation!r}: get_state_store({name!r}) outside a record "
                    f"needs task= (this unit owns tasks {sorted(self.tasks) or 'none'})"
                )
            task = next(iter(self.tasks))
        try:
            return self.tasks[task][name]
        except KeyError:
            raise TopologyError(
                f"computation {self.computation!r}: task {task} is not owned by this unit (it owns "
                f"{sorted(self.tasks) or 'none'})"
            ) from None

    # -- checkpoints ----------------------------------------------------------------------------
    def checkpoint(
        self, positions: Mapping[LogPartition, int], journal_tail: list[Any] | None = None
    ) -> None:
        """Append every store's buffered writes to its changelog with the input positions about
        to be committed (`positions`, merged into those known), then write them to the engine
        with the changelog position. Writes in `journal_tail` (the runner's journal entries of
        records processed beyond `positions`) are left buffered: their records are delivered
        again after a crash. Safe to call again after a failure: a change appended twice to the
        changelog sets the same value twice."""
        self.flush(self.append_changes(positions, journal_tail))

    def append_changes(
        self, positions: Mapping[LogPartition, int], journal_tail: list[Any] | None = None
    ) -> list[tuple[KeyValueStore[Any], dict[bytes, bytes | None], bytes, int]]:
        """`checkpoint`'s first half: append the changes to the changelogs; returns what
        `flush` writes to the engines (exactly-once: once the transaction committed)."""
        flushes = []
        known = self._positions
        for partition, offset in positions.items():
            if partition.partition in self.tasks:
                known[partition] = offset
        for task, stores in self.tasks.items():
            for store in stores.values():
                store.prepare_checkpoint()
            dirty = [store for store in stores.values() if store.dirty]
            if not dirty:
                continue
            task_positions = {p: known.get(p, 0) for p in self.task_partitions(task)}
            for store in dirty:
                held = store.held_writes(journal_tail) if journal_tail else 0
                changes = store.changes(held)
                writer = self._checkpoint_writer(store.name)
                end = writer.append(task, changes, task_positions)
                flushes.append((store, changes, writer.checkpoint(end, task_positions), held))
        return flushes

    def flush(
        self, flushes: list[tuple[KeyValueStore[Any], dict[bytes, bytes | None], bytes, int]]
    ) -> None:
        """`checkpoint`'s second half: write the appended changes and the store checkpoints to
        the engines."""
        for store, changes, checkpoint, held in flushes:
            store.flush(changes, checkpoint, held)

    def discard(self) -> None:
        """Drop every store's buffered writes (the unit rewinds to its last checkpoint)."""
        for stores in self.tasks.values():
            for store in stores.values():
                store.discard()

    def close(self) -> None:
        """Close every store (buffered writes dropped), the standby copies and the changelog
        writers."""
        if self.standby is not None:
            self.standby.close()
            self.standby = None
        self.revoke(list(self.tasks))
        for writer in [*self._writers.values(), *self._checkpoint_writers.values()]:
            writer.close()
        self._writers.clear()
        self._checkpoint_writers.clear()

    # -- opening --------------------------------------------------------------------------------
    def committed(self, task: int) -> dict[LogPartition, int]:
        """The group's committed positions of the task's partitions (the start of a partition
        the group never committed)."""
        out = {}
        for partition in self.task_partitions(task):
            committed = self.manager.committed(partition.name, self.group)[partition.partition]
            if committed is None:
                committed = self.manager.start_offsets(partition.name)[partition.partition]
            out[partition] = committed
        return out

    def _writer(self, store: str) -> ChangelogWriter:
        writer = self._writers.get(store)
        if writer is None:
            writer = self._writers[store] = ChangelogWriter(self.manager, self.changelogs[store])
        return writer

    def _checkpoint_writer(self, store: str) -> ChangelogWriter:
        if self.changelog_appender is None:
            return self._writer(store)
        writer = self._checkpoint_writers.get(store)
        if writer is None:
            name = self.changelogs[store]
            writer = self._checkpoint_writers[store] = ChangelogWriter(
                self.manager, name, self.changelog_appender(name)
            )
        return writer

    def open_engine(
        self, task: int, spec: StoreSpec, lock_timeout: float | None = None
    ) -> StoreEngine:
        """The engine of store `spec` of `task`, opened at its path in the state directory
        (waiting up to `lock_timeout`, default the unit's, for another holder to let go)."""
        kind = self.engine or spec.engine or self.default_engine
        path = None
        if kind != "memory":
            if self.state_dir is None:
                raise TopologyError(
                    f"state store {spec.name!r} of {self.computation!r} uses the {kind!r} engine "
                    "but no state directory is set; set Settings.state_dir (or STREAMCORE_HOME)"
                )
            path = self.state_dir / Name.of(self.computation).id / str(task) / spec.name
        return open_engine(kind, path, self.lock_timeout if lock_timeout is None else lock_timeout)

    def _open(
        self,
        task: int,
        spec: StoreSpec,
        committed: Mapping[LogPartition, int],
        engine: StoreEngine | None = None,
    ) -> KeyValueStore[Any]:
        """Store `spec` of `task` restored, on `engine` (a standby copy's) or a newly opened one."""
        engine = engine or self.open_engine(task, spec)
        try:
            changelog = LogPartition.of(self.changelogs[spec.name], task)
            progress = self.restores[task, spec.name] = RestoreProgress(changelog, spec.name)
            result = restore(
                self.manager,
                changelog,
                spec.name,
                engine,
                committed,
                self._writer(spec.name),
                settings=self.restore_settings,
                listener=self.listener,
                keep_going=self.keep_going,
                progress=progress,
            )
        except BaseException:
            engine.close()
            raise
        logger.info(
            "computation %s task %d: store %s restored (%s)",
            self.computation,
            task,
            spec.name,
            result,
        )
        store = KeyValueStore(spec.name, engine, self.codecs[spec.name], spec.cache)
        store.journal = self.journal
        return store
