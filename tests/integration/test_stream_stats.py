"""jobs/stream_stats.py through a real `spark-submit` (the jars, confs and environment of
`jobs.spark.submit.submit_config()`, as the DAGs submit it) on a local stream whose records were
appended at known times: the counts per partition are those of the interval, edges included."""

from __future__ import annotations

from pathlib import Path

import pytest
from spark_session import spark_submit
from timed_records import DAY, EXPECTED, append_timed_records

pytestmark = pytest.mark.spark

STREAM = "test/stats"


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
