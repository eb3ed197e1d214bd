"""jobs/backfill.py on the shared Spark session: a week of history, its oldest days archived then
purged from the log, replayed over an interval that spans the archive and the hot log into
another stream: the same records (keys, data, watermarks, append times, order per partition),
flagged REPLAYED; once per interval whatever the reruns and crashes; a dry run appends nothing."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from spark_session import ROOT

from streamcore.codecs import get_codec
from streamcore.config import load_config
from streamcore.log import LogPartition, open_log_manager
from streamcore.record import Flag, Record
from streamcore.watermark import Watermark

pytestmark = pytest.mark.spark

DAY_MS = 86_400_000
SOURCE = "hist/source"


def _run(module: str, *args: str) -> tuple[int, dict[str, Any]]:
    import importlib

    job = importlib.import_module(f"jobs.{module}")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = job.main(list(args))
    return code, json.loads(out.getvalue().strip().splitlines()[-1])


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat()


def _manager() -> Any:
    return open_log_manager(load_config())


def _history(retention: str = "1d") -> tuple[int, list[tuple[int, int, Record]]]:
    """A week of Records on SOURCE (2 partitions, `retention`, small segments), archived up to a
    day ago and purged by that retention. Returns now and (partition, append time, record) in
    order."""
    now = int(time.time() * 1000)
    codec = get_codec("avro")
    written = []
    manager = _manager()
    try:
        manager.create(SOURCE, 2, retention=retention, segment_bytes=2048)
        appender = manager.appender(SOURCE)
        for n in range(140):
            ts = now - 7 * DAY_MS + n * (DAY_MS // 20)
            record = Record(f"k{n % 17}", f"event-{n}".encode(), Watermark.of(ts - 100).value)
            appender.append_batch(
                [(record.key, codec.encode(record))], partition=n % 2, timestamps=[ts]
            )
            written.append((n % 2, ts, record))
    finally:
        manager.close()
    assert _run("retention", "archive", "--streams", SOURCE, "--horizon", "1d")[0] == 0
    code, purged = _run("retention", "purge", "--streams", SOURCE)
    assert code == 0 and (purged["records_purged"] > 0) == (retention == "1d"), purged
    return now, written


def _create(name: str, partitions: int = 2) -> None:
    manager = _manager()
    try:
        manager.create(name, partitions)
    finally:
        manager.close()


def _read(name: str) -> dict[int, list[tuple[int, Record]]]:
    """Every record of `name` per partition: (append time, decoded Record)."""
    codec = get_codec("avro")
    manager = _manager()
    try:
        out: dict[int, list[tuple[int, Record]]] = {}
        for p, end in enumerate(manager.end_offsets(name)):
            out[p] = []
            for offset in range(end):
                _key, value, ts = manager.record_at(LogPartition.of(name, p), offset)
                out[p].append((ts, codec.decode(value)))
        return out
    finally:
        manager.close()


@pytest.fixture
def history(spark: Any) -> tuple[int, list[tuple[int, int, Record]]]:
    """Per test: each test has its own STREAMCORE_HOME (tests/conftest.py)."""
    return _history()


def _expected(
    written: list[tuple[int, int, Record]], start: int, end: int
) -> dict[int, list[tuple[int, Record]]]:
    out: dict[int, list[tuple[int, Record]]] = {0: [], 1: []}
    for p, ts, record in written:
        if start <= ts < end:
            out[p].append((ts, record))
    return out


def _same(replayed: dict[int, list[tuple[int, Record]]], expected: dict) -> None:
    assert {p: len(v) for p, v in replayed.items()} == {p: len(v) for p, v in expected.items()}
    for p, records in expected.items():
        for (ts, got), (want_ts, want) in zip(replayed[p], records, strict=True):
            assert (got.key, got.data, got.watermark, ts) == (
                want.key,
                want.data,
                want.watermark,
                want_ts,
            )
            assert got.flags == want.flags | Flag.INTERNAL2  # REPLAYED


def test_a_replay_spanning_archive_and_log_gives_back_the_records(history) -> None:
    now, written = history
    start, end = now - 6 * DAY_MS, now - DAY_MS // 2
    window = ["--stream", SOURCE, "--start", _iso(start), "--end", _iso(end)]
    _create("replay/source")
    expected = _expected(written, start, end)
    total = sum(len(v) for v in expected.values())

    code, dry = _run("backfill", *window, "--target", "replay/source", "--dry-run")
    assert code == 0, dry
    assert dry["would_append"] == total and 0 < dry["from_archive"] < total, dry
    assert _read("replay/source") == {0: [], 1: []}

    code, done = _run("backfill", *window, "--target", "replay/source")
    assert code == 0 and done["appended"] == total, done
    _same(_read("replay/source"), expected)

    code, again = _run("backfill", *window, "--target", "replay/source")
    assert code == 0 and again["appended"] == 0 and again["already_replayed"], again
    _same(_read("replay/source"), expected)


def test_an_interval_retention_purged_entirely_comes_from_the_archive(history) -> None:
    now, written = history
    start, end = now - 6 * DAY_MS, now - 5 * DAY_MS  # the log holds none of it, nor what follows
    window = ["--stream", SOURCE, "--start", _iso(start), "--end", _iso(end)]
    _create("replay/old")
    expected = _expected(written, start, end)
    code, done = _run("backfill", *window, "--target", "replay/old")
    assert code == 0, done
    assert done["appended"] == done["from_archive"] == sum(map(len, expected.values())) > 0
    _same(_read("replay/old"), expected)


def test_a_compacted_stream_replays_every_version_from_the_archive(
    spark: Any, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "streamcore.toml"
    config.write_text(
        (ROOT / "include" / "streamcore.toml").read_text()
        + '\n[[log.match]]\nnamespace = "hist"\nconfig = "default"\ncompact = true\n'
    )
    monkeypatch.setenv("STREAMCORE_CONFIG", str(config))
    now, written = _history(retention="0")  # kept in the log, archived up to a day ago
    code, compacted = _run("retention", "compact", "--streams", SOURCE)
    assert code == 0 and compacted["records_removed"] > 0, compacted
    start, end = now - 7 * DAY_MS, now - DAY_MS // 2
    window = ["--stream", SOURCE, "--start", _iso(start), "--end", _iso(end)]
    _create("replay/versions")
    expected = _expected(written, start, end)
    code, done = _run("backfill", *window, "--target", "replay/versions")
    assert code == 0, done
    assert done["appended"] == sum(map(len, expected.values())), done
    assert 0 < done["from_archive"] < done["appended"]
    _same(_read("replay/versions"), expected)  # every version, not the survivors


def test_a_crash_in_the_middle_then_a_rerun_appends_each_record_once(history) -> None:
    now, written = history
    start, end = now - 5 * DAY_MS, now - DAY_MS // 2
    window = ["--stream", SOURCE, "--start", _iso(start), "--end", _iso(end)]
    _create("replay/crash")
    crashed = subprocess.run(
        [sys.executable, str(ROOT / "jobs" / "backfill.py"), *window, "--target", "replay/crash"],
        env={**os.environ, "STREAMCORE_FAULT": "backfill.mid_append"},
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert crashed.returncode == -9, crashed.stdout + crashed.stderr[-3000:]
    partial = _read("replay/crash")
    assert len(partial[0]) > 0 and partial[1] == []  # killed after partition 0's batch
    code, resumed = _run("backfill", *window, "--target", "replay/crash")
    assert code == 0, resumed
    _same(_read("replay/crash"), _expected(written, start, end))


def test_bad_replays_are_refused_with_the_fix(spark: Any) -> None:
    now = int(time.time() * 1000)
    manager = _manager()
    try:
        manager.create("hist/unarchived", 1, retention="1d", segment_bytes=1024)
        appender = manager.appender("hist/unarchived")
        for n in range(60):
            ts = now - 3 * DAY_MS + n * 3_600_000
            appender.append_batch([("k", b"x" * 64)], timestamps=[ts])
        manager.backend_for("hist/unarchived").purge("hist/unarchived", force=True)
    finally:
        manager.close()
    window = ["--start", _iso(now - 3 * DAY_MS), "--end", _iso(now)]
    code, missing = _run(
        "backfill", "--stream", "hist/unarchived", *window, "--target", "replay/nowhere"
    )
    assert code == 1 and "replay/nowhere does not exist" in missing["error"], missing
    assert "streamcore create" in missing["error"]
    # the stream was purged before anything archived it
    _create("replay/unarchived", 1)
    code, hole = _run(
        "backfill", "--stream", "hist/unarchived", *window, "--target", "replay/unarchived"
    )
    assert code == 1 and "partition 0 of hist/unarchived" in hole["error"], hole
    assert "Nothing was written" in hole["error"] and _read("replay/unarchived") == {0: []}


def _hourly(name: str, hours: int = 72) -> int:
    """`name` (1 partition, 1-day retention, small segments) with a record an hour over the
    last `hours` hours; returns now (ms)."""
    now = int(time.time() * 1000)
    manager = _manager()
    try:
        manager.create(name, 1, retention="1d", segment_bytes=1024)
        appender = manager.appender(name)
        for n in range(hours):
            appender.append_batch(
                [(f"k{n}", b"x" * 64)], timestamps=[now - (hours - n) * 3_600_000]
            )
    finally:
        manager.close()
    return now


def _purge(name: str, *, force: bool, days_later: int = 0) -> int:
    """Apply retention to `name` (forced: whether the archiver ran or not), `days_later` days
    from now; the log's first offset after it, which must be past 0."""
    manager = _manager()
    try:
        later = int(time.time() * 1000) + days_later * DAY_MS
        manager.backend_for(name).purge(name, now_ms=later, force=force)
        first = manager.start_offsets(name)[0]
    finally:
        manager.close()
    assert first > 0, f"retention purged nothing of {name}"
    return first


