"""`airflow backfill create` over 4 daily intervals of the backfill DAG, with the api-server,
scheduler and dag-processor running: each of the two days with records replays its day into
another stream with its job on a Spark Connect server, so the target holds exactly those two
days, in order, once (two, not more: two already show the order); the two quiet days that follow
succeed with their replay skipped in validate, no Spark job. And `airflow backfill create` on the
default metadata database succeeds while another Airflow process writes it without pause (on
SQLite it failed with "database is locked")."""

from __future__ import annotations

import json
import os
import subprocess
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from airflow_harness import (
    ROOT,
    VENV_BIN,
    AirflowServices,
    RestClient,
    dag_test,
    make_airflow_env,
    metadata_db_url,
    run_python,
    spark_connect,
)

from streamcore.codecs import get_codec
from streamcore.config import load_config
from streamcore.log import LogPartition, open_log_manager
from streamcore.record import Record
from streamcore.watermark import Watermark

pytestmark = [pytest.mark.airflow, pytest.mark.spark]

DAG = "streamcore_backfill"
SOURCE, TARGET = "hist/days", "replay/days"
HOUR = timedelta(hours=1)
# Another Airflow process committing to the metadata database as fast as it can (a scheduler
# under load does the same, slower): it prints "writing" after its first commit, and the number
# of its commits once the file argv[1] exists.
BUSY_WRITER = """
import sys
from pathlib import Path
from sqlalchemy import func, update
from airflow.models import DagModel
from airflow.utils.session import create_session

stop, dag_id, writes = Path(sys.argv[1]), sys.argv[2], 0
while not stop.exists():
    with create_session() as session:
        touch = update(DagModel).where(DagModel.dag_id == dag_id)
        session.execute(touch.values(last_parsed_time=func.now()))
    writes += 1
    if writes == 1:
        print("writing", flush=True)
print(writes, flush=True)
"""


