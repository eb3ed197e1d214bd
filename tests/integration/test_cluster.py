"""Cluster mode (scripts/cluster.sh, include/cluster.env) on loopback: a Spark standalone master
and worker, Airflow on PostgreSQL with the LocalExecutor, streams on the Kafka broker, the outbox
on PostgreSQL. Every DAG runs there once (`dag.test()`): the importer with both spark-submits
going to the standalone master (`import/docs` is a Kafka topic; the Delta table, read without
Spark, holds the documents read back from Kafka by streamcore's codecs); then each other DAG with
its Spark tasks as thin clients of a Spark Connect server whose executors run on the standalone
worker (docs/spark-connect.md). Airflow is scripts/airflow.sh's `airflow standalone` (what `make
airflow` runs, here on PostgreSQL): it leads its own process group, prints how to log in, serves
REST tokens, and its stop ends the whole group. `cluster.sh stop` stops what it started and leaves
the broker and the database, which ran before, running. (These are the DAGs' cluster-mode runs;
test_airflow_*.py run them in the embedded default, test_airflow_rest.py triggers the importer
through the REST API.)

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
from datetime import UTC, datetime, timedelta
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
    parse_exports,
    read_delta,
    run_python,
    spark_connect,
)
from audit_support import append_entries, entry
from kafka_broker import scratch_prefix
from recovery_support import write_dead_letters

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
    check_airflow_standalone(cluster_env)
    env = profile(cluster_env)
    assert env["STREAMCORE_LOG_BACKEND"] == "kafka", env
    assert env["STREAMCORE_SPARK_MASTER"] == cluster_env["STREAMCORE_SPARK_MASTER"]
    af = cluster_airflow(env)
    home = af.streamcore_home
    run = dag_test(af, "streamcore_importer", {"count": 600, "partitions": 2, "avg_blob_size": 64})
    assert run["state"] == "success", run
    assert set(run["tasks"].values()) == {"success"}
    records = list((home / "runs" / "importer").glob("*.json"))
    record = json.loads(records[0].read_text())
    assert (record["produce"]["documents"], record["consume"]["read"]) == (600, 600)

    apps = master_view(env)["completedapps"]
    assert [a["name"] for a in apps].count("streamcore-importer") == 2, apps
    assert all(a["state"] == "FINISHED" for a in apps), apps
    use_profile(monkeypatch, env)
    config = load_config(home=home)
    with open_log_manager(config) as manager:
        assert manager.describe("import/docs").backend == "kafka"
    assert_imported(home, record["consume"], config=config)


def profile(cluster_env: dict[str, str]) -> dict[str, str]:
    """The test's cluster environment plus the profile `cluster.sh env` exports (streams on
    Kafka), as a task of the cluster's Airflow sees it."""
    return {**cluster_env, **parse_exports(cluster(cluster_env, "env"))}


def cluster_airflow(env: dict[str, str]) -> AirflowEnv:
    """The cluster's Airflow as `dag_test` runs it, with the environment `env` (a `profile`)."""
    home = Path(env["STREAMCORE_HOME"])
    return AirflowEnv(home=Path(env["AIRFLOW_HOME"]), streamcore_home=home, port=0, env=env)


