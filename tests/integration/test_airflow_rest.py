"""The deployment path end to end: api-server, scheduler and dag-processor as separate real
processes on a free port with their own AIRFLOW_HOME; a JWT from /auth/token; the importer DAG
unpaused and triggered through REST API v2 with a conf; the Delta table checked without Spark."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from airflow_harness import (
    AirflowEnv,
    AirflowServices,
    RestClient,
    assert_imported,
    make_airflow_env,
)

pytestmark = [pytest.mark.airflow, pytest.mark.spark]

DAG = "streamcore_importer"


@pytest.fixture(scope="module")
def af(tmp_path_factory: pytest.TempPathFactory) -> AirflowEnv:
    return make_airflow_env(
        tmp_path_factory.mktemp("airflow-home"), tmp_path_factory.mktemp("sc-home")
    )


@pytest.fixture(scope="module")
def rest(af: AirflowEnv) -> Iterator[RestClient]:
    services = AirflowServices(af)
    try:
        services.start()
        client = RestClient(af)
        deadline = time.monotonic() + 120
        while client.get(f"/api/v2/dags/{DAG}")[0] != 200:  # the dag-processor's first parse
            assert time.monotonic() < deadline, services.tail("dag-processor")
            time.sleep(1)
        status, body = client.patch(f"/api/v2/dags/{DAG}", {"is_paused": False})
        assert status == 200 and body["is_paused"] is False, body
        yield client
    finally:
        services.stop()


def trigger(rest: RestClient, conf: dict[str, Any]) -> tuple[int, Any]:
    return rest.post(f"/api/v2/dags/{DAG}/dagRuns", {"logical_date": None, "conf": conf})


def wait_for_run(rest: RestClient, run_id: str, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        status, run = rest.get(f"/api/v2/dags/{DAG}/dagRuns/{run_id}")
        assert status == 200, run
        if run["state"] in ("success", "failed"):
            return run
        assert time.monotonic() < deadline, f"run {run_id} still {run['state']} after {timeout} s"
        time.sleep(2)


def task_states(rest: RestClient, run_id: str) -> dict[str, str | None]:
    status, body = rest.get(f"/api/v2/dags/{DAG}/dagRuns/{run_id}/taskInstances")
    assert status == 200, body
    return {t["task_id"]: t["state"] for t in body["task_instances"]}


def test_the_api_needs_a_valid_token(af: AirflowEnv, rest: RestClient) -> None:
    status, _ = rest._request(
        "POST", "/auth/token", {"username": "admin", "password": "wrong"}, auth=False
    )
    assert status == 401
    forged = RestClient.__new__(RestClient)
    forged.af, forged.token = af, "not-a-token"
    assert forged.get(f"/api/v2/dags/{DAG}")[0] in (401, 403)
    assert rest.get(f"/api/v2/dags/{DAG}")[0] == 200


def test_bad_params_are_rejected_before_any_spark_job(af: AirflowEnv, rest: RestClient) -> None:
    # Param schemas: the API refuses to create the run
    for conf in ({"count": 0}, {"source": "s3"}, {"failure_threshold": 2}):
        status, body = trigger(rest, conf)
        assert status == 400, (conf, status, body)
        assert next(iter(conf)) in body["detail"]
    # Parameters that only fail together: the validate task stops the run
    status, run = trigger(rest, {"source": "files"})
    assert status == 200, run
    run = wait_for_run(rest, run["dag_run_id"], timeout=300)
    assert run["state"] == "failed"
    states = task_states(rest, run["dag_run_id"])
    assert states["validate"] == "failed"
    assert states["produce"] == states["consume"] == "upstream_failed"
    assert not (af.streamcore_home / "log").exists(), "a Spark job ran"


@pytest.mark.timeout(1200)
def test_rest_triggered_run_imports_the_documents(af: AirflowEnv, rest: RestClient) -> None:
    status, run = trigger(rest, {"count": 1200, "partitions": 3, "avg_blob_size": 64})
    assert status == 200, run
    assert run["conf"]["count"] == 1200
    run = wait_for_run(rest, run["dag_run_id"], timeout=1000)
    assert run["state"] == "success", task_states(rest, run["dag_run_id"])
    assert set(task_states(rest, run["dag_run_id"]).values()) == {"success"}

    run_id = run["dag_run_id"]
    status, xcom = rest.get(
        f"/api/v2/dags/{DAG}/dagRuns/{run_id}/taskInstances/summary/xcomEntries/return_value"
    )
    assert status == 200 and run_id in json.dumps(xcom["value"]), xcom
    (record_file,) = (af.streamcore_home / "runs" / "importer").glob("*.json")
    record = json.loads(record_file.read_text())
    assert record["run_id"] == run_id and record["params"]["count"] == 1200
    assert record["produce"]["documents"] == 1200 and record["produce"]["partitions"] == 3
    assert_imported(af.streamcore_home, record["consume"])
