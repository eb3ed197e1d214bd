"""jobs/audit.py on the shared Spark session: batch mode lands entries once per event id (the
relay's duplicates merged away), quarantines bad and future-dated entries, refuses a batch over
the failure threshold; interval mode rebuilds deleted rows of its interval exactly and moves no
position. The table is read back with delta-rs, not Spark."""

from __future__ import annotations

import contextlib
import io
import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from audit_support import append_entries, entry, relay_time
from spark_session import read_delta

from streamcore.config import load_config
from streamcore.log import open_log_manager

pytestmark = pytest.mark.spark

STREAM, GROUP = "audit/entries", "audit/delta"
# Event dates two hours back (the job refuses dates in its future), whole 10-minute intervals.
T0 = (datetime.now(UTC) - timedelta(hours=2)).replace(minute=0, second=0, microsecond=0)


def _run(*args: str) -> tuple[int, dict[str, Any]]:
    from jobs import audit

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = audit.main(list(args))
    return code, json.loads(out.getvalue().strip().splitlines()[-1])


def _home() -> Path:
    return Path(os.environ["STREAMCORE_HOME"])


def _entry(n: int, **fields: Any) -> dict[str, Any]:
    return entry(n, event_date=T0 + timedelta(seconds=20 * n), **fields)


def _append(*items: dict[str, Any] | bytes) -> None:
    """Append entries (or raw values, at T0) as the relay does, each a second after its event."""
    at = [int(T0.timestamp() * 1000) if isinstance(i, bytes) else relay_time(i) for i in items]
    append_entries(items, timestamps=at)


def _table() -> dict[str, dict[str, Any]]:
    rows = read_delta(_home() / "delta" / "audit").to_pylist()
    assert len(rows) == len({r["event_id"] for r in rows}), "an event id landed twice"
    return {r["event_id"]: r for r in rows}


def _committed() -> list[int | None]:
    manager = open_log_manager(load_config())
    try:
        return manager.committed(STREAM, GROUP)
    finally:
        manager.close()


def test_batches_land_each_entry_once_and_quarantine_bad_ones(spark) -> None:
    good = [_entry(n) for n in range(30)]
    unknown = _entry(30, event_type="documentExploded")
    future = entry(31, event_date=datetime.now(UTC) + timedelta(days=1))
    _append(*good, good[5], unknown, future, b"not an audit record")

    # 3 bad of 34: over the default threshold (0), nothing lands and the position stays.
    code, failed = _run("batch")
    assert code == 1 and "over the --failure-threshold" in failed["error"]
    assert "expect_column_values_to_be_in_set(event_type)" in failed["error"]
    assert not (_home() / "delta" / "audit").exists() and _committed() == [None]

    code, summary = _run("batch", "--failure-threshold", "0.1")
    assert code == 0, summary
    assert (summary["read"], summary["quarantined"]) == (34, 3)
    assert (summary["landed"], summary["duplicates"]) == (30, 1)  # good[5] twice
    assert summary["by_event_type"] == {"documentModified": 31}
    assert summary["lag"] == 0 and _committed() == [34]
    table = _table()
    assert sorted(table) == sorted(e["event_id"] for e in good)
    row = table[good[7]["event_id"]]
    assert row["event_date"] == good[7]["event_date"]
    assert row["event_day"] == good[7]["event_date"].date()
    assert row["extended"] == [("n", "7")] or row["extended"] == {"n": "7"}
    quarantined = read_delta(_home() / "delta" / "quarantine").to_pylist()
    reasons = sorted(tuple(q["failed_expectations"]) for q in quarantined)
    assert len(reasons) == 3
    assert any("event_date" in r[0] for r in reasons)
    assert any("AuditEntry" in r[0] for r in reasons)  # the junk did not decode

    # The relay repeats a batch after a crash: the repeats merge away, the new entry lands.
    _append(good[0], good[29], _entry(40))
    code, again = _run("batch")
    assert code == 0, again
    assert (again["batch"], again["read"], again["quarantined"]) == (1, 3, 0)
    assert (again["landed"], again["duplicates"]) == (1, 2)
    assert len(_table()) == 31 and _committed() == [37]

    code, idle = _run("batch")
    assert code == 0 and idle["read"] == 0 and idle["landed"] == 0


def test_an_interval_rebuilds_its_rows_and_moves_no_position(spark) -> None:
    from delta.tables import DeltaTable

    entries = [_entry(n) for n in range(60)]  # 20 s apart: three 10-minute intervals
    _append(*entries)
    code, summary = _run("batch")
    assert code == 0 and summary["landed"] == 60, summary
    before, position = _table(), _committed()

    start, end = T0 + timedelta(minutes=10), T0 + timedelta(minutes=20)
    path = str(_home() / "delta" / "audit")
    DeltaTable.forPath(spark, path).delete(
        f"event_date >= timestamp_millis({int(start.timestamp() * 1000)}) AND "
        f"event_date < timestamp_millis({int(end.timestamp() * 1000)})"
    )
    assert len(_table()) == 30

    for landed in (30, 0):  # a rerun of the same interval changes nothing
        code, rebuilt = _run("interval", "--start", start.isoformat(), "--end", end.isoformat())
        assert code == 0, rebuilt
        counts = (rebuilt["read"], rebuilt["landed"], rebuilt["duplicates"])
        assert counts == (30, landed, 30 - landed)
        assert _table() == before
    assert _committed() == position

    with pytest.raises(SystemExit) as refused:  # checked before Spark, as argparse exits
        _run("interval", "--start", end.isoformat(), "--end", start.isoformat())
    assert refused.value.code == 2


def test_an_interval_older_than_retention_is_refused(spark, monkeypatch) -> None:
    """Replacing an interval the log purged would delete rows nothing can give back."""
    monkeypatch.setenv("STREAMCORE_LOG_SEGMENT_BYTES", "4096")
    monkeypatch.setenv("STREAMCORE_LOG_RETENTION", "1h")
    _append(*(_entry(n) for n in range(20)))  # sealed by the next batch, then purged
    _append(*(_entry(n) for n in range(20, 40)))
    manager = open_log_manager(load_config())
    try:
        # Retention judges a segment by when it was written: purge as if two hours had passed.
        later = int((datetime.now(UTC) + timedelta(hours=2)).timestamp() * 1000)
        # forced: nothing archived the stream, and the archiver would hold it
        purged = manager.backend_for(STREAM).purge(STREAM, now_ms=later, force=True)
        assert purged[0], "retention purged nothing"
    finally:
        manager.close()

    start, end = T0, T0 + timedelta(minutes=10)
    code, refused = _run("interval", "--start", start.isoformat(), "--end", end.isoformat())
    assert code == 1 and "begins before the oldest entry" in refused["error"]
    assert not (_home() / "delta" / "audit").exists()
