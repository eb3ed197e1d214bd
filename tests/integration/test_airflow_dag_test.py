"""`dag.test()` of the importer DAG with bad Params: refused by the Param schema, or stopped by
validate before any Spark job. (The importer's end-to-end `dag.test()` runs in cluster mode:
test_cluster.py.)"""

from __future__ import annotations

import pytest
from airflow_harness import AirflowEnv, dag_test, make_airflow_env

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
