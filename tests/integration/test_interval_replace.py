"""`replace_interval` on a real Delta table: a rerun of an interval replaces it (no duplicate), a
neighbouring interval leaves it alone, rows outside the interval are refused with nothing
written (on a new table too, where Delta itself does not check)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from spark_session import delta_version, read_delta

from jobs.spark.logs.intervals import IntervalMismatchError, replace_interval
from streamcore.errors import StreamcoreError

pytestmark = pytest.mark.spark

HOUR = 3_600_000
T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def _rows(spark, *items: tuple[str, int | None], value: str = "a"):
    """A DataFrame of (id, at: timestamp of T0 + ms, value)."""
    data = [
        (i, None if ms is None else datetime.fromtimestamp((T0 + ms) / 1000, UTC), value)
        for i, ms in items
    ]
    return spark.createDataFrame(data, "id string, at timestamp, value string")


def _content(path: Path) -> list[tuple[str, str]]:
    return sorted(zip(*read_delta(path).select(["id", "value"]).to_pydict().values(), strict=True))


def test_a_rerun_replaces_the_interval_and_a_neighbour_leaves_it_alone(spark, tmp_path) -> None:
    path = tmp_path / "audit"
    first = _rows(spark, ("a", 0), ("b", HOUR - 1))
    v1 = replace_interval(first, str(path), "at", T0, T0 + HOUR, partition_by=("value",))
    assert _content(path) == [("a", "a"), ("b", "a")]
    # the rerun (another attempt of the same task, with one row fewer and new values)
    v2 = replace_interval(_rows(spark, ("a", 5), value="b"), str(path), "at", T0, T0 + HOUR)
    assert _content(path) == [("a", "b")]
    assert v2 == v1 + 1 == delta_version(path)
    # the next interval: its own rows, the first interval's untouched
    nxt = _rows(spark, ("c", HOUR), ("d", 2 * HOUR - 1), value="c")
    replace_interval(nxt, str(path), "at", T0 + HOUR, T0 + 2 * HOUR)
    assert _content(path) == [("a", "b"), ("c", "c"), ("d", "c")]
    # an empty result empties its interval only
    replace_interval(_rows(spark), str(path), "at", T0, T0 + HOUR)
    assert _content(path) == [("c", "c"), ("d", "c")]


@pytest.mark.parametrize("table_exists", [False, True], ids=["new-table", "existing-table"])
def test_rows_outside_the_interval_are_refused_and_nothing_is_written(
    spark, tmp_path, table_exists: bool
) -> None:
    path = tmp_path / "audit"
    if table_exists:
        replace_interval(_rows(spark, ("a", 10)), str(path), "at", T0, T0 + HOUR)
    before = delta_version(path) if table_exists else 0
    # the start is in the interval, the end is not; a row with no time is in no interval
    bad = _rows(spark, ("w", 0), ("x", HOUR - 1), ("y", HOUR), ("z", -1), ("n", None))
    with pytest.raises(
        IntervalMismatchError, match=rf"^3 row\(s\) .* null, at {T0 - 1} to {T0 + HOUR} ms;"
    ):
        replace_interval(bad, str(path), "at", T0, T0 + HOUR)
    assert delta_version(path) == before  # a new table is created (empty) before the write
    assert _content(path) == ([("a", "a")] if table_exists else [])


def test_the_interval_column_must_be_a_timestamp(spark, tmp_path) -> None:
    df = spark.createDataFrame([("a", T0)], "id string, at long")
    with pytest.raises(StreamcoreError, match=r"'at' is bigint; .*F\.timestamp_millis"):
        replace_interval(df, str(tmp_path / "t"), "at", T0, T0 + HOUR)
    with pytest.raises(StreamcoreError, match="'when' is missing"):
        replace_interval(df, str(tmp_path / "t"), "when", T0, T0 + HOUR)
    with pytest.raises(StreamcoreError, match="ends before it starts"):
        replace_interval(_rows(spark), str(tmp_path / "t"), "at", T0 + HOUR, T0)
    assert not (tmp_path / "t").exists()