@pytest.mark.timeout(1500)
def test_backfill_create_replays_days_and_skips_quiet_ones(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    af = make_airflow_env(
        tmp_path_factory.mktemp("airflow-home"), tmp_path_factory.mktemp("sc-home")
    )
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    first = today - timedelta(days=6)
    config = load_config(home=af.streamcore_home)
    codec = get_codec("avro")
    manager = open_log_manager(config)
    try:
        # the default streams, empty: a scheduled run the unpaused DAG makes replays nothing
        for name in ("import/docs", "replay/docs"):
            manager.create(name, 1)
        manager.create(SOURCE, 1)
        manager.create(TARGET, 1)
        appender = manager.appender(SOURCE)
        for h in [*range(3 * 24), *range(5 * 24, 6 * 24)]:  # an hour apart; days 3, 4 quiet
            at = first + h * HOUR
            ms = int(at.timestamp() * 1000)
            record = Record(f"h{h}", at.isoformat().encode(), Watermark.of(ms).value)
            appender.append_batch([(record.key, codec.encode(record))], timestamps=[ms])
    finally:
        manager.close()
    days = [first + timedelta(days=d) for d in (1, 2, 3, 4)]  # replay [D, D + 1) for these

    with spark_connect(af, tmp_path_factory.mktemp("spark-connect")):
        services = AirflowServices(af)
        try:
            services.start()
            rest = RestClient(af)
            deadline = time.monotonic() + 120
            while rest.get(f"/api/v2/dags/{DAG}")[0] != 200:  # the dag-processor's first parse
                assert time.monotonic() < deadline, services.tail("dag-processor")
                time.sleep(1)
            status, body = rest.patch(f"/api/v2/dags/{DAG}", {"is_paused": False})
            assert status == 200, body
            # the runs are scheduled at the end of their day: D + 1 for [D, D + 1)
            command = [
                str(VENV_BIN / "airflow"),
                *("backfill", "create", "--dag-id", DAG),
                *("--from-date", (days[0] + timedelta(days=1)).isoformat()),
                *("--to-date", (days[-1] + timedelta(days=1)).isoformat()),
                *("--dag-run-conf", json.dumps({"stream": SOURCE, "target": TARGET})),
                *("--max-active-runs", "1"),
            ]
            done = subprocess.run(command, env=af.env, capture_output=True, text=True, timeout=120)
            assert done.returncode == 0, done.stdout + done.stderr
            runs = _wait_for_backfill(rest, len(days), timeout=900)
            replayed = {
                datetime.fromisoformat(r["data_interval_start"]): _task_states(rest, r)
                for r in runs
            }
        finally:
            services.stop()
    assert [r["state"] for r in runs] == ["success"] * 4, runs
    assert sorted(replayed) == days
    ran = {"validate": "success", "replay": "success", "summary": "success"}
    quiet = {"validate": "skipped", "replay": "skipped", "summary": "skipped"}
    assert [replayed[d] for d in days] == [ran, ran, quiet, quiet], replayed
    records = {}
    for path in (af.streamcore_home / "runs" / "backfill").glob("*.json"):
        record = json.loads(path.read_text())
        if record["run_id"] in {r["dag_run_id"] for r in runs}:
            records[record["replay"]["start"]] = record["replay"]
    assert len(records) == 2
    assert all(r["appended"] == 24 and r["records"] == 24 for r in records.values()), records
    assert all(r["spark_connect"].startswith("sc://") for r in records.values()), records

    manager = open_log_manager(config)
    try:
        end = manager.end_offsets(TARGET)[0]
        keys = [manager.record_at(LogPartition.of(TARGET, 0), o)[0] for o in range(end)]
    finally:
        manager.close()
    assert keys == [f"h{h}" for h in range(24, 3 * 24)]  # days 1, 2: in order, once


def _task_states(rest: RestClient, run: dict[str, Any]) -> dict[str, str]:
    status, body = rest.get(f"/api/v2/dags/{DAG}/dagRuns/{run['dag_run_id']}/taskInstances")
    assert status == 200, body
    return {t["task_id"]: t["state"] for t in body["task_instances"]}


def _wait_for_backfill(rest: RestClient, count: int, timeout: float) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        status, body = rest.get(f"/api/v2/dags/{DAG}/dagRuns?run_type=backfill&limit=100")
        assert status == 200, body
        runs = body["dag_runs"]
        if len(runs) == count and all(r["state"] in ("success", "failed") for r in runs):
            return runs
        assert time.monotonic() < deadline, f"backfill not done after {timeout} s: {runs}"
        time.sleep(3)


@pytest.mark.timeout(900)
def test_backfill_create_beside_a_busy_writer(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Airflow creates each backfill run in a transaction that reads before it writes; on SQLite
    such a transaction is refused at once when another process committed in between. The
    default set-up's database must let the CLI and the scheduler write together."""
    af = make_airflow_env(
        tmp_path_factory.mktemp("airflow-home"), tmp_path_factory.mktemp("sc-home")
    )
    assert metadata_db_url(af).startswith("postgresql"), metadata_db_url(af)
    dag = "streamcore_stream_stats"  # daily: one run a day
    done = subprocess.run(
        [str(VENV_BIN / "airflow"), "dags", "reserialize"],
        env=af.env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    stop = af.home / "stop-writing"
    writer = subprocess.Popen(
        [str(VENV_BIN / "python"), "-c", BUSY_WRITER, str(stop), dag],
        env=af.env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout is not None
        assert writer.stdout.readline().strip() == "writing"
        today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        done = subprocess.run(
            [
                str(VENV_BIN / "airflow"),
                *("backfill", "create", "--dag-id", dag),
                *("--from-date", (today - timedelta(days=30)).isoformat()),
                *("--to-date", today.isoformat()),
            ],
            env=af.env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        stop.touch()
        writes = int(writer.communicate(timeout=60)[0].strip())
    finally:
        writer.kill()
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    assert writes > 1, "the writer stopped before the backfill ran"
    created = run_python(
        af,
        f"""
        from airflow.models import DagRun
        from airflow.utils.session import create_session
        with create_session() as session:
            runs = session.query(DagRun).filter_by(dag_id={dag!r}, run_type="backfill").count()
        print(json.dumps(runs))
        """,
    )
    assert created == 31, created  # one a day, both ends included


@pytest.mark.timeout(600)
def test_validate_refuses_a_topology_outside_the_configured_modules(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """The `topology` Param names any module:attribute; a dag.test() run with a module outside
    `[backfill] topologies` fails in validate, which imports nothing, and says what to set."""
    af = make_airflow_env(
        tmp_path_factory.mktemp("airflow-home"), tmp_path_factory.mktemp("sc-home")
    )
    modules = tmp_path_factory.mktemp("modules")
    (modules / "probe_flows.py").write_text(
        "from pathlib import Path\n"
        "Path(__file__).with_suffix('.imported').touch()\n"
        "def build():\n    return None\n"
    )
    af.env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(modules), af.env.get("PYTHONPATH")]))
    with open_log_manager(load_config(home=af.streamcore_home)) as manager:
        manager.create("hist/a", 1)
        manager.create("replay/a", 1)
    conf = {"stream": "hist/a", "target": "replay/a", "target_kind": "topology", "dry_run": False}
    run = dag_test(af, DAG, {**conf, "topology": "probe_flows:build"})
    assert run["state"] == "failed" and run["tasks"]["validate"] == "failed", run
    assert run["tasks"]["replay"] == "upstream_failed", run
    checked = run_python(
        af,
        f"""
        from types import SimpleNamespace
        import streamcore_backfill as m
        from _streamcore import check_job_arguments
        from airflow.sdk.exceptions import AirflowFailException
        params = {{**{{k: p.value for k, p in m.PARAMS.items()}}, **{conf!r}}}
        context = {{"dag_run": SimpleNamespace(run_type="backfill"),
                    "data_interval_start": None, "data_interval_end": None}}
        out = {{}}
        for spec in ("probe_flows:build", "os:getcwd"):
            argv = m.backfill_arguments({{**params, "topology": spec, "start": "2026-11-01",
                                          "end": "2026-11-02"}}, context)["replay"]
            try:
                check_job_arguments("backfill", argv)
                out[spec] = None
            except AirflowFailException as exc:
                out[spec] = str(exc)
        print(json.dumps(out))
        """,
    )
    for spec, error in checked.items():
        assert error is not None and "[backfill] topologies" in error, checked
        assert "STREAMCORE_BACKFILL_TOPOLOGIES" in error and f"--topology {spec}" in error
    assert not (modules / "probe_flows.imported").exists()  # never imported, not even to check
