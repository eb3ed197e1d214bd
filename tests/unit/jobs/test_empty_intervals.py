"""Interval jobs over intervals with nothing to do end before Spark, through the framework's hook
(`empty_summary`, asked by `run_job` and by a DAG's validate task through `empty_run`): the
backfill of quiet intervals, the audit job's interval mode when nothing was appended since, the
statistics job. A run that has work is left to `run`. No Spark here: `JobContext.spark` fails the
test if anything asks for a session."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import replay_topologies
from audit_support import append_entries, entry

from jobs import audit, backfill, stream_stats
from jobs.spark.job import JobContext, empty_run, run_job
from streamcore.computation import Topology
from streamcore.config import load_config
from streamcore.log import open_log_manager

HOUR_MS = 3_600_000


def copy_topology() -> Topology:
    return replay_topologies.copy_topology("replay/bursts", "replay/out")


@pytest.fixture(autouse=True)
def _no_spark(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(JobContext, "spark", property(lambda ctx: pytest.fail("Spark started")))


def _summary(capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    return json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat()


def _bursts(home: Path) -> int:
    """hist/bursts (2 partitions) with records in the first and the fourth hour of the last
    six hours only, and an empty replay/bursts; returns the first hour's start (ms)."""
    first = (time.time_ns() // 1_000_000 // HOUR_MS - 6) * HOUR_MS
    with open_log_manager(load_config(home=home)) as manager:
        manager.create("hist/bursts", 2)
        manager.create("replay/bursts", 2)
        appender = manager.appender("hist/bursts")
        for hour in (0, 3):
            for p in (0, 1):
                at = [first + hour * HOUR_MS + 60_000 * n for n in range(5)]
                appender.append_batch(
                    [(f"k{n}", b"v") for n in range(5)], partition=p, timestamps=at
                )
    return first


@pytest.mark.parametrize("kind", ["stream", "topology", "table"])
def test_a_backfill_of_quiet_intervals_ends_before_spark(
    tmp_path: Path,
    kind: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An `airflow backfill create` over quiet hours: each run ends before Spark, empty."""
    monkeypatch.setenv("STREAMCORE_BACKFILL_TOPOLOGIES", __name__)
    first = _bursts(tmp_path)
    target = "repository" if kind == "table" else "replay/bursts"
    extra = {
        "stream": [],
        "topology": ["--target-kind", "topology", "--topology", f"{__name__}:copy_topology"],
        "table": ["--target-kind", "table"],
    }[kind]
    for hour in (1, 2, 4, 5):
        window = [
            "--start",
            _iso(first + hour * HOUR_MS),
            "--end",
            _iso(first + (hour + 1) * HOUR_MS),
        ]
        argv = ["--stream", "hist/bursts", *window, "--target", target, *extra]
        assert run_job(backfill, [*argv, "--home", str(tmp_path)]) == 0
        summary = _summary(capsys)
        assert summary["empty"] is True and summary["records"] == 0, summary
        assert "no record of hist/bursts was appended" in summary["reason"]
        assert "phases" not in summary  # no phase ran: no session, no read
    assert not (tmp_path / "backfill").exists()  # no replay record for nothing


def test_a_backfill_with_records_is_left_to_run(tmp_path: Path) -> None:
    first = _bursts(tmp_path)
    window = ["--start", _iso(first + 3 * HOUR_MS), "--end", _iso(first + 4 * HOUR_MS)]
    argv = ["--stream", "hist/bursts", *window, "--target", "replay/bursts"]
    assert empty_run(backfill, [*argv, "--home", str(tmp_path)]) is None


def test_an_audit_interval_with_nothing_appended_since_ends_before_spark(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("STREAMCORE_HOME", str(tmp_path))
    t0 = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=3)
    append_entries([entry(n, event_date=t0 + timedelta(seconds=n)) for n in range(10)])
    later = ["--start", (t0 + timedelta(hours=1)).isoformat()]
    later += ["--end", (t0 + timedelta(hours=1, minutes=5)).isoformat()]
    assert run_job(audit, ["interval", *later]) == 0
    summary = _summary(capsys)
    assert summary["empty"] is True and summary["status"] == "ok", summary
    assert (summary["read"], summary["landed"], summary["offsets"]) == (0, 0, {"0": [10, 10]})
    assert "nothing was appended to audit/entries since" in summary["reason"]
    # the interval of the entries, and one before them: their entries may be in the log
    for start in (t0, t0 - timedelta(hours=1)):
        window = ["--start", start.isoformat(), "--end", (start + timedelta(minutes=5)).isoformat()]
        assert empty_run(audit, ["interval", *window]) is None
    assert empty_run(audit, ["batch"]) is None  # the DAG's own check decides for batch runs


def test_the_statistics_of_a_quiet_interval_are_told_empty(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = _bursts(tmp_path)
    window = ["--start", _iso(first + HOUR_MS), "--end", _iso(first + 3 * HOUR_MS)]
    argv = ["--stream", "hist/bursts", *window, "--home", str(tmp_path)]
    found = empty_run(stream_stats, argv)
    assert found is not None and found["empty"] is True and found["records"] == 0
    assert run_job(stream_stats, argv) == 0
    assert _summary(capsys)["per_partition"] == found["per_partition"]
