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
    assert code == 1 and "nothing was ever archived" in hole["error"], hole
