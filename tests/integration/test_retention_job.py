"""jobs/retention.py archive on the shared Spark session: a week of back-dated history lands in
the Delta table `archive` as it was in the log (keys, data, watermarks, flags, offsets, the
payload's fingerprint), once, whatever the reruns, horizons and crashes; a dry run changes
nothing. The table is read back with delta-rs, not Spark."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from spark_session import ROOT, read_delta

from streamcore.codecs import get_codec
from streamcore.config import load_config
from streamcore.log import open_log_manager
from streamcore.log.config import ARCHIVER
from streamcore.record import Flag, Record
from streamcore.watermark import Watermark

pytestmark = pytest.mark.spark

DAY_MS = 86_400_000
# A single-object Avro payload: C3 01, the 8 fingerprint bytes, the body.
FINGERPRINT = bytes.fromhex("0123456789abcdef")


def _run(*args: str) -> tuple[int, dict[str, Any]]:
    from jobs import retention

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = retention.main(list(args))
    return code, json.loads(out.getvalue().strip().splitlines()[-1])


def _archive_path() -> Path:
    return Path(os.environ["STREAMCORE_HOME"]) / "delta" / "archive"


def _write_history(
    stream: str, days: int = 7, per_day: int = 20, **options: Any
) -> list[dict[str, Any]]:
    """`per_day` records a day on 2 partitions, appended with timestamps spread over the last
    `days` days (oldest first), as Records, plus one raw value that is not a Record. Returns
    what each record is, by partition and offset."""
    now = int(time.time() * 1000)
    codec = get_codec("avro")
    manager = open_log_manager(load_config())
    written = []
    try:
        manager.create(stream, 2, **options)
        appender = manager.appender(stream)
        for n in range(days * per_day):
            ts = now - (days * DAY_MS) + n * (DAY_MS // per_day)
            data = (
                b"\xc3\x01" + FINGERPRINT + f"body-{n}".encode() if n % 2 else f"plain-{n}".encode()
            )
            record = Record(f"k{n % 13}", data, Watermark.of(ts - 500).value, Flag.DEFAULT)
            (position,) = appender.append_batch(
                [(record.key, codec.encode(record))], partition=n % 2, timestamps=[ts]
            )
            written.append(
                {"ts": ts, "record": record, "at": (position.partition.partition, position.offset)}
            )
        (position,) = appender.append_batch(
            [("raw", b"not a record")], partition=0, timestamps=[now]
        )
        written.append({"ts": now, "record": None, "at": (0, position.offset)})
    finally:
        manager.close()
    return written


def _archived(stream: str) -> dict[tuple[int, int], dict[str, Any]]:
    """The archived rows of `stream` by (partition, offset), of one incarnation or another."""
    rows = _archived_by_incarnation(stream)
    by_offset = {(p, o): row for (_, p, o), row in rows.items()}
    assert len(by_offset) == len(rows), "a record was archived twice"
    return by_offset


def _archived_by_incarnation(stream: str) -> dict[tuple[str | None, int, int], dict[str, Any]]:
    if not _archive_path().exists():
        return {}
    rows = [r for r in read_delta(_archive_path()).to_pylist() if r["stream"] == stream]
    by_offset = {(r["incarnation"], r["partition"], r["offset"]): r for r in rows}
    assert len(by_offset) == len(rows), "a record was archived twice"
    return by_offset


def _incarnation(stream: str) -> str | None:
    manager = open_log_manager(load_config())
    try:
        return manager.incarnation(stream)
    finally:
        manager.close()


def _delete(stream: str) -> None:
    manager = open_log_manager(load_config())
    try:
        assert manager.delete(stream)
    finally:
        manager.close()


def _positions(stream: str) -> list[int | None]:
    manager = open_log_manager(load_config())
    try:
        return manager.committed(stream, ARCHIVER)
    finally:
        manager.close()


def _older_than(written: list[dict[str, Any]], horizon_ms: int) -> list[dict[str, Any]]:
    cut = int(time.time() * 1000) - horizon_ms
    return [w for w in written if w["ts"] < cut]


def test_archive_lands_history_once_as_it_was(spark: Any) -> None:
    stream = "hist/events"
    written = _write_history(stream)
    old = _older_than(written, DAY_MS)

    code, dry = _run("archive", "--streams", stream, "--horizon", "1d", "--dry-run")
    assert code == 0, dry
    assert dry["dry_run"] and dry["streams"][stream]["would_archive"] == len(old)
    assert _archived(stream) == {} and _positions(stream) == [None, None]

    code, first = _run("archive", "--streams", stream, "--horizon", "1d")
    assert code == 0, first
    assert first["archived"] == len(old) and first["bytes"] > 0
    rows = _archived(stream)
    assert sorted(rows) == sorted(w["at"] for w in old)
    for w in old:
        row, record = rows[w["at"]], w["record"]
        assert (row["key"], row["data"], row["watermark"]) == (
            record.key,
            record.data,
            record.watermark,
        )
        assert row["flags"] == int(record.flags)
        assert int(row["timestamp"].timestamp() * 1000) == w["ts"]
        assert row["date"].isoformat() == time.strftime("%Y-%m-%d", time.gmtime(w["ts"] / 1000))
        single_object = record.data.startswith(b"\xc3\x01")
        assert row["schema_fingerprint"] == (FINGERPRINT.hex() if single_object else None)

    code, again = _run("archive", "--streams", stream, "--horizon", "1d")
    assert code == 0 and again["archived"] == 0, again
    assert len(_archived(stream)) == len(old)

    code, rest = _run("archive", "--streams", stream, "--horizon", "0")
    assert code == 0 and rest["archived"] == len(written) - len(old), rest
    rows = _archived(stream)
    assert sorted(rows) == sorted(w["at"] for w in written)
    raw = rows[written[-1]["at"]]
    assert (raw["key"], raw["data"], raw["watermark"]) == ("raw", b"not a record", None)


def test_unknown_stream_is_refused_before_anything_runs(spark: Any) -> None:
    code, summary = _run("archive", "--streams", "hist/nothing-here")
    assert code == 1 and summary["status"] == "failed", summary
    assert "hist/nothing-here" in summary["error"] and "streamcore logs" in summary["error"]


@pytest.mark.parametrize("fault", ["before_delta_commit", "after_delta_commit"])
def test_a_crash_then_a_rerun_archives_every_record_once(spark: Any, fault: str) -> None:
    """The job killed (SIGKILL, in its own process and Spark) before and after its Delta commit,
    then run again: every record in `archive` once, and the positions recovered."""
    stream = f"hist/crash-{fault.replace('_', '-')}"
    written = _write_history(stream, days=2, per_day=10)
    point = (
        "retention.before_delta_commit"
        if fault == "before_delta_commit"
        else f"archive/{stream}@{_incarnation(stream)}.after_delta_commit"
    )
    crashed = subprocess.run(
        [sys.executable, str(ROOT / "jobs" / "retention.py"), "archive", "--streams", stream],
        env={**os.environ, "STREAMCORE_FAULT": point},
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert crashed.returncode == -9, crashed.stdout + crashed.stderr[-3000:]
    landed = len(_archived(stream))
    assert _positions(stream) == [None, None]  # the crash came before the positions moved
    old = _older_than(written, DAY_MS)
    assert landed == (len(old) if fault == "after_delta_commit" else 0)

    code, rerun = _run("archive", "--streams", stream, "--horizon", "0")
    assert code == 0, rerun
    rows = _archived(stream)
    assert sorted(rows) == sorted(w["at"] for w in written)
    if fault == "after_delta_commit":
        assert rerun["streams"][stream]["recovered_positions"], rerun


def _commit(stream: str, group: str, partition: int, offset: int) -> None:
    from streamcore.log import LogPartition

    manager = open_log_manager(load_config())
    try:
        manager.commit_position(LogPartition.of(stream, partition), group, offset)
    finally:
        manager.close()


def _starts(stream: str) -> list[int]:
    manager = open_log_manager(load_config())
    try:
        return manager.start_offsets(stream)
    finally:
        manager.close()


def test_purge_waits_for_the_archiver_and_every_group_then_maintain(spark: Any) -> None:
    """A week of history in small segments, retention one day: nothing is purged before the
    archiver has archived it, a group behind keeps its records until --force, everything
    purged is in `archive`; then OPTIMIZE compacts `archive` and VACUUM removes what it left."""
    stream = "hist/purged"
    written = _write_history(stream, retention="1d", segment_bytes=2048)
    _commit(stream, "app/slow", 0, 3)  # read 3 records of partition 0, then stopped

    code, dry = _run("purge", "--streams", stream, "--dry-run")
    assert code == 0, dry
    held = dry["streams"][stream]["held_by"]
    assert held[ARCHIVER] > 0 and held["app/slow"] > 0 and dry["records_purged"] == 0
    code, kept = _run("purge", "--streams", stream)
    assert code == 0 and kept["segments_purged"] == 0 and _starts(stream) == [0, 0], kept

    # archived in two batches (two appends: files for OPTIMIZE to compact)
    assert _run("archive", "--streams", stream, "--horizon", "3d")[0] == 0
    assert _run("archive", "--streams", stream, "--horizon", "1d")[0] == 0
    code, purged = _run("purge", "--streams", stream)
    assert code == 0, purged
    after = _starts(stream)
    assert after[0] == 0 and after[1] > 0  # partition 0 waits for app/slow
    held = purged["streams"][stream]["held_by"]
    assert set(held) == {"app/slow"} and held["app/slow"] > 0
    assert purged["records_purged"] == after[1] > 0

    code, forced = _run("purge", "--streams", stream, "--force")
    assert code == 0, forced
    lost = forced["streams"][stream]["lost"]
    assert set(lost) == {"app/slow"} and lost["app/slow"] == _starts(stream)[0] - 3
    # every record retention took from the log is in the archive
    archived = _archived(stream)
    starts = _starts(stream)
    gone = [w["at"] for w in written if w["at"][1] < starts[w["at"][0]]]
    assert gone and set(gone) <= set(archived)

    code, before = _run("maintain", "--tables", "archive", "--dry-run")
    assert code == 0, before
    sizes = before["tables"]["archive"]["sizes"]
    assert sizes["snapshot_files"] >= 2
    with pytest.raises(SystemExit) as refused:  # an argument error, before Spark
        _run("maintain", "--tables", "archive", "--vacuum-hours", "0")
    assert refused.value.code == 2
    code, done = _run("maintain", "--tables", "archive", "--vacuum-hours", "0", "--force-vacuum")
    assert code == 0, done
    optimize, vacuum = done["tables"]["archive"]["optimize"], done["tables"]["archive"]["vacuum"]
    assert optimize["files_after"] < optimize["files_before"] == sizes["snapshot_files"]
    assert vacuum["files_after"] == optimize["files_after"] and vacuum["bytes_removed"] > 0
    assert _archived(stream) == archived  # the same rows, fewer files


def test_a_recreated_stream_archives_under_its_new_incarnation_and_stops_no_other(
    spark: Any,
) -> None:
    """Two archived streams; one is deleted and created again (offsets start at 0 again). One
    run archives both: the recreated stream's new records under its new incarnation, beside
    the old incarnation's rows, and the other stream's history, which the purge then takes
    from the log. (The archiver's batch of the recreated log used to be refused as another
    log's, failing the whole step before the other stream.)"""
    recreated, steady = "hist/a-recreated", "hist/b-steady"
    old = _write_history(recreated, days=2, per_day=10)
    code, first = _run("archive", "--streams", recreated, "--horizon", "0")
    assert code == 0 and first["archived"] == len(old), first
    old_incarnation = _incarnation(recreated)
    _delete(recreated)
    new = _write_history(recreated, days=1, per_day=6)
    new_incarnation = _incarnation(recreated)
    assert new_incarnation not in (None, old_incarnation)
    history = _write_history(steady, retention="1d", segment_bytes=2048)

    code, second = _run("archive", "--streams", f"{recreated},{steady}", "--horizon", "0")
    assert code == 0, second
    assert second["failed_streams"] == [], second
    again = second["streams"][recreated]
    assert (again["incarnation"], again["batch"], again["archived"]) == (
        new_incarnation,
        0,
        len(new),
    )
    assert second["streams"][steady]["archived"] == len(history)
    rows = _archived_by_incarnation(recreated)
    assert sorted(rows) == sorted(
        [(old_incarnation, *w["at"]) for w in old] + [(new_incarnation, *w["at"]) for w in new]
    )
    for w in new[:-1]:  # the last one is the raw value, not a Record
        assert rows[(new_incarnation, *w["at"])]["data"] == w["record"].data
    assert len(_archived(steady)) == len(history)

    code, purged = _run("purge", "--streams", f"{recreated},{steady}")
    assert code == 0 and purged["streams"][steady]["segments_purged"] > 0, purged
    assert purged["streams"][steady]["held_by"] == {}


def test_a_failing_stream_is_reported_while_the_others_are_archived(spark: Any) -> None:
    """A stream whose batch is refused (here the archiver's position lies beyond the log's
    end) fails alone: the others are archived, the summary says which stream failed and why,
    and the exit code is 1, or 0 with --partial-ok (the retention DAG's way, so its purge,
    compact and maintain still run)."""
    broken, fine = "hist/c-broken", "hist/d-fine"
    _write_history(broken, days=1, per_day=4)
    written = _write_history(fine, days=2, per_day=10)
    _commit(broken, ARCHIVER, 1, 10_000)

    code, failed = _run("archive", "--streams", f"{broken},{fine}", "--horizon", "0")
    assert code == 1 and failed["status"] == "failed", failed
    assert failed["failed_streams"] == [broken]
    assert broken in failed["error"] and "beyond the" in failed["error"], failed["error"]
    assert failed["streams"][broken]["status"] == "failed"
    assert "streamcore position" in failed["streams"][broken]["error"]
    assert failed["streams"][fine]["archived"] == len(written)
    assert sorted(_archived(fine)) == sorted(w["at"] for w in written)
    assert _archived(broken) == {}

    more = _write_history(fine, days=1, per_day=4)
    code, partial = _run(
        "archive", "--streams", f"{broken},{fine}", "--horizon", "0", "--partial-ok"
    )
    assert code == 0 and partial["status"] == "partial", partial
    assert partial["failed_streams"] == [broken]
    assert partial["streams"][fine]["archived"] == len(more)


def test_a_batch_of_the_archiver_before_incarnations_keyed_it_is_finished_once(
    spark: Any,
) -> None:
    """A batch the archiver landed under its former app id (`archive/<stream>`, before it was
    keyed by incarnation) whose positions the job died before committing: the first keyed run
    commits them, as the recovery of that app id would have, rather than archive the records
    a second time."""
    from jobs.retention import archive_rows
    from jobs.spark.batch_positions import plan_batch
    from jobs.spark.delta.catalog import Catalog
    from jobs.spark.delta.sink import DeltaBatchSink
    from jobs.spark.logs.streams import read_stream
    from streamcore.names import Name

    stream = "hist/unkeyed"
    written = _write_history(stream, days=2, per_day=10)
    config = load_config()
    manager = open_log_manager(config)
    try:
        path = Catalog(spark, config).ensure("archive")
        sink = DeltaBatchSink(spark, path, f"archive/{stream}/{ARCHIVER}")
        plan = plan_batch(sink, manager, stream, ARCHIVER)
        rows = archive_rows(read_stream(spark, manager, Name.of(stream), plan.ranges), stream, None)
        sink.write(plan, lambda: rows.write.format("delta").mode("append").save(path))
    finally:
        manager.close()
    assert _positions(stream) == [None, None] and len(_archived(stream)) == len(written)

    code, summary = _run("archive", "--streams", stream, "--horizon", "0")
    assert code == 0 and summary["archived"] == 0, summary
    assert summary["streams"][stream]["recovered_positions"], summary
    assert len(_archived(stream)) == len(written)  # _archived checks each row is there once
    assert _positions(stream) == [plan.ranges[0][1], plan.ranges[1][1]]
