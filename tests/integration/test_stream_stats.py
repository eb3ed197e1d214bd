"""jobs/stream_stats.py through a real `spark-submit` (the jars, confs and environment of
`jobs.spark.submit.submit_config()`, as the DAGs submit it) on a local stream whose records were
appended at known times: the counts per partition are those of the interval, edges included."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from spark_session import ROOT
from timed_records import DAY, EXPECTED, append_timed_records

from jobs.spark.submit import submit_config

pytestmark = pytest.mark.spark

STREAM = "test/stats"


def spark_submit(job: str, *args: str, home: Path, timeout: float = 600) -> tuple[int, Any, str]:
    """`spark-submit jobs/<job>.py args` on local[2]; (exit code, summary or None, stderr)."""
    config = submit_config()
    confs = [arg for k, v in config["conf"].items() for arg in ("--conf", f"{k}={v}")]
    command = [
        str(ROOT / ".venv" / "bin" / "spark-submit"),
        *("--master", "local[2]", "--jars", config["jars"]),
        *confs,
        *("--conf", "spark.ui.enabled=false", "--conf", "spark.ui.showConsoleProgress=false"),
        str(ROOT / "jobs" / f"{job}.py"),
        *args,
    ]
    env = {**os.environ, **config["env_vars"], "STREAMCORE_HOME": str(home)}
    done = subprocess.run(
        command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith('{"job"')]
    return done.returncode, json.loads(lines[-1]) if lines else None, done.stderr


@pytest.mark.timeout(900)
def test_spark_submit_counts_the_records_of_the_interval(tmp_path: Path) -> None:
    home = tmp_path / "home"
    append_timed_records(home, STREAM)
    start, end = DAY.isoformat(), DAY.replace(day=DAY.day + 1).isoformat()
    code, summary, stderr = spark_submit(
        "stream_stats", "--stream", STREAM, "--start", start, "--end", end, home=home
    )
    assert code == 0, stderr[-6000:]
    assert summary is not None, stderr[-6000:]
    assert summary["job"] == "stream_stats" and summary["status"] == "ok"
    assert (summary["start"], summary["end"]) == (start, end)
    assert summary["records"] == 6 and summary["complete"] is True
    assert summary["per_partition"] == EXPECTED
