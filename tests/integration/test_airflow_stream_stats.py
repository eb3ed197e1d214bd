"""One `dag.test()` of the stream statistics DAG (made by `job_tasks` + `interval_arguments`):
the run's data interval becomes the job's `--start/--end`, a real spark-submit counts the records
appended in it, and the summary task keeps the counts in the run record."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from airflow_harness import make_airflow_env, run_python
from timed_records import DAY, EXPECTED, append_timed_records

pytestmark = [pytest.mark.airflow, pytest.mark.spark]

STREAM = "test/stats"


@pytest.mark.timeout(900)
def test_a_daily_run_counts_the_records_of_its_interval(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    af = make_airflow_env(
        tmp_path_factory.mktemp("airflow-home"), tmp_path_factory.mktemp("sc-home")
    )
    append_timed_records(af.streamcore_home, STREAM)
    # The daily run at DAY + 1 day (00:00 UTC) is the one for DAY.
    logical_date = (DAY + timedelta(days=1)).isoformat()
    run = run_python(
        af,
        f"""
        from datetime import datetime
        from pathlib import Path
        from airflow.dag_processing.dagbag import BundleDagBag
        folder = Path("dags").resolve()
        dag = BundleDagBag(dag_folder=folder, bundle_path=folder).dags["streamcore_stream_stats"]
        run = dag.test(
            logical_date=datetime.fromisoformat({logical_date!r}),
            run_conf={{"stream": {STREAM!r}}},
        )
        states = {{ti.task_id: str(ti.state) for ti in run.get_task_instances()}}
        interval = [str(run.data_interval_start), str(run.data_interval_end)]
        print(json.dumps({{"state": str(run.state), "run_id": run.run_id, "tasks": states,
                           "interval": interval}}))
        """,
    )
    assert run["state"] == "success", run
    assert run["tasks"] == {"validate": "success", "stats": "success", "summary": "success"}
    records = list((af.streamcore_home / "runs" / "stream_stats").glob("*.json"))
    assert len(records) == 1, records
    record = json.loads(records[0].read_text())
    assert record["run_id"] == run["run_id"]
    assert record["dag_id"] == "streamcore_stream_stats"
    assert record["params"] == {"stream": STREAM}
    stats = record["stats"]
    assert stats["job"] == "stream_stats" and stats["status"] == "ok"
    assert (stats["start"], stats["end"]) == (DAY.isoformat(), logical_date)
    assert stats["records"] == 6 and stats["complete"] is True
    assert stats["per_partition"] == EXPECTED
    assert "records" in record["report"] and "stats" in record["report"]
