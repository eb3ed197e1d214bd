"""One `dag.test()` of the bulk action DAG: a csvExport of the Notes of a small `repository`
submitted by validate, run by spark-submit, summarised; the exported file is read back with the
csv module and the command's status with the CLI (`streamcore bulk status --json`)."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import zipfile
from pathlib import Path
from typing import Any

import pytest
from airflow_harness import VENV_BIN, dag_test, make_airflow_env
from repository_support import document_row, write_repository

from streamcore.config import load_config

pytestmark = [pytest.mark.airflow, pytest.mark.spark]


def _repository(spark: Any, home: Path, count: int) -> list[str]:
    """`repository` under `home` with `count` documents, every third a Note; the Notes' ids."""
    from jobs.spark.catalog import Catalog

    rows = [document_row(i, type="Note" if i % 3 == 0 else "File") for i in range(count)]
    write_repository(spark, Catalog(spark, load_config(home=home)), rows)
    return [r["id"] for r in rows if r["type"] == "Note"]


@pytest.mark.timeout(900)
def test_a_csv_export_run_from_the_dag(
    spark: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    af = make_airflow_env(
        tmp_path_factory.mktemp("airflow-home"), tmp_path_factory.mktemp("sc-home")
    )
    notes = _repository(spark, af.streamcore_home, 90)
    conf = {
        "action": "csvExport",
        "query": "type = 'Note'",
        "params": {"columns": ["id", "title"]},
        "bucket_size": 10,
    }
    run = dag_test(af, "streamcore_bulk_action", conf)
    assert run["state"] == "success", run
    assert run["tasks"] == dict.fromkeys(("validate", "run", "summary"), "success"), run
    (path,) = (af.streamcore_home / "runs" / "bulk_action").glob("*.json")
    record = json.loads(path.read_text())
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
