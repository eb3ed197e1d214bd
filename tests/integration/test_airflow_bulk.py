"""One `dag.test()` of each bulk DAG, on one small `repository`: the bulk action DAG runs a
csvExport of the Notes (the file read back with the csv module, the command's status with the
CLI, `streamcore bulk status --json`); the scheduled example of include/streamcore.toml
(`streamcore_bulk_trash_old_notes`) trashes the Notes older than its `retention_days`."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import zipfile
from pathlib import Path
from typing import Any

import pytest
from airflow_harness import VENV_BIN, AirflowEnv, dag_test, make_airflow_env
from repository_support import document_row, write_repository
from spark_session import read_delta

from streamcore.config import load_config

pytestmark = [pytest.mark.airflow, pytest.mark.spark]


def _repository(spark: Any, home: Path, count: int) -> list[str]:
    """`repository` under `home` with `count` documents, every third a Note; the Notes' ids."""
    from jobs.spark.catalog import Catalog

    rows = [document_row(i, type="Note" if i % 3 == 0 else "File") for i in range(count)]
    write_repository(spark, Catalog(spark, load_config(home=home)), rows)
    return [r["id"] for r in rows if r["type"] == "Note"]


def _record(af: AirflowEnv, dag_id: str) -> dict[str, Any]:
    """The run record the summary task of `dag_id`'s one run kept."""
    records = [
        json.loads(p.read_text())
        for p in (af.streamcore_home / "runs" / "bulk_action").glob("*.json")
    ]
    (record,) = [r for r in records if r["dag_id"] == dag_id]
    return record


@pytest.fixture(scope="module")
def af(tmp_path_factory: pytest.TempPathFactory) -> AirflowEnv:
    return make_airflow_env(
        tmp_path_factory.mktemp("airflow-home"), tmp_path_factory.mktemp("sc-home")
    )


@pytest.fixture(scope="module")
def notes(spark: Any, af: AirflowEnv) -> list[str]:
    """90 documents (modified on 2026-11-01), every third a Note: the Notes' ids."""
    return _repository(spark, af.streamcore_home, 90)


@pytest.mark.timeout(900)
def test_a_csv_export_run_from_the_dag(af: AirflowEnv, notes: list[str]) -> None:
    conf = {
        "action": "csvExport",
        "query": "type = 'Note'",
        "params": {"columns": ["id", "title"]},
        "bucket_size": 10,
    }
    run = dag_test(af, "streamcore_bulk_action", conf)
    assert run["state"] == "success", run
    assert run["tasks"] == dict.fromkeys(("validate", "run", "summary"), "success"), run
    record = _record(af, "streamcore_bulk_action")
    summary = record["run"]
    assert (summary["state"], summary["total"], summary["processed"]) == ("COMPLETED", 30, 30)
    assert "COMPLETED" in record["report"] and "30 of 30" in record["report"]
    with zipfile.ZipFile(summary["result"]["url"]) as archive:
        (name,) = archive.namelist()
        rows = list(csv.reader(io.StringIO(archive.read(name).decode(), newline="")))
    assert rows[0] == ["id", "title"] and [r[0] for r in rows[1:]] == sorted(notes)

    shown = subprocess.run(
        [str(VENV_BIN / "streamcore"), "bulk", "status", summary["command_id"], "--json"],
        env=af.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    status = json.loads(shown.stdout)
    assert status["state"] == "COMPLETED" and status["processed"] == 30, status


@pytest.mark.timeout(900)
def test_the_scheduled_example_trashes_old_notes(af: AirflowEnv, notes: list[str]) -> None:
    run = dag_test(af, "streamcore_bulk_trash_old_notes", {"retention_days": 7})
    assert run["state"] == "success", run
    summary = _record(af, "streamcore_bulk_trash_old_notes")["run"]
    assert (summary["action"], summary["state"], summary["processed"]) == ("trash", "COMPLETED", 30)
    table = af.streamcore_home / "delta" / "repository"
    trashed = sorted(r["id"] for r in read_delta(table).to_pylist() if r["isTrashed"])
    assert trashed == sorted(notes)
