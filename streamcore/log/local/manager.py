"""`LocalLogManager`: the embedded, broker-less backend (the default).

Layout under `STREAMCORE_HOME/log/` (the root is configurable):

    <log-id>/metadata.json           partitions, retention, segment size/roll, fsync, created,
                                     incarnation (a random id, new when the log is recreated)
    <log-id>/P-NN/<offset>.log       segments (see segment.py) and their sparse .index files
    <log-id>/P-NN/.lock              single-writer lock (flock) holding the writer's pid
    <log-id>/groups/<group-id>/p-NN  committed positions (see positions.py)
    _subscriptions/<group>@<logs>/N.json  state of a dynamic consumer group (see groups.py)

Any number of processes may read; one process at a time may write a partition.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streamcore.config import FSYNC_MODES, StreamcoreConfig, load_config, parse_duration_ms
from streamcore.errors import (
    ConfigError,
    LogExistsError,
    LogNotFoundError,
)
from streamcore.log.config import ARCHIVER, LogConfig
from streamcore.log.cursor.manager import CursorLogManager
from streamcore.log.cursor.tailer import BinaryKey
from streamcore.log.local.appender import LocalAppender
from streamcore.log.local.compaction import (
    DEFAULT_DELETE_RETENTION_MS,
    PartitionCompaction,
    compact_partition,
    tombstone_test,
)
from streamcore.log.local.description import LocalLogDescription, partition_folder
from streamcore.log.local.groups import FileGroupStore, group_states
from streamcore.log.local.positions import LocalPositionStore
from streamcore.log.local.reader import PartitionCursor
from streamcore.log.local.retention import (
    PartitionPurge,
    hold_offset,
    plan_partition,
    record_loss,
    sealed_segments,
)
from streamcore.log.local.segment import list_segments
from streamcore.log.local.syncer import BatchSyncer
from streamcore.log.local.writer import PartitionWriter
from streamcore.log.values import LogInfo, LogPartition
from streamcore.names import Name

if TYPE_CHECKING:
    from streamcore.codecs import Codec

__all__ = ["LocalLogManager"]

logger = logging.getLogger(__name__)
_METADATA = "metadata.json"


class LocalLogManager(CursorLogManager):
    """The local backend on the cursor template (`streamcore.log.cursor.manager`): partitions
    are segment folders, positions and group states files under `root`."""

    kind = "local"

    def __init__(
        self, root: str | Path | None = None, config: StreamcoreConfig | None = None
    ) -> None:
        self.config = config or load_config()
        super().__init__(self.config.groups)
        self.root = Path(root) if root is not None else self.config.log_dir
        self.root.mkdir(parents=True, exist_ok=True)
        self._writers: dict[tuple[Name, int], PartitionWriter] = {}
        self._syncer = BatchSyncer()
        self._appenders: list[LocalAppender] = []
        self._metadata: dict[Name, dict[str, Any]] = {}

    # -- what the cursor template needs ---------------------------------------------------------
    def _default_partitions(self) -> int:
        return self.config.log.partitions

    def _open_cursor(self, partition: LogPartition) -> PartitionCursor:
        return PartitionCursor(self.partition_folder(partition), str(partition))

    def _positions(self, name: Name) -> LocalPositionStore:
        return LocalPositionStore(self.folder(name), self._meta(name)["fsync"])

    def _group_store(
        self, group: str, logs: list[Name], history: Callable[[], bool]
    ) -> FileGroupStore:
        return FileGroupStore(self.root, group, logs, history)

    def _group_states(self, group: str) -> list[dict[str, Any]]:
        # Every state of the group under this root: any process sharing the folder.
        return group_states(self.root, group)

    def _close_backend(self) -> None:
        self._syncer.stop()
        for writer in self._writers.values():
            writer.close()
        self._writers.clear()

    # -- logs -----------------------------------------------------------------------------------
    def folder(self, name: str | Name) -> Path:
        return self.root / Name.of(name).id

    def exists(self, name: str | Name) -> bool:
        return (self.folder(name) / _METADATA).is_file()

    def create(self, name: str | Name, partitions: int | None = None, **options: Any) -> bool:
        """Create a log. Options: `retention` ("4d", ms int or "0" = keep), `segment_bytes`,
        `segment_roll`, `fsync` (none|batch|always); defaults come from the configuration."""
        return super().create(name, partitions, **options)

    def _prepare_create(self, name: Name, partitions: int, options: dict[str, Any]) -> Any:
        defaults = self.config.log
        unknown = set(options) - {"retention", "segment_bytes", "segment_roll", "fsync"}
        if unknown:
            raise ConfigError(
                f"unknown local-log option(s) {sorted(unknown)}; use retention, segment_bytes, "
                "segment_roll or fsync"
            )
        meta = {
            "name": name.urn,
            "partitions": partitions,
            "retention_ms": parse_duration_ms(options.get("retention", defaults.retention_ms)),
            "segment_bytes": int(options.get("segment_bytes", defaults.segment_bytes)),
            "segment_roll_ms": parse_duration_ms(
                options.get("segment_roll", defaults.segment_roll_ms)
            ),
            "fsync": options.get("fsync", defaults.fsync),
            "created": datetime.now(UTC).isoformat(timespec="seconds"),
            "incarnation": uuid.uuid4().hex,
            "format": 1,
        }
        if meta["fsync"] not in FSYNC_MODES:
            raise ConfigError(f"fsync must be one of {FSYNC_MODES}, got {meta['fsync']!r}")
        return meta

    def _create(self, name: Name, partitions: int, prepared: Any) -> bool:
        folder = self.folder(name)
        folder.mkdir(parents=True, exist_ok=True)
        for p in range(partitions):
            partition_folder(folder, p).mkdir(exist_ok=True)
        # Other processes (or managers) sharing the root may create the same log at this moment:
        # each writes a file of its own, and a hard link publishes it only where no metadata
        # exists yet, so exactly one creation wins and every process reads its incarnation.
        fd, tmp = tempfile.mkstemp(prefix=f".{_METADATA}.", suffix=".tmp", dir=folder)
        try:
            with os.fdopen(fd, "w") as out:
                out.write(json.dumps(prepared, indent=2))
            os.link(tmp, folder / _METADATA)
        except FileExistsError:
            return False
        finally:
            os.unlink(tmp)
        self._metadata[name] = prepared
        return True

    def _meta(self, name: str | Name) -> dict[str, Any]:
        name = Name.of(name)
        meta = self._metadata.get(name)
        if meta is None:
            meta = self._read_meta(name)
            self._metadata[name] = meta
        return meta

    def _read_meta(self, name: Name) -> dict[str, Any]:
        try:
            meta: dict[str, Any] = json.loads((self.folder(name) / _METADATA).read_text())
            return meta
        except FileNotFoundError:
            raise LogNotFoundError(
                f"log {name} does not exist under {self.root}; create it first "
                f"(LogManager.create or `streamcore create -l {name}`)"
            ) from None

    def size(self, name: str | Name) -> int:
        return int(self._meta(name)["partitions"])

    def incarnation(self, name: str | Name) -> str | None:
        # From the file, not the cache: another process may have recreated the log since this
        # manager cached its metadata, and telling that apart is this method's whole point.
        # Logs created before the id was written have none (None: unknown).
        return self._read_meta(Name.of(name)).get("incarnation")

    def retention_ms(self, name: str | Name) -> int:
        return int(self._meta(name)["retention_ms"])

    def segment_roll_ms(self, name: str | Name) -> int:
        return int(self._meta(name)["segment_roll_ms"])

    def delete(self, name: str | Name) -> bool:
        name = Name.of(name)
        with self._lock:
            if not self.exists(name):
                return False
            if self._in_use(name) or any(a.name == name and not a.closed for a in self._appenders):
                raise LogExistsError(
                    f"log {name} is in use in this process (appender or tailer open); close them "
                    "before deleting it"
                )
            # Writers outlive the appenders that opened them; nobody uses these any more.
            for key in [k for k in self._writers if k[0] == name]:
                self._writers.pop(key).close()
            shutil.rmtree(self.folder(name))
            self._metadata.pop(name, None)
            return True

    def list_logs(self) -> list[Name]:
        return sorted(
            (Name.of_id(d.name) for d in self.root.iterdir() if (d / _METADATA).is_file()),
            key=lambda n: n.urn,
        )

    def list_groups(self, name: str | Name) -> list[str]:
        self._meta(name)
        return LocalPositionStore(self.folder(name), "none").groups()

    def partition_folder(self, partition: LogPartition) -> Path:
        return partition_folder(self.folder(partition.name), partition.partition)

    def describe(self, name: str | Name) -> LocalLogDescription:
        name = Name.of(name)
        size = self.size(name)
        return LocalLogDescription.of(name.urn, size, self.folder(name), self.config.log)

    def info(self, name: str | Name) -> LogInfo:
        name = Name.of(name)
        meta = self._meta(name)
        starts, ends = self.start_offsets(name), self.end_offsets(name)
        size = sum(
            f.stat().st_size
            for p in range(meta["partitions"])
            for f in self.partition_folder(LogPartition(name, p)).glob("*.log")
        )
        records = sum(e - s for s, e in zip(starts, ends, strict=True))
        return LogInfo(name, meta["partitions"], records, size, meta["retention_ms"], starts, ends)

    # -- offsets --------------------------------------------------------------------------------
    def end_offsets(self, name: str | Name) -> list[int]:
        name = Name.of(name)
        out = []
        for p in range(self.size(name)):
            writer = self._writers.get((name, p))
            if writer is not None and not writer.closed:
                out.append(writer.next_offset)
            else:
                cursor = PartitionCursor(self.partition_folder(LogPartition(name, p)), "")
                out.append(cursor.end_offset())
                cursor.close()
        return out

    def start_offsets(self, name: str | Name) -> list[int]:
        name = Name.of(name)
        out = []
        for p in range(self.size(name)):
            segments = list_segments(self.partition_folder(LogPartition(name, p)))
            out.append(segments[0] if segments else 0)
        return out

    def _hold(self, partition: LogPartition) -> int | None:
        return hold_offset(self.holding_positions(partition))

    def record_at(self, partition: LogPartition, offset: int) -> tuple[str, bytes, int] | None:
        cursor = PartitionCursor(self.partition_folder(partition), str(partition))
        try:
            if offset < cursor.start_offset():
                return None
            cursor.seek(offset)
            records = cursor.next_records(1)
        except BinaryKey as bad:  # shown, not read: escape it rather than fail
            return bad.key.decode("utf-8", "backslashreplace"), bad.value, bad.timestamp
        finally:
            cursor.close()
        if not records or records[0][0] != offset:
            return None
        _, ts, key, value = records[0]
        return key, value, ts

    def holding_positions(self, partition: LogPartition) -> dict[str, int]:
        """The position of every group a purge of `partition` must wait for: each committed
        position, and the archiver's (the oldest offset when it has none) on a log LogConfig
        archives (`streamcore.log.local.retention`)."""
        store = self._positions(partition.name)
        positions = {}
        for group in store.groups():
            pos = store.committed(group, partition.partition)
            if pos is not None:
                positions[group] = pos
        if ARCHIVER not in positions and self._routing.archived(partition.name):
            bases = list_segments(self.partition_folder(partition))
            positions[ARCHIVER] = bases[0] if bases else 0
        return positions

    @functools.cached_property
    def _routing(self) -> LogConfig:
        return LogConfig.from_settings(self.config)

    def purge_plan(self, name: str | Name, now_ms: int | None = None) -> list[PartitionPurge]:
        """What `purge` would do on each partition (nothing changes): the expired segments,
        those it may purge without loss, and the groups that hold the others."""
        name = Name.of(name)
        now = now_ms if now_ms is not None else time.time_ns() // 1_000_000
        retention = self.retention_ms(name)
        plans = []
        for p in range(self.size(name)):
            partition = LogPartition(name, p)
            segments = sealed_segments(self.partition_folder(partition), retention, now)
            plans.append(plan_partition(p, segments, self.holding_positions(partition)))
        return plans

    def purge(
        self, name: str | Name, now_ms: int | None = None, *, force: bool = False
    ) -> dict[int, list[int]]:
        """Apply retention to every partition; returns removed segment bases per partition.
        An expired segment goes only once every group with a committed position has read past
        it, unless `force` (the loss is then appended to `<log>/purges.jsonl`; see
        `streamcore.log.local.retention`). Partitions written by another process are skipped
        (their writer purges on roll, with the same rule)."""
        from streamcore.errors import LogLockedError

        name = Name.of(name)
        removed: dict[int, list[int]] = {}
        for p in range(self.size(name)):
            partition = LogPartition(name, p)
            try:
                writer = self._writer(name, p)
            except LogLockedError:
                logger.info("%s-%02d is written by another process; it purges on roll", name, p)
                continue
            positions = self.holding_positions(partition)
            below = None if force else hold_offset(positions)
            removed[p] = writer.purge_expired(now_ms, below=below)
            if force and removed[p]:
                start = self.start_offsets(name)[p]
                record_loss(self.folder(name), p, start, positions)
        return removed

    def compact(
        self,
        name: str | Name,
        now_ms: int | None = None,
        *,
        min_lag_ms: int = 0,
        delete_retention_ms: int = DEFAULT_DELETE_RETENTION_MS,
        dry_run: bool = False,
    ) -> list[PartitionCompaction]:
        """Key-compact the sealed segments of every partition (`streamcore.log.local.compaction`):
        keep the latest record per key, drop tombstones older than `delete_retention_ms`. On a
        log LogConfig archives, only what the archiver has passed. Runs beside a writer of
        another process; `dry_run` changes nothing and says what a real run would do."""
        from streamcore.codecs import get_codec

        name = Name.of(name)
        now = now_ms if now_ms is not None else time.time_ns() // 1_000_000
        is_tombstone = tombstone_test(get_codec("avro", config=self.config).decode)
        archived = self._routing.archived(name)
        store = self._positions(name)
        out = []
        for p in range(self.size(name)):
            folder = self.partition_folder(LogPartition(name, p))
            hold = None
            if archived:
                hold = store.committed(ARCHIVER, p)
                if hold is None:  # nothing archived yet: nothing may go
                    hold = self.start_offsets(name)[p]
            out.append(
                compact_partition(
                    folder,
                    p,
                    hold=hold,
                    now_ms=now,
                    is_tombstone=is_tombstone,
                    min_lag_ms=min_lag_ms,
                    delete_retention_ms=delete_retention_ms,
                    dry_run=dry_run,
                )
            )
        return out

    # -- appenders and tailers ------------------------------------------------------------------
    def _writer(self, name: Name, partition: int) -> PartitionWriter:
        with self._lock:
            self._check_open()
            writer = self._writers.get((name, partition))
            # A writer closes itself when it cannot undo a failed write: open a new one, whose
            # recovery drops the partial batch.
            if writer is None or writer.closed:
                meta = self._meta(name)
                writer = PartitionWriter(
                    self.partition_folder(LogPartition(name, partition)),
                    fsync=meta["fsync"],
                    segment_bytes=meta["segment_bytes"],
                    segment_roll_ms=meta["segment_roll_ms"],
                    retention_ms=meta["retention_ms"],
                    max_record_bytes=self.config.log.max_record_bytes,
                    label=f"{name.id}-{partition:02d}",
                    hold=functools.partial(self._hold, LogPartition(name, partition)),
                )
                self._writers[(name, partition)] = writer
                if writer.fsync == "batch":
                    self._syncer.add(writer)
            return writer

    def release_writer(self, name: str | Name, partition: int) -> None:
        """Close this process's writer of a partition, if it has one, releasing the partition's
        lock for another process (a task's changelog after the task moved there); an append
        from here opens it again."""
        with self._lock:
            writer = self._writers.pop((Name.of(name), partition), None)
        if writer is not None:
            writer.close()

    def appender(self, name: str | Name, codec: Codec[Any] | None = None) -> LocalAppender:
        name = Name.of(name)
        self._meta(name)
        appender = LocalAppender(self, name, codec)
        with self._lock:
            self._appenders = [a for a in self._appenders if not a.closed]
            self._appenders.append(appender)
        return appender
