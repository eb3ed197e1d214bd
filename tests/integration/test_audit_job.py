"""jobs/audit.py on the shared Spark session: batch mode lands entries once per event id (the
relay's duplicates merged away), quarantines bad and future-dated entries, refuses a batch over
the failure threshold; what `publish` accepts lands and what the job's rules refuse `publish`
refuses; interval mode rebuilds deleted rows of its interval exactly and moves no position.
The table is read back with delta-rs, not Spark."""

from __future__ import annotations

import contextlib
import io
import json
import os
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from audit_support import append_entries, entry, relay_time
from spark_session import read_delta

from streamcore.audit import QUEUE, InvalidAuditEntryError, publish, relay
from streamcore.audit.entry import entry_codec
from streamcore.audit.rules import configured_rules, publish_rules
from streamcore.codecs import get_codec
from streamcore.codecs.avro import default_store
from streamcore.config import load_config
from streamcore.errors import CodecError
from streamcore.log import open_log_manager
from streamcore.outbox import Outbox, Registry, VirtualQueue
from streamcore.record import Record
from streamcore.watermark import Watermark

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


def _unchecked(item: dict[str, Any]) -> bytes:
    """The Record of `item` as a writer that skips streamcore.audit's checks makes it (another
    language, an older version): the job must still judge it."""
    event_date = item["event_date"]
    millis = int(event_date.timestamp() * 1000) if event_date is not None else None
    data = entry_codec().encode({**item, "event_date": millis})  # CodecError if not Avro
    assert millis is not None
    return get_codec("avro").encode(Record(item["event_id"], data, Watermark.of(millis).value))


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
    unknown = _unchecked(_entry(30, event_type="documentExploded"))
    future = _unchecked(entry(31, event_date=datetime.now(UTC) + timedelta(days=1)))
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


def _breaking(expectation: Any, valid: dict[str, Any]) -> dict[str, Any]:
    """`valid` changed in the field of `expectation` so that it breaks it (`valid` sets every
    field, so it meets any row condition)."""
    kwargs, kind = expectation.kwargs, expectation.type
    column = kwargs["column"]
    value: Any
    if kind == "expect_column_values_to_not_be_null":
        value = None
    elif kind == "expect_column_values_to_match_regex":
        value = " " + valid[column]  # every pattern of AuditEntry.avsc is anchored at the start
    elif kind == "expect_column_value_lengths_to_be_between":
        value = valid[column] + "x" * (kwargs["max_value"] + 1 - len(valid[column]))
    elif kind == "expect_column_values_to_be_in_set":
        value = valid[column] + "Unknown"
    elif kind == "expect_column_values_to_be_between" and kwargs.get("max_value") is not None:
        value = kwargs["max_value"] + timedelta(days=1)
    else:
        pytest.fail(f"no entry breaks {expectation.name}: teach _breaking its kind of rule")
    return {**valid, column: value}


def test_every_rule_the_job_enforces_is_refused_at_publish(spark, tmp_path) -> None:
    """Issue 25: publish accepted entries the job refuses, and with the default threshold 0 one
    of them stopped all landing. Driven by the job's own suite, so a new rule is covered: an
    entry that breaks a row-level expectation is refused by publish, naming the field (and the
    rule, for the rules on whole entries), and the job quarantines it under that expectation."""
    from jobs import audit

    registry = Registry()
    outbox = Outbox(f"sqlite:///{tmp_path / 'outbox.db'}", registry=registry)
    outbox.create_schema()
    suite = audit.audit_suite(_schema(), configured_rules(load_config()))
    rules = suite.row_level
    assert {e.kwargs["column"] for e in rules} >= {"event_type", "doc_path", "event_date"}
    reaching_the_job: list[tuple[Any, bytes]] = []
    unencodable: set[str] = set()
    for n, expectation in enumerate(rules):
        bad = _breaking(expectation, _entry(100 + n, comment="checked"))
        with pytest.raises(InvalidAuditEntryError) as refused, outbox.engine.begin() as conn:
            publish(conn, bad, registry=registry)
        assert refused.value.field == expectation.kwargs["column"], (expectation.name, refused)
        if expectation.origin == "streamcore.audit":  # the schema's rules name field and limit
            assert expectation.name in str(refused.value)
        try:
            reaching_the_job.append((expectation, _unchecked(bad)))
        except CodecError:  # a required field left out: Avro cannot carry it to the job
            assert expectation.type == "expect_column_values_to_not_be_null"
            unencodable.add(expectation.kwargs["column"])
    outbox.close()
    required = {f["name"] for f in _schema().raw["fields"] if not isinstance(f["type"], list)}
    assert unencodable == required

    _append(*(record for _, record in reaching_the_job))
    code, summary = _run("batch", "--failure-threshold", "1")
    assert code == 0 and summary["quarantined"] == len(reaching_the_job), summary
    found = {
        q["offset"]: list(q["failed_expectations"])
        for q in read_delta(_home() / "delta" / "quarantine").to_pylist()
    }
    assert sorted(found) == list(range(len(reaching_the_job)))
    for n, (expectation, _) in enumerate(reaching_the_job):  # an odd event type is unknown too
        assert expectation.name in found[n], (expectation.name, found[n])


