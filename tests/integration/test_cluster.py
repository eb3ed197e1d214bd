"""Cluster mode (scripts/cluster.sh, include/cluster.env) on loopback: a Spark standalone master
and worker, Airflow on PostgreSQL with the LocalExecutor, streams on the Kafka broker, the outbox
on PostgreSQL. The importer DAG's end-to-end run (`dag.test()`) runs there: both spark-submits go
to the standalone master, `import/docs` is a Kafka topic, and the Delta table read without Spark
holds the documents read back from Kafka by streamcore's codecs. Airflow is scripts/airflow.sh's
`airflow standalone` (what `make airflow` runs, here on PostgreSQL): it leads its own process
group, prints how to log in, serves REST tokens, and its stop ends the whole group.
`cluster.sh stop` stops what it started and leaves the broker and the database, which ran before,
running. (This is the importer DAG's one end-to-end `dag.test()`; test_airflow_rest.py triggers
it through the REST API.)

Ports and homes are the test's own (free ports, temporary folders, a scratch topic prefix and a
database of its own), so a developer's `make cluster` is left alone."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from airflow_harness import (
    ROOT,
    VENV_BIN,
    AirflowEnv,
    assert_imported,
    dag_test,
    free_port,
)
from kafka_broker import scratch_prefix

from streamcore.config import load_config
from streamcore.log import open_log_manager

pytestmark = [pytest.mark.airflow, pytest.mark.spark, pytest.mark.kafka, pytest.mark.postgres]


def cluster(env: dict[str, str], command: str, timeout: float = 600) -> str:
    done = subprocess.run(
        [str(ROOT / "scripts" / "cluster.sh"), command],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode in (0, 3), f"cluster.sh {command}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def cluster_env(
    tmp_path_factory: pytest.TempPathFactory, kafka_bootstrap: str, postgres_url: str
) -> Iterator[dict[str, str]]:
    """The cluster started by scripts/cluster.sh with the test's ports and homes; stopped after."""
    home = tmp_path_factory.mktemp("cluster")
    master_port = free_port()
    url = postgres_url.rsplit("/", 1)[0]
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home / "airflow"),
        "STREAMCORE_HOME": str(home / "sc-home"),
        "STREAMCORE_AIRFLOW_PORT": str(free_port()),
        "STREAMCORE_AIRFLOW_PASSWORD": "streamcore-test",
        "STREAMCORE_SPARK_MASTER_PORT": str(master_port),
        "STREAMCORE_SPARK_MASTER_UI_PORT": str(free_port()),
        "STREAMCORE_SPARK_WORKER_UI_PORT": str(free_port()),
        "STREAMCORE_SPARK_WORKER_MEMORY": "3g",
        "STREAMCORE_SPARK_CLUSTER_HOME": str(home / "spark"),
        "STREAMCORE_SPARK_MASTER": f"spark://127.0.0.1:{master_port}",
        "STREAMCORE_KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "STREAMCORE_KAFKA_TOPIC_PREFIX": scratch_prefix(),
        "STREAMCORE_OUTBOX_URL": postgres_url,
        "STREAMCORE_AIRFLOW_DB_URL": f"{url}/airflow_{uuid.uuid4().hex[:8]}",
        "STREAMCORE_CLUSTER_STATE": str(home / "state"),
        # as scripts/airflow.sh runs tasks: spark-submit and Spark's Python from the venv
        "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYSPARK_PYTHON": str(VENV_BIN / "python"),
    }
    env.pop("PYTEST_CURRENT_TEST", None)
    try:
        out = cluster(env, "start")
        assert "postgres: already running" in out and "kafka: already running" in out, out
        yield env
    finally:
        cluster(env, "stop")


def airflow_script(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ROOT / "scripts" / "airflow.sh"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_the_importer_dag_runs_on_the_cluster(
    cluster_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    status = cluster(cluster_env, "status")
    for service in ("postgres", "kafka", "spark", "airflow"):
        assert f"{service}: running" in status, status
    pgid = check_airflow_standalone(cluster_env)
    profile = dict(
        line.removeprefix("export ").split("=", 1)
        for line in cluster(cluster_env, "env").splitlines()
    )
    assert profile["STREAMCORE_LOG_BACKEND"] == "'kafka'", profile
    assert profile["STREAMCORE_SPARK_MASTER"] == f"'{cluster_env['STREAMCORE_SPARK_MASTER']}'"

    env = {**cluster_env, "STREAMCORE_LOG_BACKEND": "kafka"}
    home = Path(env["STREAMCORE_HOME"])
    af = AirflowEnv(home=Path(env["AIRFLOW_HOME"]), streamcore_home=home, port=0, env=env)
    run = dag_test(af, "streamcore_importer", {"count": 600, "partitions": 2, "avg_blob_size": 64})
    assert run["state"] == "success", run
    assert set(run["tasks"].values()) == {"success"}
    records = list((home / "runs" / "importer").glob("*.json"))
    record = json.loads(records[0].read_text())
    assert (record["produce"]["documents"], record["consume"]["read"]) == (600, 600)

    apps = master_view(env)["completedapps"]
    assert [a["name"] for a in apps].count("streamcore-importer") == 2, apps
    assert all(a["state"] == "FINISHED" for a in apps), apps
    for name, value in env.items():
        if name.startswith("STREAMCORE_"):
            monkeypatch.setenv(name, value)
    config = load_config(home=home)
    with open_log_manager(config) as manager:
        assert manager.describe("import/docs").backend == "kafka"
    assert_imported(home, record["consume"], config=config)

    stopped = cluster(cluster_env, "stop")
    assert "stopping the master" in stopped and "stopping process group" in stopped, stopped
    deadline = time.monotonic() + 5
    while group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not group_alive(pgid), "processes of the standalone group survived stop"
    after = cluster(cluster_env, "status")
    assert "postgres: running" in after and "kafka: running" in after, after
    assert "spark: stopped" in after and "airflow: stopped" in after, after


def check_airflow_standalone(env: dict[str, str]) -> int:
    """scripts/airflow.sh's standalone: its own process group (returned), a token that the REST
    API takes, a second start that finds it running."""
    pgid = int((Path(env["AIRFLOW_HOME"]) / "standalone.pid").read_text())
    assert os.getpgid(pgid) == pgid
    members = subprocess.run(["pgrep", "-g", str(pgid)], capture_output=True, text=True)
    assert len(members.stdout.split()) >= 4, members.stdout  # api-server, scheduler, ...
    token = airflow_script(env, "token")
    assert token.returncode == 0, token.stderr
    request = urllib.request.Request(
        f"http://127.0.0.1:{env['STREAMCORE_AIRFLOW_PORT']}/api/v2/dags?dag_id_pattern=streamcore",
        headers={"Authorization": f"Bearer {token.stdout.strip()}"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200
    again = airflow_script(env, "start")
    assert "already running" in again.stdout, again.stdout + again.stderr
    assert f"log in as admin / {env['STREAMCORE_AIRFLOW_PASSWORD']}" in again.stdout
    return pgid


def master_view(env: dict[str, str]) -> dict[str, Any]:
    port = env["STREAMCORE_SPARK_MASTER_UI_PORT"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/", timeout=10) as response:
        return json.load(response)
