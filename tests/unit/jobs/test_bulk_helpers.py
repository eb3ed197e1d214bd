"""The pure-Python helpers of jobs/spark/bulk, without Spark: how values are
rendered in a CSV export, and the merge of CSV parts into one file (parts written by hand here;
tests/integration/test_bulk_spark.py writes them from Spark)."""

from __future__ import annotations

import csv
import io
import zipfile
from datetime import UTC, date, datetime, timedelta, timezone
from pathlib import Path

import pytest

from jobs.spark.bulk.csv_export import finish_csv, render


def test_render_is_deterministic() -> None:
    assert render(None) == ""
    assert (render(True), render(False)) == ("true", "false")
    assert render({"b": "2", "a": 'é,"x"'}) == '{"a": "é,\\"x\\"", "b": "2"}'
    assert render(["x", None]) == '["x", null]'
    assert render(datetime(2026, 11, 24, 10, 0, tzinfo=UTC)) == "2026-11-24T10:00:00Z"
    paris = timezone(timedelta(hours=1))
    assert render(datetime(2026, 11, 24, 11, 0, 0, 5000, paris)) == "2026-11-24T10:00:00.005000Z"
    # PySpark returns timestamps as naive datetimes in the local time zone.
    local = datetime(2026, 11, 24, 10, 0, tzinfo=UTC).astimezone().replace(tzinfo=None)
    assert render(local) == "2026-11-24T10:00:00Z"
    assert render(date(2026, 1, 2)) == "2026-01-02"
    assert render(b"\x00\xff") == "AP8="
    assert (render(12), render(1.5)) == ("12", "1.5")


def _part(out: Path, bucket: int, rows: list[list[str]]) -> None:
    (out / "parts").mkdir(parents=True, exist_ok=True)
    with (out / "parts" / f"part-{bucket:06d}.csv").open("w", encoding="utf-8", newline="") as f:
        csv.writer(f, lineterminator="\r\n").writerows(rows)


def _read(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text, newline="")))


def test_finish_merges_parts_by_id_even_when_they_overlap(tmp_path: Path) -> None:
    out = tmp_path / "cmd-1"
    _part(out, 0, [["a", "1"], ["d", "multi\r\nline"]])
    _part(out, 1, [["b", 'say "hi"'], ["c", "x,y"], ["e", "é"]])
    _part(out, 2, [])  # an empty bucket (its documents were deleted since the scroll)
    _part(out, 3, [["f", ""]])
    path = finish_csv(out, ["id", "v"], zip=False)
    assert path == out / "cmd-1.csv"
    text = path.read_bytes().decode("utf-8")
    assert text.startswith('id,v\r\na,1\r\nb,"say ""hi"""\r\n')
    assert _read(text) == [
        ["id", "v"],
        ["a", "1"],
        ["b", 'say "hi"'],
        ["c", "x,y"],
        ["d", "multi\r\nline"],
        ["e", "é"],
        ["f", ""],
    ]
    unsorted = finish_csv(out, ["id", "v"], sort=False, zip=False)
    assert [r[0] for r in _read(unsorted.read_bytes().decode("utf-8"))] == [
        "id",
        *"adbcef",
    ]


def test_finish_zips_and_rewrites_the_same_bytes(tmp_path: Path) -> None:
    out = tmp_path / "cmd-2"
    _part(out, 0, [["a", "1"]])
    first = finish_csv(out, ["id", "v"]).read_bytes()
    second = finish_csv(out, ["id", "v"])
    assert second == out / "cmd-2.zip" and second.read_bytes() == first
    with zipfile.ZipFile(second) as archive:
        assert archive.namelist() == ["cmd-2.csv"]
        assert archive.read("cmd-2.csv") == b"id,v\r\na,1\r\n"
    assert not list(out.glob("*.tmp"))


def test_finish_without_parts_writes_the_header(tmp_path: Path) -> None:
    path = finish_csv(tmp_path / "empty", ["id", "title"], zip=False)
    assert path.read_bytes() == b"id,title\r\n"


def test_finish_refuses_mismatched_columns(tmp_path: Path) -> None:
    _part(tmp_path / "x", 0, [["a", "1", "extra"]])
    with pytest.raises(ValueError, match="rows of 3 columns, the header 2"):
        finish_csv(tmp_path / "x", ["id", "v"])
    with pytest.raises(ValueError, match="id is not among the columns"):
        finish_csv(tmp_path / "x", ["title", "v"])