def _refused_unwritten(window: list[str], target: str) -> str:
    """Run the backfill of `window` into `target` (created empty): it must fail, append nothing
    and leave no replay record. Returns its error."""
    _create(target, 1)
    code, refused = _run("backfill", *window, "--target", target)
    assert code == 1 and refused["status"] == "failed", refused
    assert _read(target) == {0: []}
    assert not list((Path(os.environ["STREAMCORE_HOME"]) / "backfill").rglob("*.json"))
    return refused["error"]


def test_a_purge_before_the_archiver_ran_is_refused_when_other_streams_are_archived(spark) -> None:
    """The issue's case: 72 records over 3 days, those older than a day purged unarchived; the
    table `archive` exists (another stream was archived), so "nothing was ever archived" does not
    apply, and the replay must still refuse the hole."""
    now = _hourly("hist/unarchived")
    _hourly("hist/archived")
    assert _run("retention", "archive", "--streams", "hist/archived", "--horizon", "0")[0] == 0
    _purge("hist/unarchived", force=True)
    window = ["--stream", "hist/unarchived", "--start", _iso(now - 3 * DAY_MS), "--end", _iso(now)]
    error = _refused_unwritten(window, "replay/unarchived")
    assert "partition 0 of hist/unarchived" in error and "Nothing was written" in error, error


