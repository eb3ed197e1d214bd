"""Jobs on a Spark Connect server (docs/spark-connect.md): one server for the module, started and
stopped by scripts/spark-connect.sh on a free port. The audit job lands its entries exactly once
on a Connect session (the relay's repeats merge away); once the server is stopped, the DAGs'
readiness check says to start it. The DAGs' runs on Connect are those of test_airflow_audit.py,
test_airflow_backfill.py, test_airflow_retention.py, test_airflow_bulk.py, test_cluster.py and
tests/browser (`spark_connect` in airflow_harness.py). Tables are read with delta-rs."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from airflow_harness import (
    ROOT,
    AirflowEnv,
    free_port,
    group_positions,
    make_airflow_env,
    read_delta,
    run_python,
)
from audit_support import append_entries, entry

from streamcore.config import load_config

pytestmark = [pytest.mark.airflow, pytest.mark.spark]

SCRIPT = ROOT / "scripts" / "spark-connect.sh"
STREAM, GROUP = "audit/entries", "audit/delta"
# Event dates two hours back: the job refuses dates in its future.
T0 = (datetime.now(UTC) - timedelta(hours=2)).replace(minute=0, second=0, microsecond=0)
ENTRIES = [entry(n, event_date=T0 + timedelta(seconds=20 * n)) for n in range(30)]


def script(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=120
    )


@pytest.fixture(scope="module")
def af(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirflowEnv]:
    """An Airflow home whose `spark_default` is a Spark Connect server of this module (the
    environment's connection, as a deployment's secrets would give it), started with the same
    STREAMCORE_HOME; the server is stopped after the module."""
    af = make_airflow_env(
        tmp_path_factory.mktemp("airflow-home"), tmp_path_factory.mktemp("sc-home")
    )
    port = free_port()
    af.env |= {
        "STREAMCORE_SPARK_CONNECT_PORT": str(port),
        "STREAMCORE_SPARK_CONNECT_HOME": str(tmp_path_factory.mktemp("spark-connect")),
        "STREAMCORE_SPARK_MASTER": "local[2]",
        "STREAMCORE_SPARK_DRIVER_MEMORY": "2g",
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps(
            {"conn_type": "spark", "host": f"sc://127.0.0.1:{port}"}
        ),
    }
    started = script(af.env, "start")
    try:
        assert started.returncode == 0, f"{started.stdout}\n{started.stderr}"
        yield af
    finally:
        stopped = script(af.env, "stop")
        assert stopped.returncode == 0, f"{stopped.stdout}\n{stopped.stderr}"


def url(af: AirflowEnv) -> str:
    return f"sc://127.0.0.1:{af.env['STREAMCORE_SPARK_CONNECT_PORT']}"


def audit_table(af: AirflowEnv) -> dict[str, dict[str, Any]]:
    rows = read_delta(af.streamcore_home / "delta" / "audit").to_pylist()
    assert len(rows) == len({r["event_id"] for r in rows}), "an event id landed twice"
    return {r["event_id"]: r for r in rows}


def test_the_script_reports_the_server_and_starts_it_once(af: AirflowEnv) -> None:
    status = script(af.env, "status")
    assert status.returncode == 0 and url(af) in status.stdout, status.stdout
    assert script(af.env, "url").stdout.strip() == url(af)
    again = script(af.env, "start")
    assert again.returncode == 0 and "already running" in again.stdout, again.stdout


def test_the_audit_job_lands_each_entry_once_on_connect(af: AirflowEnv) -> None:
    # 20 entries and the relay's repeats of two of them: each lands once.
    append_entries([*ENTRIES[:20], ENTRIES[0], ENTRIES[19]], load_config(home=af.streamcore_home))
    # A fresh interpreter: pyspark refuses a Connect session next to a classic one, which the
    # pytest process may hold.
    summary, code = run_python(
        af,
        f"""
        import os
        os.environ["STREAMCORE_SPARK_REMOTE"] = {url(af)!r}
        from jobs import audit
        from jobs.spark.delta.sql import is_connect
        from jobs.spark.job import JobContext, execute_job
        assert is_connect(JobContext("audit").spark)
        print(json.dumps(execute_job(audit, ["batch"]), default=str))
        """,
    )
    assert code == 0, summary
    assert (summary["read"], summary["landed"], summary["duplicates"]) == (22, 20, 2), summary
    assert sorted(audit_table(af)) == sorted(e["event_id"] for e in ENTRIES[:20])
    assert group_positions(af.streamcore_home, GROUP, STREAM)[0] == [22]


def test_a_stopped_server_fails_the_readiness_check_with_the_fix(af: AirflowEnv) -> None:
    stopped = script(af.env, "stop")
    assert stopped.returncode == 0, stopped.stderr
    assert script(af.env, "status").returncode == 3
    checked = run_python(
        af,
        """
        from airflow.sdk.exceptions import AirflowFailException
        from _streamcore import check_spark_ready
        try:
            check_spark_ready()
        except AirflowFailException as exc:
            print(json.dumps({"error": str(exc)}))
        else:
            print(json.dumps({"error": None}))
        """,
    )
    assert f"no Spark Connect server answers at {url(af)}" in checked["error"], checked
    assert "make spark-connect" in checked["error"]
