"""How the restore (`streamcore.state.restore`) reads a changelog in bulk: each read as Python
lists of keys, values and offsets, from the log's column reader when it has one (Kafka) or from
its Arrow batches (the local log); and where a run of records sharing one positions header ends,
found at C level."""

from __future__ import annotations

from collections.abc import Callable
from operator import itemgetter
from typing import Any

from streamcore.log.api import LogTailer
from streamcore.log.capabilities import ColumnReader

__all__ = ["ReadLists", "read_lists", "run_end"]


def run_end(values: list[bytes], start: int, header: bytes) -> int:
    """The index of the first value from `start` on that does not begin with `header` (or the
    length): the end of one append's run of puts. The values' heads are sliced and compared
    at C level, in windows that double from 64 (a run is usually the rest of the read, or one
    append of a few thousand records)."""
    head = itemgetter(slice(0, len(header)))
    count, end, step = len(values), start, 64
    while end < count:
        heads = list(map(head, values[end : end + step]))
        same = heads.count(header)
        if same < len(heads):
            return end + next(k for k, h in enumerate(heads) if h != header)
        end += same
        step *= 2
    return end


ReadLists = tuple[list[bytes], list[bytes], Callable[[int], int]]
"""One read of the restore: the keys (bytes), the values and the offset of the i-th record."""


def read_lists(tailer: LogTailer[Any], max_records: int, timeout: float) -> ReadLists | None:
    """The next read, as Python lists: straight from a `ColumnReader` (Kafka: no Arrow arrays
    built to be converted back), else from `read_arrow` (the local log's batches are its mapped
    segments, converted once here)."""
    if isinstance(tailer, ColumnReader):
        columns = tailer.read_columns(max_records, timeout)
        if columns is None:
            return None
        return columns.keys, columns.values, columns.offsets.__getitem__
    batch = tailer.read_arrow(max_records, timeout)
    if batch is None:
        return None
    import pyarrow as pa

    offsets = batch.column("offset")
    return (
        # The UTF-8 keys as bytes: a view of the same buffers (a cast costs 20 times more).
        batch.column("key").view(pa.binary()).to_pylist(),
        batch.column("value").to_pylist(),
        lambda i: int(offsets[i].as_py()),
    )
