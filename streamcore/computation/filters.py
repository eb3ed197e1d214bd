"""`RecordFilter`: hooks on the records of a stream (Nuxeo 11.1's `RecordFilter`), set per stream
with `Settings.add_filter`. Typical uses: drop or redact records, add tracing, count.

`before_append` runs on every record a computation produces to the stream, at checkpoint, before
it is appended; `after_read` on every record read from the stream, before the computation sees it.
Returning None drops the record (a dropped input record still counts as processed, so it is
committed with its neighbours)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from streamcore.log import LogOffset
    from streamcore.record import Record

__all__ = ["FilterChain", "RecordFilter"]


class RecordFilter:
    """Base class: every hook returns the record unchanged. Filters must be thread-safe (the
    units of a computation share them)."""

    def before_append(self, record: Record) -> Record | None:
        return record

    def after_read(self, record: Record, offset: LogOffset) -> Record | None:
        return record


class FilterChain(RecordFilter):
    """Several filters applied in order; the first that returns None drops the record."""

    def __init__(self, filters: Sequence[RecordFilter]) -> None:
        self.filters = tuple(filters)

    def before_append(self, record: Record) -> Record | None:
        for f in self.filters:
            out = f.before_append(record)
            if out is None:
                return None
            record = out
        return record

    def after_read(self, record: Record, offset: LogOffset) -> Record | None:
        for f in self.filters:
            out = f.after_read(record, offset)
            if out is None:
                return None
            record = out
        return record
