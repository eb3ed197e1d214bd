"""`dag.test()` of the importer DAG: real task runs, real spark-submit through the
SparkSubmitOperator, a real Delta table checked without Spark."""

from __future__ import annotations

import json

import pytest
from airflow_harness import AirflowEnv, assert_imported, dag_test, make_airflow_env

pytestmark = [pytest.mark.airflow, pytest.mark.spark]


@pytest.fixture(scope="module")
def af(tmp_path_factory: pytest.TempPathFactory) -> AirflowEnv:
    return make_airflow_env(
        tmp_path_factory.mktemp("airflow-home"), tmp_path_factory.mktemp("sc-home")
    )


def test_bad_params_stop_before_any_spark_job(af: AirflowEnv) -> None:
    rejected = dag_test(af, "streamcore_importer", {"count": 0})
    assert "count" in rejected["rejected"]

    run = dag_test(
        af,
        "streamcore_importer",
        {"source": "files", "path": str(af.streamcore_home / "nothing-here")},
    )
    assert run["state"] == "failed"
    assert run["tasks"]["validate"] == "failed"
    assert run["tasks"]["produce"] == run["tasks"]["consume"] == "upstream_failed"
    # no Spark job ran: nothing was written under STREAMCORE_HOME
    assert not (af.streamcore_home / "log").exists()
    assert not (af.streamcore_home / "delta").exists()


@pytest.mark.timeout(900)
def test_dag_test_imports_the_documents(af: AirflowEnv) -> None:
    run = dag_test(af, "streamcore_importer", {"count": 1500, "partitions": 2, "avg_blob_size": 64})
    assert run["state"] == "success", run
    assert set(run["tasks"].values()) == {"success"}
    records = list((af.streamcore_home / "runs" / "importer").glob("*.json"))
    assert len(records) == 1
    record = json.loads(records[0].read_text())
    assert record["run_id"] == run["run_id"]
    assert record["produce"]["documents"] == 1500
    assert record["consume"]["read"] == 1500
    assert_imported(af.streamcore_home, record["consume"])
