"""Helpers of the audit tests (tests/unit/audit, the audit job, DAG, Spark Connect, cluster and
browser tests): entries, appending them to `audit/entries` as the relay does, a log manager that
records (and can fail or freeze) the relay's appends, and reading `audit/entries` back."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from streamcore.audit import STREAM, audit_record, decode_entry
from streamcore.codecs import get_codec
from streamcore.config import StreamcoreConfig, load_config
from streamcore.log import LogManager, open_log_manager
from streamcore.record import Record

DATABASES = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
LOGS = ["local", "memory"]
START = datetime(2026, 11, 24, 9, 0, tzinfo=UTC)


def entry(n: int, **fields: Any) -> dict[str, Any]:
    """A valid entry (as a mapping) numbered `n`: event id `e-<n>`, one second after the last."""
    values: dict[str, Any] = {
        "event_id": f"e-{n:05d}",
        "event_type": "documentModified",
        "category": "eventDocumentCategory",
        "doc_id": str(uuid.UUID(int=n % 7)),
        "doc_path": f"/default-domain/workspaces/ws/doc-{n % 7}",
        "doc_type": "File",
        "principal": "ada",
        "event_date": START + timedelta(seconds=n),
        "lifecycle_state": "project",
        "repository": "default",
        "extended": {"n": str(n)},
    }
    values.update(fields)
    return values


def relay_time(item: Mapping[str, Any]) -> int:
    """When the relay appends entry `item` (epoch ms): a second after its event."""
    return int(item["event_date"].timestamp() * 1000) + 1000


def append_entries(
    items: Sequence[Mapping[str, Any] | bytes],
    config: StreamcoreConfig | None = None,
    *,
    timestamps: Sequence[int] | None = None,
) -> None:
    """Append `items` to `audit/entries` (created with one partition if missing) in the log
    `config` routes it to (default `load_config()`), as the relay appends them: an entry as its
    Record, a `bytes` item as a raw value (a bad record); at `timestamps` (epoch ms), by default
    each entry's `relay_time` (give them when there are raw values)."""
    config = config or load_config()
    codec = get_codec("avro", config=config)
    values, relayed = [], []
    for item in items:
        if isinstance(item, bytes):
            values.append(("junk", item))
        else:
            record = audit_record(item)
            values.append((record.key, codec.encode(record)))
            relayed.append(relay_time(item))
    at = relayed if timestamps is None else list(timestamps)
    if len(at) != len(values):
        raise ValueError("raw values have no event date: give every item's timestamp")
    with open_log_manager(config) as manager:
        if not manager.exists(STREAM):
            manager.create(STREAM, 1)
        if values:
            manager.appender(STREAM).append_batch(values, timestamps=at)


class SpyAppender:
    """Delegates to a real appender; tells its `SpyManager` about every append."""

    def __init__(self, spy: SpyManager, appender: Any) -> None:
        self._spy = spy
        self._appender = appender

    def __getattr__(self, name: str) -> Any:
        return getattr(self._appender, name)

    def append(self, key: str, message: Any) -> Any:
        return self._spy.record(1, lambda: self._appender.append(key, message))

    def append_batch(self, items: Any, **options: Any) -> Any:
        return self._spy.record(len(items), lambda: self._appender.append_batch(items, **options))


class SpyManager:
    """A log manager whose appenders record the size of every append (`appends`, in order).
    `before(number)` runs before append number `number` (1-based) and may raise to fail it;
    `after(number)` runs once it is written, before the relay hears of it (to freeze there)."""

    def __init__(self, manager: LogManager) -> None:
        self.manager = manager
        self.appends: list[int] = []
        self.before: Callable[[int], None] = lambda _number: None
        self.after: Callable[[int], None] = lambda _number: None
        self._count = 0
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.manager, name)

    def appender(self, name: str, codec: Any = None) -> SpyAppender:
        return SpyAppender(self, self.manager.appender(name, codec))

    def record(self, size: int, append: Callable[[], Any]) -> Any:
        with self._lock:
            self._count += 1
            number = self._count
        self.before(number)
        result = append()
        self.appends.append(size)
        self.after(number)
        return result


def read_log(manager: LogManager, expected: int, timeout: float = 30.0) -> list[Record]:
    """Every Record of `audit/entries` from the start, waiting up to `timeout` s for `expected`."""
    tailer = manager.tailer(f"test/reader-{uuid.uuid4().hex}", STREAM, get_codec("avro"))
    records: list[Record] = []
    deadline = time.monotonic() + timeout
    try:
        while len(records) < expected and time.monotonic() < deadline:
            records.extend(r.message for r in tailer.read_batch(1000, timeout=0.1))
        records.extend(r.message for r in tailer.read_batch(1000, timeout=0.0))
    finally:
        tailer.close()
    return records


def event_ids(records: list[Record]) -> list[str]:
    return [decode_entry(record.data).event_id for record in records]


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout:g} s waiting for {what}"
        time.sleep(0.02)
