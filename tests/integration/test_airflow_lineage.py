"""OpenLineage events of the importer DAG end to end, with the file transport scripts/airflow.sh
configures (AIRFLOW_HOME/logs/openlineage.jsonl): on real Airflow (`dag.test()`), Spark (the job
tasks thin clients of a Spark Connect server) and Delta, one run that lands a batch with a
quarantined row, then one whose consume the job refuses (a failing row over a 0 threshold).
Each job task's events come START then COMPLETE (or FAIL), name the datasets of
streamcore.datasets, and carry the job's summary (`streamcore_job`) and Great Expectations'
result (`dataQualityAssertions` on the stream read)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from airflow_harness import AirflowEnv, airflow_on_connect, dag_test, run_python

from streamcore.config import load_config
from streamcore.datasets import stream_dataset, table_dataset

pytestmark = [pytest.mark.airflow, pytest.mark.spark, pytest.mark.timeout(1800)]

DAG = "streamcore_importer"
LATE = "expect_column_pair_values_a_to_be_greater_than_b(modified, created)"


def _doc(i: int, **changes: Any) -> dict[str, Any]:
    doc = {
        "id": f"{i:08x}-bbbb-4000-8000-000000000000",
        "parentPath": "/ws",
        "type": "Note",
        "title": f"note {i}",
        "description": None,
        "language": "fr_FR",
        "creator": "bob",
        # ISO strings: a JSON number in a timestamp column is read as seconds since the epoch.
        "created": "2023-11-14T22:13:20Z",
        "modified": "2023-11-14T22:13:20Z",
        "properties": {},
        "blobName": None,
        "blobSize": None,
    }
    return {**doc, **changes}


@pytest.fixture(scope="module")
def af(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirflowEnv]:
    with airflow_on_connect(tmp_path_factory) as env:
        yield env


@pytest.fixture(scope="module")
def events(af: AirflowEnv) -> dict[str, Any]:
    """The two runs (landed, then refused), their task states and the events they emitted."""
    docs = af.streamcore_home / "docs.jsonl"
    af.streamcore_home.mkdir(parents=True, exist_ok=True)
    rows = [_doc(i) for i in range(4)] + [_doc(4, modified="2020-09-13T12:26:40Z")]  # < created
    docs.write_text("".join(json.dumps(d) + "\n" for d in rows))
    conf = {"source": "files", "path": str(docs)}
    landed = dag_test(af, DAG, {**conf, "failure_threshold": 0.5})
    # consume's retries (2, 30 s apart) cannot change the verdict on the same records: none here.
    refused = run_python(
        af,
        f"""
        from pathlib import Path
        from airflow.dag_processing.dagbag import BundleDagBag
        folder = Path("dags").resolve()
        dag = BundleDagBag(dag_folder=folder, bundle_path=folder).dags[{DAG!r}]
        dag.task_dict["consume"].retries = 0
        run = dag.test(run_conf={{**{conf!r}, "failure_threshold": 0.0}})
        states = {{ti.task_id: str(ti.state) for ti in run.get_task_instances()}}
        print(json.dumps({{"state": str(run.state), "run_id": run.run_id, "tasks": states}}))
        """,
    )
    path = af.home / "logs" / "openlineage.jsonl"
    found = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {"landed": landed, "refused": refused, "events": found}


def _task_events(events: list[dict[str, Any]], run_id: str, task: str) -> list[dict[str, Any]]:
    """The events of task `task` of DAG run `run_id`, in the order they were written."""
    return [
        e
        for e in events
        if e["job"]["name"] == f"{DAG}.{task}"
        and e["run"]["facets"].get("airflow", {}).get("dagRun", {}).get("run_id") == run_id
    ]


def _datasets(event: dict[str, Any], key: str) -> list[tuple[str, str]]:
    return [(d["namespace"], d["name"]) for d in event.get(key, [])]


def test_each_job_task_emits_start_then_complete_with_its_datasets(
    af: AirflowEnv, events: dict[str, Any]
) -> None:
    landed = events["landed"]
    assert landed["state"] == "success", landed
    config = load_config(home=af.streamcore_home)
    stream = stream_dataset("import/docs", config).openlineage
    tables = [table_dataset(t, config).openlineage for t in ("repository", "quarantine")]
    produce = _task_events(events["events"], landed["run_id"], "produce")
    consume = _task_events(events["events"], landed["run_id"], "consume")
    assert [e["eventType"] for e in produce] == ["START", "COMPLETE"]
    assert [e["eventType"] for e in consume] == ["START", "COMPLETE"]
    assert produce[0]["run"]["runId"] == produce[1]["run"]["runId"]
    for event in consume:
        assert _datasets(event, "inputs") == [stream]
        assert _datasets(event, "outputs") == tables
    assert _datasets(produce[1], "outputs") == [stream]

    # The job's summary: on COMPLETE only (START comes before the job runs).
    assert "streamcore_job" not in consume[0]["run"]["facets"]
    job = consume[1]["run"]["facets"]["streamcore_job"]
    assert (job["job"], job["step"], job["status"]) == ("importer", "consume", "ok")
    assert (job["batch"], job["read"], job["rows"], job["quarantined"]) == (0, 5, 4, 1)
    assert sum(end - start for start, end in job["offsets"].values()) == 5
    assert job["delta_version"] >= 0
    assert job["_schemaURL"].startswith("include/openlineage/StreamcoreJobRunFacet.json")
    produced = produce[1]["run"]["facets"]["streamcore_job"]
    assert (produced["step"], produced.get("batch")) == ("produce", None)

    # Great Expectations' result on the stream the step validated.
    quality = consume[1]["inputs"][0]["inputFacets"]
    assert quality["dataQualityAssertions"]["assertions"] == [
        {"assertion": LATE, "success": False, "actual": "1 unexpected rows", "params": {}}
    ]
    assert quality["dataQualityMetrics"]["rowCount"] == 5


def test_a_refused_batch_emits_fail_with_the_validation(
    af: AirflowEnv, events: dict[str, Any]
) -> None:
    refused = events["refused"]
    assert refused["state"] == "failed", refused
    assert refused["tasks"]["produce"] == "success" and refused["tasks"]["consume"] == "failed"
    consume = _task_events(events["events"], refused["run_id"], "consume")
    assert [e["eventType"] for e in consume] == ["START", "FAIL"]
    failed = consume[1]
    job = failed["run"]["facets"]["streamcore_job"]
    assert (job["status"], job["batch"], job["quarantined"]) == ("failed", 1, 0)
    assert "over the --failure-threshold" in job["error"]
    assert sum(end - start for start, end in job["offsets"].values()) == 5
    assertions = failed["inputs"][0]["inputFacets"]["dataQualityAssertions"]["assertions"]
    assert [(a["assertion"], a["success"]) for a in assertions] == [(LATE, False)]
    assert "errorMessage" in failed["run"]["facets"]  # the provider's: the task's exception


def test_task_events_are_children_of_their_dag_run(events: dict[str, Any]) -> None:
    """The provider's parent facet ties each task's run to its DAG run's (the DAG-level job the
    Spark listener's runs are tied to in turn, docs/airflow.md "Lineage")."""
    run_id = events["landed"]["run_id"]
    consume = _task_events(events["events"], run_id, "consume")[-1]
    parent = consume["run"]["facets"]["parent"]
    assert parent["job"]["name"] == DAG
