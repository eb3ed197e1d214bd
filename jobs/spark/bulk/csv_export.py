"""The CSV export of a bulk command: one part per bucket, then one file.

    for bucket in range(found.buckets):
        write_csv_part(action_rows(bucket), out_dir, bucket)
    path = finish_csv(out_dir, ["id", "title", "properties"])   # out_dir/<name>.zip

Parts are written by the driver with Python's csv module, not Spark's CSV writer: a part is one
bucket (thousands of rows), which Spark would write as a folder with a commit protocol and a
file per task, and whose map columns it cannot write at all. The driver streams the bucket's
rows sorted by Spark (`toLocalIterator`, one partition in memory at a time), and renders every
value the same way on every run (`render`: maps and arrays as JSON with sorted keys, instants in
UTC), so a rerun rewrites the same bytes, and the final file is read back by the same csv module
that wrote it. Quoting is RFC 4180 (fields quoted when they hold a comma, a quote or a line
break, quotes doubled, CRLF line ends), in UTF-8.

`finish_csv` merges the parts by id into one file with a header, streaming: it opens a part when
the merge reaches its first id, so the consecutive id ranges of a scroll's buckets are read one
part after the other, and parts that overlap are still merged correctly. The output is written
aside and renamed, and zipped with a fixed timestamp, so a rerun rewrites the same file.
"""

from __future__ import annotations

import base64
import csv
import heapq
import io
import json
import os
import zipfile
from collections.abc import Iterable, Iterator, Sequence
from contextlib import ExitStack
from datetime import UTC, date, datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:  # finish_csv and render need no Spark: pyspark is not imported at run time
    from pyspark.sql import DataFrame

__all__ = ["finish_csv", "render", "write_csv_part"]

_PARTS = "parts"
_PART = "part-{:06d}.csv"
# A zip entry's time; fixed so that a rerun writes the same bytes.
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)


def render(value: Any) -> str:
    """The CSV text of a value as Spark returns it to Python: null is empty, booleans are
    `true`/`false`, maps and arrays JSON (keys sorted), timestamps ISO 8601 in UTC (PySpark
    gives them as naive local datetimes), binary base64."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list | tuple):
        return json.dumps(value, sort_keys=True, ensure_ascii=False, default=render)
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode("ascii")
    return str(value)


def _writer(handle: IO[str]) -> Any:
    return csv.writer(handle, quoting=csv.QUOTE_MINIMAL, lineterminator="\r\n")


def _part_path(out_dir: str | Path, bucket: int) -> Path:
    return Path(out_dir) / _PARTS / _PART.format(bucket)


def write_csv_part(rows: DataFrame, out_dir: str | Path, bucket: int) -> int:
    """Write the rows of a DataFrame (one bucket's, `id` among its columns) as the CSV part of
    `bucket` under `out_dir`, sorted by id, no header, columns in the DataFrame's order
    (`finish_csv` takes the same list). Replaces a part written before. Returns the rows."""
    if "id" not in rows.columns:
        raise ValueError(
            f"CSV part of bucket {bucket}: the rows have no id column ({rows.columns}); the "
            "export sorts by id, so the projection must keep it"
        )
    path = _part_path(out_dir, bucket)
    path.parent.mkdir(parents=True, exist_ok=True)
    written = 0
    aside = path.with_suffix(".tmp")
    with aside.open("w", encoding="utf-8", newline="") as handle:
        writer = _writer(handle)
        for row in rows.orderBy("id").toLocalIterator():
            writer.writerow([render(v) for v in row])
            written += 1
    os.replace(aside, path)
    return written


def finish_csv(
    out_dir: str | Path, columns: Sequence[str], *, sort: bool = True, zip: bool = True
) -> Path:
    """Write the parts under `out_dir` as one CSV file with the header `columns` (the parts'
    columns), `<out_dir name>.csv`, or `.zip` holding that file when `zip`. With `sort` the rows
    are merged by id (each part is sorted already), else the parts follow each other in bucket
    order. Replaces a file written before; returns its path."""
    out = Path(out_dir)
    key = _id_index(columns) if sort else None
    parts = sorted(p for p in (out / _PARTS).glob("part-*.csv")) if (out / _PARTS).exists() else []
    name = f"{out.name}.csv"
    target = out / (f"{out.name}.zip" if zip else name)
    out.mkdir(parents=True, exist_ok=True)
    aside = target.with_name(target.name + ".tmp")
    with ExitStack() as stack:
        if zip:
            archive = stack.enter_context(zipfile.ZipFile(aside, "w", zipfile.ZIP_DEFLATED))
            entry = zipfile.ZipInfo(name, _ZIP_TIME)
            entry.compress_type = zipfile.ZIP_DEFLATED
            raw = stack.enter_context(archive.open(entry, "w", force_zip64=True))
            handle: IO[str] = stack.enter_context(io.TextIOWrapper(raw, "utf-8", newline=""))
        else:
            handle = stack.enter_context(aside.open("w", encoding="utf-8", newline=""))
        writer = _writer(handle)
        writer.writerow(columns)
        rows = _merged(parts, key) if key is not None else _chained(parts)
        for row in rows:
            if len(row) != len(columns):
                raise ValueError(
                    f"CSV export in {out}: a part has rows of {len(row)} columns, the header "
                    f"{len(columns)} ({list(columns)}); give finish_csv the parts' columns"
                )
            writer.writerow(row)
    os.replace(aside, target)
    return target


def _id_index(columns: Sequence[str]) -> int:
    if "id" not in columns:
        raise ValueError(
            f"CSV export sorted by id, but id is not among the columns {list(columns)}; keep it "
            "in the projection or pass sort=False"
        )
    return list(columns).index("id")


def _read(path: Path) -> Iterator[list[str]]:
    with path.open(encoding="utf-8", newline="") as handle:
        yield from csv.reader(handle)


def _first_row(path: Path) -> list[str] | None:
    with path.open(encoding="utf-8", newline="") as handle:
        return next(csv.reader(handle), None)


def _chained(parts: Iterable[Path]) -> Iterator[list[str]]:
    for path in parts:
        yield from _read(path)


def _merged(parts: Sequence[Path], key: int) -> Iterator[list[str]]:
    """The rows of the sorted `parts`, merged by column `key`. A part is opened when the merge
    reaches its first key: parts of consecutive ranges are read one at a time, and a merge of
    many parts never holds more files open than overlap."""
    waiting = []  # (first key, part number, path), the parts not opened yet
    for number, path in enumerate(parts):
        first = _first_row(path)
        if first is not None:
            waiting.append((first[key], number, path))
    waiting.sort(reverse=True)  # popped from the end: smallest first key first
    heap: list[tuple[str, int, list[str], Iterator[list[str]]]] = []
    while heap or waiting:
        while waiting and (not heap or waiting[-1][0] <= heap[0][0]):
            _, number, path = waiting.pop()
            reader = _read(path)
            row = next(reader)
            heapq.heappush(heap, (row[key], number, row, reader))
        _, number, row, reader = heap[0]
        yield row
        following = next(reader, None)
        if following is None:
            heapq.heappop(heap)
        else:
            heapq.heapreplace(heap, (following[key], number, following, reader))
