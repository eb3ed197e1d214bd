"""Assets and runs started by records, on real Airflow, Spark (job tasks as thin clients of a
Spark Connect server) and Delta:

- data-aware scheduling: one importer run (`dag.test()`) emits an asset event on `repository`
  whose extra is the landed batch, which queues `streamcore_repository_report`; once the
  scheduler runs, the report's run starts from that event and records it;
- records mode: with `[audit] runs_on = "records"` and Airflow's triggerer running, entries
  appended to `audit/entries` start an audit run that lands them (three rounds; the append →
  landed latency of each is printed and kept in `ROUNDS`), and over several trigger polls with
  nothing appended, before and after, no run starts. Polls are counted in the triggerer's log
  (the trigger logs each at debug level), never waited for by the clock."""

from __future__ import annotations

import re
import statistics
import subprocess
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from airflow_harness import (
    VENV_BIN,
    AirflowEnv,
    AirflowServices,
    RestClient,
    airflow_on_connect,
    dag_test,
    run_python,
)
from audit_support import append_entries, entry

from streamcore.config import load_config

pytestmark = [pytest.mark.airflow, pytest.mark.spark]

REPORT, IMPORTER, AUDIT = "streamcore_repository_report", "streamcore_importer", "streamcore_audit"
DOCUMENTS = 60
IDLE_POLLS = 5  # trigger intervals with nothing appended, in which no run may start
ROUND_ENTRIES = 4
ROUNDS: list[float] = []  # append → landed seconds of each records-mode round
POLL = re.compile(r"poll \d+ of audit/entries")