def _schema() -> Any:
    from jobs.audit import SCHEMA

    return default_store().by_name(SCHEMA)


@pytest.fixture
def app_event_types(monkeypatch) -> Iterator[None]:
    """[audit] event_types of an application, in the environment, for publish and the job."""
    monkeypatch.setenv("STREAMCORE_AUDIT_EVENT_TYPES", "appReportExported, appReportShared")
    publish_rules.cache_clear()  # publish reads the configuration once per process
    yield
    publish_rules.cache_clear()


def test_entries_publish_accepts_land_with_the_default_threshold(
    spark, tmp_path, app_event_types
) -> None:
    """Published through the outbox and the relay into the log the job reads, with the default
    --failure-threshold 0: entries at the edges of the rules all land."""
    now = datetime.now(UTC)
    entries = [
        _entry(0),
        _entry(1, doc_id=None, doc_path=None, event_type="loginSuccess"),  # about no document
        _entry(2, doc_id=None),  # a path without an id
        _entry(3, event_type="appReportExported"),  # an application's own type ([audit])
        entry(4, event_date=now + timedelta(seconds=300)),  # within the clock skew
        _entry(5, event_id="e" * 200, comment="c" * 4096, doc_path="/" + "p" * 4095),
        _entry(6, event_type="recoveryRedrive", category="recovery", extended={}),
    ]
    registry = Registry()
    with open_log_manager(load_config()) as manager:
        relay(manager, registry=registry)
        outbox = Outbox(f"sqlite:///{tmp_path / 'outbox.db'}", registry=registry)
        outbox.create_schema()
        with outbox.engine.begin() as conn:
            for item in entries:
                publish(conn, item, registry=registry)
        VirtualQueue(outbox).consume_all(QUEUE)
        outbox.close()
    code, summary = _run("batch")
    assert code == 0, summary
    assert (summary["read"], summary["landed"], summary["quarantined"]) == (7, 7, 0)
    assert sorted(_table()) == sorted(e["event_id"] for e in entries)


def test_an_empty_batch_reports_the_keys_of_a_batch(spark) -> None:
    _append(_entry(0), _entry(0))
    code, landed = _run("batch")
    assert code == 0 and landed["duplicates"] == 1, landed
    code, idle = _run("batch")
    assert code == 0 and idle["read"] == 0, idle
    assert sorted(idle) == sorted(landed)
    counts = (idle["landed"], idle["duplicates"], idle["quarantined"], idle["by_event_type"])
    assert counts == (0, 0, 0, {})


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


def test_an_interval_rebuild_finds_entries_the_relay_appended_hours_late(spark) -> None:
    """The relay was down for an hour and a half: the first interval's entries reached the log
    that long after their events, behind the next interval's. A rebuild of the first interval
    (its rows lost from the table) lands every one of them, whatever their append time."""
    on_time = [_entry(n) for n in range(30, 60)]  # [T0 + 10 min, T0 + 20 min), relayed at once
    late = [_entry(n) for n in range(30)]  # [T0, T0 + 10 min), relayed 90 minutes later
    _append(*on_time)
    late_ms = int((T0 + timedelta(minutes=100)).timestamp() * 1000)
    append_entries(late, timestamps=[late_ms + n for n in range(len(late))])

    start, end = T0, T0 + timedelta(minutes=10)
    code, rebuilt = _run("interval", "--start", start.isoformat(), "--end", end.isoformat())
    assert code == 0, rebuilt
    assert (rebuilt["read"], rebuilt["landed"]) == (30, 30), rebuilt
    assert sorted(_table()) == sorted(e["event_id"] for e in late)


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