def test_a_stream_the_config_does_not_archive_is_refused_once_purged(
    spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "streamcore.toml"
    config.write_text(
        (ROOT / "include" / "streamcore.toml").read_text()
        + '\n[[log.match]]\nnamespace = "cold"\nconfig = "default"\narchive = false\n'
    )
    monkeypatch.setenv("STREAMCORE_CONFIG", str(config))
    now = _hourly("cold/events")
    _hourly("hist/archived")
    code, archived = _run("retention", "archive", "--horizon", "0")  # every stream it archives
    assert code == 0 and "cold/events" not in json.dumps(archived.get("streams", {})), archived
    _purge("cold/events", force=False)  # no archiver holds it: its writer purged on roll
    window = ["--stream", "cold/events", "--start", _iso(now - 3 * DAY_MS), "--end", _iso(now)]
    error = _refused_unwritten(window, "replay/cold")
    assert "partition 0 of cold/events" in error and "Nothing was written" in error, error


def test_a_hole_at_the_start_of_the_archived_span_is_refused(spark) -> None:
    """Purged unarchived, archived from where the log then began, then purged again two days
    later: the archive holds a span that starts after the interval's first records, and runs up
    to the log."""
    now = _hourly("hist/late")
    lost = _purge("hist/late", force=True)
    assert _run("retention", "archive", "--streams", "hist/late", "--horizon", "0")[0] == 0
    assert _purge("hist/late", force=False, days_later=2) > lost
    window = ["--stream", "hist/late", "--start", _iso(now - 3 * DAY_MS), "--end", _iso(now)]
    error = _refused_unwritten(window, "replay/late")
    assert "partition 0 of hist/late" in error and f"offset {lost - 1}" in error, error
    # After the first record the archive holds, nothing is missing (at its very millisecond, a
    # purged record may have been appended too).
    after_first = now - (72 - lost) * 3_600_000 + 1
    window = ["--stream", "hist/late", "--start", _iso(after_first), "--end", _iso(now)]
    code, done = _run("backfill", *window, "--target", "replay/late")
    assert code == 0 and done["appended"] == 72 - lost - 1 and done["from_archive"] > 0, done


def test_quiet_intervals_are_told_empty_before_spark_from_the_log_and_the_archive(
    history,
) -> None:
    """Hours between two records (one an hour and twelve minutes apart), where the archive serves
    them (purged from the log) and where the log does: each run ends before Spark, from the log's
    offsets and the archive's rows read with delta-rs; no pyspark is even imported."""
    _now, written = history
    times = [ts for _p, ts, _r in written]
    quiet = [(times[n] + 60_000, times[n] + 61 * 60_000) for n in (3, 4, 130)]
    assert all(not any(lo <= t < hi for t in times) for lo, hi in quiet)
    _create("replay/quiet")
    runs = [
        ["--stream", SOURCE, "--start", _iso(lo), "--end", _iso(hi), "--target", "replay/quiet"]
        for lo, hi in quiet
    ]
    script = (
        "import json, sys\n"
        "from jobs import backfill\n"
        f"codes = [backfill.main(argv) for argv in {runs!r}]\n"
        "print(json.dumps({'codes': codes, 'pyspark': 'pyspark' in sys.modules}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [json.loads(line) for line in done.stdout.strip().splitlines()]
    *summaries, end = lines
    assert end == {"codes": [0, 0, 0], "pyspark": False}, done.stderr[-3000:]
    assert [s["empty"] for s in summaries] == [True] * 3, summaries
    assert all(s["records"] == 0 and s["appended"] == 0 for s in summaries), summaries
    for archived in summaries[:2]:  # before the log's first offsets: the archive served them
        assert all(lo == hi > 0 for lo, hi in archived["hot_offsets"].values()), archived
    assert _read("replay/quiet") == {0: [], 1: []}


def test_an_archive_of_the_streams_former_incarnation_does_not_fill_its_hole(spark) -> None:
    """Archived, then deleted and created again: the new log's offsets restart at 0, so the
    archive holds rows at the same offsets from the former incarnation. Purged unarchived, the
    new log's history has a hole those rows must not fill (they are other records)."""
    _hourly("hist/again")
    assert _run("retention", "archive", "--streams", "hist/again", "--horizon", "0")[0] == 0
    manager = _manager()
    try:
        manager.delete("hist/again")
    finally:
        manager.close()
    now = _hourly("hist/again", hours=48)
    _purge("hist/again", force=True)
    window = ["--stream", "hist/again", "--start", _iso(now - 2 * DAY_MS), "--end", _iso(now)]
    error = _refused_unwritten(window, "replay/again")
    assert "partition 0 of hist/again" in error and "Nothing was written" in error, error
