"""The bulk DAGs on a small `repository`, their jobs on a Spark Connect server: one `dag.test()`
of the scheduled example of include/streamcore.toml (`streamcore_bulk_trash_old_notes`), which
trashes the Notes older than its `retention_days`; the server's sessions do not substitute
variables; and, with Airflow's scheduler running, a command submitted from the CLI reaches
COMPLETED with no other step: the dispatcher DAG (`streamcore_bulk_dispatch`) starts a run of
`streamcore_bulk_action` for it. (The bulk action DAG's run from its form is the browser test's
csvExport, its file read back with the csv module; in cluster mode, test_cluster.py's
setProperties.)"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from airflow_harness import (
    VENV_BIN,
    AirflowEnv,
    AirflowServices,
    airflow_on_connect,
    dag_test,
    run_python,
)
from repository_support import document_row, write_repository
from spark_session import read_delta

from streamcore.config import load_config

pytestmark = [pytest.mark.airflow, pytest.mark.spark]


def _repository(spark: Any, home: Path, count: int) -> list[str]:
    """`repository` under `home` with `count` documents, every third a Note; the Notes' ids."""
    from jobs.spark.delta.catalog import Catalog

    rows = [document_row(i, type="Note" if i % 3 == 0 else "File") for i in range(count)]
    write_repository(spark, Catalog(spark, load_config(home=home)), rows)
    return [r["id"] for r in rows if r["type"] == "Note"]


def _records(af: AirflowEnv, dag_id: str) -> list[dict[str, Any]]:
    """The run records the summary tasks of `dag_id`'s runs kept."""
    records = [
        json.loads(p.read_text())
        for p in (af.streamcore_home / "runs" / "bulk_action").glob("*.json")
    ]
    return [r for r in records if r["dag_id"] == dag_id]


@pytest.fixture(scope="module")
def af(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirflowEnv]:
    """An Airflow home whose job tasks run on a Spark Connect server of the module."""
    with airflow_on_connect(tmp_path_factory) as af:
        yield af


@pytest.fixture(scope="module")
def notes(spark: Any, af: AirflowEnv) -> list[str]:
    """90 documents (modified on 2026-11-01), every third a Note: the Notes' ids."""
    return _repository(spark, af.streamcore_home, 90)


@pytest.mark.timeout(900)
def test_the_scheduled_example_trashes_old_notes(af: AirflowEnv, notes: list[str]) -> None:
    run = dag_test(af, "streamcore_bulk_trash_old_notes", {"retention_days": 7})
    assert run["state"] == "success", run
    (record,) = _records(af, "streamcore_bulk_trash_old_notes")
    summary = record["run"]
    assert (summary["action"], summary["state"], summary["processed"]) == ("trash", "COMPLETED", 30)
    table = af.streamcore_home / "delta" / "repository"
    trashed = sorted(r["id"] for r in read_delta(table).to_pylist() if r["isTrashed"])
    assert trashed == sorted(notes)


def test_the_connect_server_does_not_substitute_variables(af: AirflowEnv) -> None:
    """scripts/spark-connect.sh starts its server with the jobs' confs: a session of it keeps
    `${...}` as the text it is (the jobs' own sessions: test_bulk_spark.py)."""
    url = json.loads(af.env["AIRFLOW_CONN_SPARK_DEFAULT"])["host"]
    variables = ["${env:PATH}", "${system:java.version}", "${spark:spark.app.name}"]
    result = run_python(
        af,
        f"""
        from pyspark.sql import SparkSession
        spark = SparkSession.builder.remote({url!r}).getOrCreate()
        out = [spark.sql("SELECT '" + v + "' AS v").first()["v"] for v in {variables!r}]
        print(json.dumps({{"read": out, "conf": spark.conf.get("spark.sql.variable.substitute")}}))
        """,
        timeout=300,
    )
    assert result == {"read": variables, "conf": "false"}


@pytest.mark.timeout(1800)
def test_a_command_submitted_from_the_cli_runs_with_no_manual_step(
    af: AirflowEnv, notes: list[str]
) -> None:
    """`streamcore bulk submit --wait` with Airflow running: the dispatcher claims the command
    and starts `streamcore_bulk_action` with its id, whose job completes it; nobody unpauses or
    triggers anything."""
    af.env["STREAMCORE_BULK_DISPATCH_INTERVAL"] = "5s"
    services = AirflowServices(af)
    try:
        services.start()
        submitted = subprocess.run(
            [
                str(VENV_BIN / "streamcore"),
                *("bulk", "submit", "setProperties", "--query", "type = 'File'"),
                *("--params", '{"properties": {"via": "cli"}}', "--username", "ann"),
                *("--wait", "--timeout", "1200", "--json"),
            ],
            env=af.env,
            capture_output=True,
            text=True,
            timeout=1500,
        )
        assert submitted.returncode == 0, (submitted.stdout, submitted.stderr[-3000:])
        # The command completes in the run's job; its summary task writes the record after.
        deadline = time.monotonic() + 300
        while not _records(af, "streamcore_bulk_action"):
            assert time.monotonic() < deadline, services.tail("scheduler")
            time.sleep(1)
    finally:
        services.stop()
    status = json.loads(submitted.stdout)
    assert (status["state"], status["processed"], status["total"]) == ("COMPLETED", 60, 60)
    assert submitted.stderr.startswith("SCHEDULED: waiting for the dispatcher"), submitted.stderr
    (record,) = _records(af, "streamcore_bulk_action")
    assert record["run_id"] == f"bulk__{status['commandId']}"
    assert record["params"]["command_id"] == status["commandId"]
    table = af.streamcore_home / "delta" / "repository"
    marked = {r["id"] for r in read_delta(table).to_pylist() if ("via", "cli") in r["properties"]}
    assert len(marked) == 60 and not marked & set(notes)
