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
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from streamcore.config import FSYNC_MODES, StreamcoreConfig, load_config, parse_duration_ms
from streamcore.errors import (
    ConfigError,
    InvalidRecordError,
    LogClosedError,
    LogExistsError,
    LogNotFoundError,
)
from streamcore.log.api import LogAppender
from streamcore.log.append_checks import check_keys_encode, check_timestamps
from streamcore.log.config import ARCHIVER, LogConfig
from streamcore.log.cursor.manager import CursorLogManager
from streamcore.log.cursor.tailer import BinaryKey
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
from streamcore.log.local.writer import PartitionWriter, append_all_or_nothing, check_types
from streamcore.log.partitioner import partition_for_key, partitions_for_keys
from streamcore.log.values import AppendedOffsets, LogInfo, LogOffset, LogPartition
from streamcore.names import Name

logger = logging.getLogger(__name__)
_METADATA = "metadata.json"


class LocalLogManager(CursorLogManager):
    """The local backend on the cursor template (`streamcore.log.cursor.manager`): partitions
    are segment folders, positions and group states files under `root`."""

    kind = "local"

    def __init__(
        self, root: str | Path | None = None, config: StreamcoreConfig | None = None
    ) -> None:
        super().__init__()
        self.config = config or load_config()
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

    def _create(self, name: Name, partitions: int, prepared: Any) -> None:
        folder = self.folder(name)
        folder.mkdir(parents=True, exist_ok=True)
        for p in range(partitions):
            partition_folder(folder, p).mkdir(exist_ok=True)
        tmp = folder / f".{_METADATA}.tmp"
        tmp.write_text(json.dumps(prepared, indent=2))
        os.replace(tmp, folder / _METADATA)
        self._metadata[name] = prepared

    def _meta(self, name: str | Name) -> dict[str, Any]:
        name = Name.of(name)
        meta = self._metadata.get(name)
        if meta is None:
            meta = self._read_meta(name)
            self._metadata[name] = meta
        return meta

    def _read_meta(self, name: Name) -> dict[str, Any]:
        try:
            return json.loads((self.folder(name) / _METADATA).read_text())
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

    def appender(self, name: str | Name, codec: Any = None) -> LocalAppender:
        name = Name.of(name)
        self._meta(name)
        appender = LocalAppender(self, name, codec)
        with self._lock:
            self._appenders = [a for a in self._appenders if not a.closed]
            self._appenders.append(appender)
        return appender


