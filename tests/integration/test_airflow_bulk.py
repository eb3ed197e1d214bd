"""The scheduled bulk example of include/streamcore.toml (`streamcore_bulk_trash_old_notes`), one
`dag.test()` on a small `repository`, its job on a Spark Connect server: it trashes the Notes
older than its `retention_days`. (The bulk action DAG's end-to-end run is the browser test's
csvExport, triggered from the UI's form, its file read back with the csv module; in cluster
mode, test_cluster.py's setProperties.)"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from airflow_harness import AirflowEnv, airflow_on_connect, dag_test
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
    summary = _record(af, "streamcore_bulk_trash_old_notes")["run"]
    assert (summary["action"], summary["state"], summary["processed"]) == ("trash", "COMPLETED", 30)
    table = af.streamcore_home / "delta" / "repository"
    trashed = sorted(r["id"] for r in read_delta(table).to_pylist() if r["isTrashed"])
    assert trashed == sorted(notes)
