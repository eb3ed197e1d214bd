"""Helpers of the audit tests (tests/unit/audit, tests/integration/test_audit_publish_crash.py):
entries, a log manager that records (and can fail or freeze) the relay's appends, and reading
`audit/entries` back."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from streamcore.audit import STREAM, decode_entry
from streamcore.codecs import get_codec
from streamcore.log.api import LogManager
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