def use_profile(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> None:
    """The test process reads the cluster's streams and tables as its tasks do."""
    for name, value in env.items():
        if name.startswith("STREAMCORE_"):
            monkeypatch.setenv(name, value)


@pytest.fixture
def connect(cluster_env: dict[str, str], tmp_path: Path) -> Iterator[AirflowEnv]:
    """The cluster's Airflow environment (the profile, as its tasks see it) whose `spark_default`
    names a Spark Connect server on the cluster's master, as docs/spark-connect.md says to run it
    there; the server is stopped after the test, before the cluster's stop test."""
    env = profile(cluster_env)
    af = cluster_airflow(env)
    with spark_connect(af, tmp_path / "spark-connect", master=env["STREAMCORE_SPARK_MASTER"]):
        yield af


# Five DAG runs on the cluster: 260-380 s alone, past the suite's 600 s when another run shares
# the two cores (a fresh-clone run beside another timed it out); its subprocesses allow 1200 s.
@pytest.mark.timeout(1200)
def test_every_other_dag_runs_on_the_cluster_over_spark_connect(
    connect: AirflowEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One `dag.test()` of each other DAG on the cluster (Kafka streams, PostgreSQL outbox and
    metadata database), each Spark task a thin client of a Connect server whose executors run
    on the standalone worker: audit (batch), stream statistics and backfill over today,
    a bulk action and the scheduled bulk example, retention, recovery (its Spark engine)."""
    use_profile(monkeypatch, connect.env)
    home = connect.streamcore_home
    config = load_config(home=home)
    write_dead_letters(config)
    with open_log_manager(config) as manager:
        manager.create("replay/cluster", 1)
    append_entries([entry(n) for n in range(12)], config)
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    day = {"start": today.isoformat(), "end": (today + timedelta(days=1)).isoformat()}
    runs = [
        ("streamcore_audit", {}, None),
        ("streamcore_stream_stats", {"stream": "import/docs"}, day["end"]),
        (
            "streamcore_backfill",
            {"stream": "import/docs", "target": "replay/cluster", "dry_run": False, **day},
            None,
        ),
        (
            "streamcore_bulk_action",
            {
                "action": "setProperties",
                "query": "type = 'File'",
                "params": {"properties": {"site": "cluster"}},
            },
            None,
        ),
        ("streamcore_bulk_trash_old_notes", {"retention_days": 7}, None),
        ("streamcore_retention", {"dry_run": False, "streams": ["import/docs"]}, None),
        ("streamcore_recovery", {"action": "list", "spark_threshold": 0}, None),
    ]
    results = dag_tests(connect, runs)
    for (dag_id, _conf, _date), run in zip(runs, results, strict=True):
        assert run["state"] == "success", (dag_id, run)
        assert "failed" not in run["tasks"].values(), (dag_id, run)

    url = json.loads(connect.env["AIRFLOW_CONN_SPARK_DEFAULT"])["host"]
    jobs = {
        "audit": ["land"],
        "stream_stats": ["stats"],
        "backfill": ["replay"],
        "bulk_action": ["run"],
        "retention": ["archive", "purge", "compact", "maintain"],
        "recovery": ["result"],
    }
    summaries = {}
    for job, steps in jobs.items():
        for path in (home / "runs" / job).glob("*.json"):
            record = json.loads(path.read_text())
            for step in steps:
                assert record[step]["spark_connect"] == url, (job, step, record[step])
                summaries[(record["dag_id"], step)] = record[step]
    assert summaries[("streamcore_audit", "land")]["landed"] == 12
    stats = summaries[("streamcore_stream_stats", "stats")]  # the daily run at midnight
    assert (stats["start"], stats["end"], stats["records"]) == (day["start"], day["end"], 600)
    assert summaries[("streamcore_backfill", "replay")]["appended"] == 600
    # Read back without Spark: the bulk action set the property on the Files, and only there.
    columns = ["type", "isTrashed", "properties"]
    rows = read_delta(home / "delta" / "repository", columns).to_pylist()
    files = summaries[("streamcore_bulk_action", "run")]
    marked = [r["type"] == "File" for r in rows]
    assert files["state"] == "COMPLETED" and files["processed"] == sum(marked) > 0, files
    for row, is_file in zip(rows, marked, strict=True):
        assert (("site", "cluster") in (row["properties"] or [])) == is_file, row
    # The importer's documents were modified in 2024 (jobs/spark/documents/frames.py): every Note is
    # older than 7 days, so the scheduled example trashes exactly the Notes.
    trash = summaries[("streamcore_bulk_trash_old_notes", "run")]
    notes = [r for r in rows if r["type"] == "Note"]
    assert notes and (trash["state"], trash["total"]) == ("COMPLETED", len(notes)), trash
    assert all(r["isTrashed"] for r in notes), "a Note survived the scheduled trash"
    assert not any(r["isTrashed"] for r in rows if r["type"] != "Note")
    listed = summaries[("streamcore_recovery", "result")]
    assert (listed["engine"], listed["selected"]) == ("spark", 8), listed
    with open_log_manager(config) as manager:
        assert manager.describe("replay/cluster").backend == "kafka"
        assert sum(manager.end_offsets("replay/cluster")) == 600


def test_cluster_stop_stops_only_what_it_started(cluster_env: dict[str, str]) -> None:
    pgid = int((Path(cluster_env["AIRFLOW_HOME"]) / "standalone.pid").read_text())
    stopped = cluster(cluster_env, "stop")
    assert "stopping the master" in stopped and "stopping process group" in stopped, stopped
    deadline = time.monotonic() + 5
    while group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not group_alive(pgid), "processes of the standalone group survived stop"
    after = cluster(cluster_env, "status")
    assert "postgres: running" in after and "kafka: running" in after, after
    assert "spark: stopped" in after and "airflow: stopped" in after, after


def dag_tests(af: AirflowEnv, runs: list[tuple[str, dict[str, Any], str | None]]) -> list[dict]:
    """`dag.test()` of each (dag id, conf, logical date or None) in order, in one interpreter
    (one Airflow import for all): each run's state, task states and seconds."""
    return run_python(
        af,
        f"""
        import time
        from datetime import datetime
        from pathlib import Path
        from airflow.dag_processing.dagbag import BundleDagBag
        folder = Path("dags").resolve()
        dags = BundleDagBag(dag_folder=folder, bundle_path=folder).dags
        out = []
        for dag_id, conf, date in {runs!r}:
            when = {{"logical_date": datetime.fromisoformat(date)}} if date else {{}}
            began = time.monotonic()
            run = dags[dag_id].test(run_conf=conf, **when)
            seconds = round(time.monotonic() - began, 1)
            states = {{ti.task_id: str(ti.state) for ti in run.get_task_instances()}}
            out.append({{"state": str(run.state), "run_id": run.run_id, "tasks": states,
                        "seconds": seconds}})
        print(json.dumps({{"runs": out}}))
        """,
        timeout=1200,
    )["runs"]


def check_airflow_standalone(env: dict[str, str]) -> None:
    """scripts/airflow.sh's standalone: its own process group, a token that the REST
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


def master_view(env: dict[str, str]) -> dict[str, Any]:
    port = env["STREAMCORE_SPARK_MASTER_UI_PORT"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/", timeout=10) as response:
        return json.load(response)
