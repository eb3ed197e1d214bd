"""Assets, lineage and runs started by records, end to end on real Airflow, Spark (job tasks as
thin clients of a Spark Connect server) and Delta, in one Airflow home (each DAG gets one
end-to-end run, not one per case: DEVELOPERS.md):

- one importer run (`dag.test()`) from a file of 5 documents, one of them failing an expectation
  under a 0.5 threshold, lands 4 rows and quarantines 1. It serves both:
  - lineage, with the file transport scripts/airflow.sh configures
    (AIRFLOW_HOME/logs/openlineage.jsonl): each job task's events come START then COMPLETE, name
    the datasets of streamcore.datasets, carry the job's summary (`streamcore_job`) and Great
    Expectations' result (`dataQualityAssertions` on the stream read), under their DAG run;
  - data-aware scheduling: its asset event on `repository` holds the landed batch in its extra
    and queues `streamcore_repository_report`; once the scheduler runs, the report's run starts
    from that event and records it;
- then one importer run whose consume the job refuses (the same failing row over a 0 threshold)
  emits FAIL with the validation;
- records mode: with `[audit] runs_on = "records"` and Airflow's triggerer running, entries
  appended to `audit/entries` start an audit run that lands them (three rounds; the append →
  landed latency of each is printed and kept in `ROUNDS`), and over several trigger polls with
  nothing appended, before and after, no run starts. Polls are counted in the triggerer's log
  (the trigger logs each at debug level), never waited for by the clock. The audit DAG's stream
  and group (`audit/entries`, `audit/delta`) share nothing with the importer's, so the importer
  runs before leave it nothing to land."""

from __future__ import annotations

import json
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
from streamcore.datasets import stream_dataset, table_dataset

# The fixtures' two importer runs come before the first test: more than the default 600 s.
pytestmark = [pytest.mark.airflow, pytest.mark.spark, pytest.mark.timeout(1800)]

REPORT, IMPORTER, AUDIT = "streamcore_repository_report", "streamcore_importer", "streamcore_audit"
LATE = "expect_column_pair_values_a_to_be_greater_than_b(modified, created)"
READ, LANDED = 5, 4  # documents in the file; rows landed (one is quarantined)
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
        airflow(af, "dags", "reserialize")
        airflow(af, "dags", "unpause", REPORT)
        yield af


def _doc(i: int, **changes: Any) -> dict[str, Any]:
    doc = {
        "id": f"{i:08x}-bbbb-4000-8000-000000000000",
        "parentPath": "/ws",
        "type": "Note",
        "title": f"note {i}",
        "description": None,
        "language": "fr_FR",
        "creator": "bob",
        "created": "2023-11-14T22:13:20Z",
        "modified": "2023-11-14T22:13:20Z",
        "properties": {},
        "blobName": None,
        "blobSize": None,
    }
    return {**doc, **changes}