def airflow(af: AirflowEnv, *args: str) -> None:
    done = subprocess.run(
        [str(VENV_BIN / "airflow"), *args], env=af.env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, f"airflow {' '.join(args)}:\n{done.stdout}\n{done.stderr}"


@pytest.fixture(scope="module")
def af(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirflowEnv]:
    """An Airflow home on a Spark Connect server, its audit DAG in records mode, polling every
    second; every DAG serialized and the report DAG unpaused (a paused DAG is not queued)."""
    with airflow_on_connect(tmp_path_factory) as af:
        af.env["STREAMCORE_AUDIT_RUNS_ON"] = "records"
        af.env["STREAMCORE_AUDIT_WATCH_INTERVAL"] = "1s"
        # Lineage has tests of its own; its log lines would follow run_python's JSON line.
        af.env["AIRFLOW__OPENLINEAGE__DISABLED"] = "true"
        airflow(af, "dags", "reserialize")
        airflow(af, "dags", "unpause", REPORT)
        yield af


def queued_and_events(af: AirflowEnv) -> dict[str, Any]:
    """The asset queue (DAG, asset) and the asset events (asset, source task, extra)."""
    return run_python(
        af,
        """
        from sqlalchemy import select
        from airflow.models.asset import AssetDagRunQueue, AssetEvent, AssetModel
        from airflow.utils.session import create_session
        with create_session() as session:
            queued = session.execute(
                select(AssetDagRunQueue.target_dag_id, AssetModel.name)
                .join(AssetModel, AssetModel.id == AssetDagRunQueue.asset_id)
            ).all()
            events = session.execute(
                select(AssetModel.name, AssetEvent.source_dag_id, AssetEvent.source_task_id,
                       AssetEvent.extra)
                .join(AssetModel, AssetModel.id == AssetEvent.asset_id)
                .order_by(AssetEvent.id)
            ).all()
        print(json.dumps({"queued": [list(q) for q in queued],
                          "events": [list(e) for e in events]}))
        """,
    )


@pytest.fixture(scope="module")
def imported(af: AirflowEnv) -> dict[str, Any]:
    """One importer run; then the queue and the events it left."""
    run = dag_test(af, IMPORTER, {"count": DOCUMENTS, "partitions": 2, "avg_blob_size": 64})
    assert run["state"] == "success", run
    return {"run": run, **queued_and_events(af)}


def test_a_landed_batch_emits_its_asset_event_and_queues_the_report(
    imported: dict[str, Any],
) -> None:
    assert [REPORT, "repository"] in imported["queued"], imported["queued"]
    by_asset = {name: (dag, task, extra) for name, dag, task, extra in imported["events"]}
    assert by_asset["import/docs"][:2] == (IMPORTER, "produce")
    dag, task, extra = by_asset["repository"]
    assert (dag, task) == (IMPORTER, "consume")
    assert (extra["job"], extra["batch"], extra["rows"]) == ("importer", 0, DOCUMENTS)
    assert extra["quarantined"] == 0 and isinstance(extra["delta_version"], int)
    assert sum(end - start for start, end in extra["offsets"].values()) == DOCUMENTS
    assert by_asset["quarantine"][2]["batch"] == 0


@pytest.fixture(scope="module")
def services(af: AirflowEnv, imported: dict[str, Any]) -> Iterator[RestClient]:
    """api-server, scheduler and dag-processor (the harness's), and a triggerer logging at debug
    level (the trigger's polls) to logs/triggerer.log."""
    started = AirflowServices(af)
    log = open(af.home / "logs" / "triggerer.log", "ab")  # noqa: SIM115 - closed at the end
    triggerer = subprocess.Popen(
        [str(VENV_BIN / "airflow"), "triggerer"],
        env={**af.env, "AIRFLOW__LOGGING__LOGGING_LEVEL": "DEBUG"},
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    started.processes["triggerer"] = triggerer  # stopped with the others
    try:
        started.start()
        yield RestClient(af)
    finally:
        started.stop()
        log.close()


def wait_for(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := condition()):
        assert time.monotonic() < deadline, f"timed out after {timeout:g} s waiting for {what}"
        time.sleep(0.5)
    return found


def runs(rest: RestClient, dag_id: str) -> list[dict[str, Any]]:
    status, body = rest.get(f"/api/v2/dags/{dag_id}/dagRuns?limit=100&order_by=run_after")
    if status == 404:  # the dag-processor has not parsed it yet
        return []
    assert status == 200, body
    return body["dag_runs"]


def test_the_report_runs_from_the_importer_event(af: AirflowEnv, services: RestClient) -> None:
    [run] = wait_for(
        lambda: [r for r in runs(services, REPORT) if r["state"] in ("success", "failed")],
        600,
        "the report run the queued event starts",
    )
    assert run["state"] == "success" and run["run_type"] == "asset_triggered", run
    records = list((af.streamcore_home / "runs" / "repository_report").glob("*.json"))
    [record] = [r.read_text() for r in records]
    assert '"source_dag_id": "streamcore_importer"' in record
    assert f'"rows": {DOCUMENTS}' in record


def polls(af: AirflowEnv) -> int:
    return len(POLL.findall((af.home / "logs" / "triggerer.log").read_text(errors="replace")))


def assert_idle(af: AirflowEnv, rest: RestClient) -> None:
    """No audit run starts while the trigger polls IDLE_POLLS more times."""
    before, seen = runs(rest, AUDIT), polls(af)
    wait_for(lambda: polls(af) >= seen + IDLE_POLLS, 300, f"{IDLE_POLLS} trigger polls")
    assert runs(rest, AUDIT) == before, "a run started with nothing appended"


def test_appended_entries_start_a_run_that_lands_them(af: AirflowEnv, services: RestClient) -> None:
    status, body = services.patch(f"/api/v2/dags/{AUDIT}", {"is_paused": False})
    assert status == 200, body
    wait_for(lambda: polls(af) > 0, 300, "the trigger's first poll")
    assert_idle(af, services)  # audit/entries does not even exist yet
    config = load_config(home=af.streamcore_home)
    now = datetime.now(UTC) - timedelta(minutes=1)
    for n in range(3):
        items = [entry(100 * n + i, event_date=now) for i in range(ROUND_ENTRIES)]
        known = len(runs(services, AUDIT))
        append_entries(items, config)
        appended = datetime.now(UTC)
        run = wait_for(
            lambda known=known: [
                r for r in runs(services, AUDIT)[known:] if r["state"] in ("success", "failed")
            ],
            600,
            f"the audit run of round {n}",
        )[0]
        assert run["state"] == "success" and run["run_type"] == "asset_triggered", run
        status, land = services.get(
            f"/api/v2/dags/{AUDIT}/dagRuns/{run['dag_run_id']}/taskInstances/land"
        )
        assert status == 200 and land["state"] == "success", land
        ROUNDS.append((datetime.fromisoformat(land["end_date"]) - appended).total_seconds())
        landed = landed_ids(af)
        assert {e["event_id"] for e in items} <= landed
        assert len(landed) == ROUND_ENTRIES * (n + 1)
    assert_idle(af, services)  # everything landed: no run without new entries
    print(f"append -> landed: {ROUNDS}, median {statistics.median(ROUNDS):.1f} s")


def landed_ids(af: AirflowEnv) -> set[str]:
    from deltalake import DeltaTable

    table = DeltaTable(str(af.streamcore_home / "delta" / "audit"))
    return {row["event_id"] for row in table.to_pyarrow_table(columns=["event_id"]).to_pylist()}