class LocalAppender(LogAppender[Any]):
    def __init__(self, manager: LocalLogManager, name: Name, codec: Any) -> None:
        self.manager = manager
        self.name = name
        self.codec = codec
        self._size = manager.size(name)
        self._log_partitions = [LogPartition(name, p) for p in range(self._size)]
        # The manager owns the writers; the appender keeps them at hand for the hot path.
        self._writers: dict[int, PartitionWriter] = {}
        self._closed = False

    @property
    def size(self) -> int:
        return self._size

    @property
    def closed(self) -> bool:
        return self._closed

    def _encode(self, message: Any) -> bytes:
        return message if self.codec is None else self.codec.encode(message)

    def _check(self, partition: int) -> None:
        if self._closed:
            raise LogClosedError(f"appender of {self.name} is closed")
        if not 0 <= partition < self._size:
            raise ValueError(f"{self.name} has partitions 0..{self._size - 1}, not {partition}")

    def append(self, key: str, message: Any) -> LogOffset:
        return self.append_to(partition_for_key(key, self._size), key, message)

    def append_to(self, partition: int, key: str, message: Any) -> LogOffset:
        writer = self._writers.get(partition)
        if writer is None or writer.closed or self._closed:
            self._check(partition)
            writer = self._writers[partition] = self.manager._writer(self.name, partition)
        value = message if self.codec is None else self.codec.encode(message)
        return LogOffset(self._log_partitions[partition], writer.append_one(key, value))

    def append_batch(
        self,
        items: Sequence[tuple[str, Any]],
        *,
        partition: int | None = None,
        timestamps: Sequence[int] | None = None,
    ) -> AppendedOffsets:
        """Append (key, message) pairs as one batch per partition (one write, one checksum),
        all or nothing: every item is encoded and checked, and every partition's writer lock
        taken, before the first byte is written. Only a write error (a full disk) on a later
        partition leaves the earlier partitions' batches in place; see docs/log.md.
        `timestamps` (ms, one per item) keep original times, e.g. for copies."""
        count = len(items)
        times = check_timestamps(timestamps, count)
        if not count:
            return AppendedOffsets(self.name, (), ())
        keys = [k for k, _ in items]
        encode = self.codec.encode if self.codec is not None else None
        values = [encode(m) for _, m in items] if encode else [m for _, m in items]
        if partition is not None:
            self._check(partition)
            base = self.manager._writer(self.name, partition).append(keys, values, times)
            return AppendedOffsets(
                self.name, np.full(count, partition), np.arange(base, base + count)
            )
        self._check(0)
        try:  # the joins check every type in C; check_types only words the error
            targets = partitions_for_keys(keys, self._size)
            b"".join(values)
        except TypeError:
            check_types(keys, values)
            raise
        counts = np.bincount(targets, minlength=self._size)
        used = np.flatnonzero(counts).tolist()
        if len(used) == 1:
            base = self.manager._writer(self.name, used[0]).append(keys, values, times)
            return AppendedOffsets(self.name, targets, np.arange(base, base + count))
        check_keys_encode(keys)  # here, where a bad key's index is the caller's
        order = np.argsort(targets, kind="stable")
        keys_by_order = np.empty(count, dtype=object)
        keys_by_order[:] = keys
        values_by_order = np.empty(count, dtype=object)
        values_by_order[:] = values
        keys_by_order, values_by_order = keys_by_order[order], values_by_order[order]
        # Every writer (so every partition's lock) first: LogLockedError writes nothing.
        writers = [self.manager._writer(self.name, p) for p in used]
        batches = []
        start = 0
        for p, writer in zip(used, writers, strict=True):
            part = slice(start, start + int(counts[p]))
            part_ts = times[order[part]] if times is not None else None
            batches.append((writer, keys_by_order[part], values_by_order[part], part_ts))
            start = part.stop
        bases = append_all_or_nothing(batches)
        offsets = np.empty(count, dtype=np.int64)
        start = 0
        for p, base in zip(used, bases, strict=True):
            n = int(counts[p])
            offsets[order[start : start + n]] = np.arange(base, base + n)
            start += n
        return AppendedOffsets(self.name, targets, offsets)

    def append_arrow(self, partition: int, keys: Any, values: Any) -> int:
        """Append pyarrow string/binary arrays as one batch without per-record Python work;
        returns the first offset. The fast path for bulk loads."""
        import pyarrow as pa

        self._check(partition)
        if len(keys) != len(values):
            raise ValueError(f"{len(keys)} keys for {len(values)} values; give one key per value")
        if keys.null_count or values.null_count:
            raise ValueError("keys and values must not be null; use '' / b'' instead")

        def columns(array: Any) -> tuple[Any, Any]:
            if isinstance(array, pa.ChunkedArray):
                array = array.combine_chunks()
            array = array.cast(pa.binary()) if array.type != pa.binary() else array
            _, offsets, data = array.buffers()
            count = len(array)
            if not count:
                return np.zeros(1, dtype=np.int32), b""
            # A sliced array starts at `array.offset` and its offsets need not start at 0.
            view = np.frombuffer(offsets, dtype=np.int32, count=count + 1, offset=array.offset * 4)
            first, last = int(view[0]), int(view[-1])
            if first:
                view = view - np.int32(first)
            return view, (memoryview(data)[first:last] if data is not None else b"")

        if not (pa.types.is_string(keys.type) or pa.types.is_large_string(keys.type)):
            keys = _utf8_keys(keys)
        key_offsets, key_bytes = columns(keys)
        value_offsets, value_bytes = columns(values)
        writer = self.manager._writer(self.name, partition)
        return writer.append_columns(
            len(values), key_offsets, key_bytes, value_offsets, value_bytes
        )

    def wait_for(self, offset: LogOffset, group: str, timeout: float) -> bool:
        import time

        deadline = time.monotonic() + timeout
        store = self.manager._positions(offset.partition.name)
        while True:
            committed = store.committed(group, offset.partition.partition)
            if committed is not None and committed > offset.offset:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)

    def flush(self) -> None:
        """fsync every partition this process writes (whatever the fsync setting)."""
        for (name, _), writer in list(self.manager._writers.items()):
            if name == self.name:
                writer.flush()

    def close(self) -> None:
        self._closed = True


def _utf8_keys(keys: Any) -> Any:
    """Binary Arrow keys as strings, checked in one vectorised cast: a key is text, and every
    tailer decodes it as UTF-8, so one that is not would stop them all."""
    import pyarrow as pa

    if not (pa.types.is_binary(keys.type) or pa.types.is_large_binary(keys.type)):
        return keys
    try:
        return keys.cast(pa.large_string() if pa.types.is_large_binary(keys.type) else pa.string())
    except pa.ArrowInvalid:
        for index, key in enumerate(keys.to_pylist()):
            try:
                key.decode()
            except UnicodeDecodeError:
                raise InvalidRecordError(
                    f"key #{index} ({key!r}) is not valid UTF-8; log keys are text that every "
                    "tailer decodes as UTF-8: decode the keys with their real encoding, or encode "
                    "binary ids as hex or base64. Nothing of this batch was appended"
                ) from None
        raise