def queued_and_events(af: AirflowEnv) -> dict[str, Any]:
    """The asset queue (DAG, asset) and the asset events (asset, source DAG, task and run,
    extra)."""
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
                       AssetEvent.source_run_id, AssetEvent.extra)
                .join(AssetModel, AssetModel.id == AssetEvent.asset_id)
                .order_by(AssetEvent.id)
            ).all()
        print(json.dumps({"queued": [list(q) for q in queued],
                          "events": [list(e) for e in events]}))
        """,
    )


@pytest.fixture(scope="module")
def imported(af: AirflowEnv) -> dict[str, Any]:
    """The two importer runs (landed, then refused), their task states, the asset queue and
    events they left and the OpenLineage events they emitted."""
    docs = af.streamcore_home / "docs.jsonl"
    af.streamcore_home.mkdir(parents=True, exist_ok=True)
    rows = [_doc(i) for i in range(LANDED)] + [
        _doc(4, modified="2020-09-13T12:26:40Z")
    ]  # < created
    docs.write_text("".join(json.dumps(d) + "\n" for d in rows))
    conf = {"source": "files", "path": str(docs)}
    landed = dag_test(af, IMPORTER, {**conf, "failure_threshold": 0.5})
    assert landed["state"] == "success", landed
    # consume's retries (2, 30 s apart) cannot change the verdict on the same records: none here.
    refused = run_python(
        af,
        f"""
        from pathlib import Path
        from airflow.dag_processing.dagbag import BundleDagBag
        folder = Path("dags").resolve()
        dag = BundleDagBag(dag_folder=folder, bundle_path=folder).dags[{IMPORTER!r}]
        dag.task_dict["consume"].retries = 0
        run = dag.test(run_conf={{**{conf!r}, "failure_threshold": 0.0}})
        states = {{ti.task_id: str(ti.state) for ti in run.get_task_instances()}}
        print(json.dumps({{"state": str(run.state), "run_id": run.run_id, "tasks": states}}))
        """,
    )
    path = af.home / "logs" / "openlineage.jsonl"
    found = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {
        "landed": landed,
        "refused": refused,
        "lineage": found,
        "docs": str(docs.resolve()),
        **queued_and_events(af),
    }


def _task_events(events: list[dict[str, Any]], run_id: str, task: str) -> list[dict[str, Any]]:
    """The events of task `task` of importer run `run_id`, in the order they were written."""
    return [
        e
        for e in events
        if e["job"]["name"] == f"{IMPORTER}.{task}"
        and e["run"]["facets"].get("airflow", {}).get("dagRun", {}).get("run_id") == run_id
    ]


def _datasets(event: dict[str, Any], key: str) -> list[tuple[str, str]]:
    return [(d["namespace"], d["name"]) for d in event.get(key, [])]


def test_each_job_task_emits_start_then_complete_with_its_datasets(
    af: AirflowEnv, imported: dict[str, Any]
) -> None:
    landed = imported["landed"]
    config = load_config(home=af.streamcore_home)
    stream = stream_dataset("import/docs", config).openlineage
    tables = [table_dataset(t, config).openlineage for t in ("repository", "quarantine")]
    produce = _task_events(imported["lineage"], landed["run_id"], "produce")
    consume = _task_events(imported["lineage"], landed["run_id"], "consume")
    assert [e["eventType"] for e in produce] == ["START", "COMPLETE"]
    assert [e["eventType"] for e in consume] == ["START", "COMPLETE"]
    assert produce[0]["run"]["runId"] == produce[1]["run"]["runId"]
    for event in consume:
        assert _datasets(event, "inputs") == [stream]
        assert _datasets(event, "outputs") == tables
    assert _datasets(produce[1], "outputs") == [stream]
    # The file the run's Params chose: known once the job ran, so on COMPLETE only.
    assert _datasets(produce[0], "inputs") == []
    assert _datasets(produce[1], "inputs") == [("file", imported["docs"])]

    # The job's summary: on COMPLETE only (START comes before the job runs).
    assert "streamcore_job" not in consume[0]["run"]["facets"]
    job = consume[1]["run"]["facets"]["streamcore_job"]
    assert (job["job"], job["step"], job["status"]) == ("importer", "consume", "ok")
    assert (job["batch"], job["read"], job["rows"], job["quarantined"]) == (0, READ, LANDED, 1)
    assert sum(end - start for start, end in job["offsets"].values()) == READ
    assert job["delta_version"] >= 0
    assert job["_schemaURL"].startswith("include/openlineage/StreamcoreJobRunFacet.json")
    produced = produce[1]["run"]["facets"]["streamcore_job"]
    assert (produced["step"], produced.get("batch")) == ("produce", None)

    # Great Expectations' result on the stream the step validated.
    quality = consume[1]["inputs"][0]["inputFacets"]
    assert quality["dataQualityAssertions"]["assertions"] == [
        {"assertion": LATE, "success": False, "actual": "1 unexpected rows", "params": {}}
    ]
    assert quality["dataQualityMetrics"]["rowCount"] == READ


def test_a_refused_batch_emits_fail_with_the_validation(imported: dict[str, Any]) -> None:
    refused = imported["refused"]
    assert refused["state"] == "failed", refused
    assert refused["tasks"]["produce"] == "success" and refused["tasks"]["consume"] == "failed"
    consume = _task_events(imported["lineage"], refused["run_id"], "consume")
    assert [e["eventType"] for e in consume] == ["START", "FAIL"]
    failed = consume[1]
    job = failed["run"]["facets"]["streamcore_job"]
    assert (job["status"], job["batch"], job["quarantined"]) == ("failed", 1, 0)
    assert "over the --failure-threshold" in job["error"]
    assert sum(end - start for start, end in job["offsets"].values()) == READ
    assertions = failed["inputs"][0]["inputFacets"]["dataQualityAssertions"]["assertions"]
    assert [(a["assertion"], a["success"]) for a in assertions] == [(LATE, False)]
    assert "errorMessage" in failed["run"]["facets"]  # the provider's: the task's exception


def test_task_events_are_children_of_their_dag_run(imported: dict[str, Any]) -> None:
    """The provider's parent facet ties each task's run to its DAG run's (the DAG-level job the
    Spark listener's runs are tied to in turn, docs/airflow.md "Lineage")."""
    run_id = imported["landed"]["run_id"]
    consume = _task_events(imported["lineage"], run_id, "consume")[-1]
    parent = consume["run"]["facets"]["parent"]
    assert parent["job"]["name"] == IMPORTER


def test_a_landed_batch_emits_its_asset_event_and_queues_the_report(
    imported: dict[str, Any],
) -> None:
    assert [REPORT, "repository"] in imported["queued"], imported["queued"]
    run_id = imported["landed"]["run_id"]
    by_asset = {
        name: (dag, task, extra)
        for name, dag, task, run, extra in imported["events"]
        if run == run_id
    }
    assert by_asset["import/docs"][:2] == (IMPORTER, "produce")
    dag, task, extra = by_asset["repository"]
    assert (dag, task) == (IMPORTER, "consume")
    assert (extra["job"], extra["batch"], extra["rows"]) == ("importer", 0, LANDED)
    assert extra["quarantined"] == 1 and isinstance(extra["delta_version"], int)
    assert sum(end - start for start, end in extra["offsets"].values()) == READ
    assert by_asset["quarantine"][2]["batch"] == 0
    # The refused run lands nothing: no event on the tables, so nothing more for the report.
    refused = imported["refused"]["run_id"]
    assert [e[0] for e in imported["events"] if e[3] == refused] == ["import/docs"]


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
    assert f'"rows": {LANDED}' in record


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
