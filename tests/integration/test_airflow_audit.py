"""The audit DAG end to end on real Airflow, Spark (its job tasks thin clients of a Spark Connect
server) and Delta, the table read back with delta-rs (not Spark): batch-mode runs (`dag.test()`,
as the schedule runs them) land the entries of `audit/entries` once each; after the rows of two
5-minute intervals are deleted, a backfill over those two intervals through the CLI (`airflow
backfill create`, executed by a running scheduler) replays them in interval mode, and so does one
of a third deleted interval through the REST API (`POST /api/v2/backfills` of a running
api-server): the table is again what the batches wrote. Bad Params stop before Spark."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.parse
from collections.abc import Iterator
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
from audit_support import append_entries, entry, relay_time

from streamcore.config import load_config

pytestmark = [pytest.mark.airflow, pytest.mark.spark]

DAG = "streamcore_audit"
SLOT = timedelta(minutes=5)  # the period of the default schedule, */5 * * * *
# Four whole slots two hours back: the job refuses event dates in its future, and an interval
# run finds entries by their append times, which follow their event dates.
T0 = (datetime.now(UTC) - timedelta(hours=2)).replace(second=0, microsecond=0)
T0 -= timedelta(minutes=T0.minute % 5)
TYPES = ["documentCreated", "documentModified", "download"]
ENTRIES = [  # 12 per slot
    entry(n, event_date=T0 + n * timedelta(seconds=25), event_type=TYPES[n % 3]) for n in range(48)
]
REPEATED = ENTRIES[3]  # the relay delivers it twice
FIRST_BATCH = 30
Batches = tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]  # run records, the table


def slot(i: int) -> tuple[datetime, datetime]:
    return T0 + i * SLOT, T0 + (i + 1) * SLOT


def in_slot(i: int) -> set[str]:
    start, end = slot(i)
    return {e["event_id"] for e in ENTRIES if start <= e["event_date"] < end}


def append_batches(af: AirflowEnv) -> None:
    """ENTRIES on `audit/entries` as the relay appends them, then REPEATED again a second after
    the last (the relay delivers at least once)."""
    times = [relay_time(e) for e in ENTRIES]
    append_entries(
        [*ENTRIES, REPEATED],
        load_config(home=af.streamcore_home),
        timestamps=[*times, times[-1] + 1000],
    )


def table(af: AirflowEnv) -> dict[str, dict[str, Any]]:
    """The audit table by event id, read by delta-rs."""
    from deltalake import DeltaTable

    rows = DeltaTable(str(af.streamcore_home / "delta" / "audit")).to_pyarrow_table().to_pylist()
    assert len(rows) == len({r["event_id"] for r in rows}), "an event id landed twice"
    return {r["event_id"]: r for r in rows}


def table_version(af: AirflowEnv) -> int:
    from deltalake import DeltaTable

    return DeltaTable(str(af.streamcore_home / "delta" / "audit")).version()


def delete_slots(af: AirflowEnv, *slots: int) -> None:
    """Delete the table's rows of `slots` with delta-rs, in a subprocess: delta-rs may abort at
    interpreter exit after a write (delta-io/delta-rs#2184), so that one ends with os._exit."""
    predicate = " OR ".join(
        f"(event_date >= '{start.isoformat()}' AND event_date < '{end.isoformat()}')"
        for start, end in map(slot, slots)
    )
    done = run_python(
        af,
        f"""
        import os
        from deltalake import DeltaTable
        metrics = DeltaTable({str(af.streamcore_home / "delta" / "audit")!r}).delete({predicate!r})
        print(json.dumps(metrics), flush=True)
        os._exit(0)
        """,
    )
    assert done["num_deleted_rows"] == sum(len(in_slot(i)) for i in slots), done


def run_records(af: AirflowEnv) -> dict[str, dict[str, Any]]:
    """The run records the summary task keeps, by run id."""
    records = (json.loads(p.read_text()) for p in (af.streamcore_home / "runs" / "audit").glob("*"))
    return {r["run_id"]: r for r in records}


@pytest.fixture(scope="module")
def af(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirflowEnv]:
    """An Airflow home whose job tasks run on a Spark Connect server of the module."""
    with airflow_on_connect(tmp_path_factory) as af:
        yield af


@pytest.fixture(scope="module")
def batches(af: AirflowEnv) -> Batches:
    """Two runs in batch mode (`mode` auto, no start/end, as the schedule's): the first limited
    to FIRST_BATCH entries, the second lands the rest. Returns the run records and the table."""
    append_batches(af)
    runs = [dag_test(af, DAG, {"batch_limit": FIRST_BATCH}), dag_test(af, DAG, {})]
    records = run_records(af)
    for run in runs:
        assert run["state"] == "success", run
        assert run["tasks"] == {"validate": "success", "land": "success", "summary": "success"}
    assert all(records[run["run_id"]]["land"]["spark_connect"] for run in runs), records
    return [records[run["run_id"]] for run in runs], table(af)


@pytest.fixture(scope="module")
def rest(af: AirflowEnv, batches: Batches) -> Iterator[RestClient]:
    """api-server, scheduler and dag-processor (after the dag.test runs: one SQLite database),
    with the DAG unpaused: a paused DAG's backfill runs never start."""
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


def dag_runs(rest: RestClient, run_type: str) -> list[dict[str, Any]]:
    status, body = rest.get(f"/api/v2/dags/{DAG}/dagRuns?run_type={run_type}&limit=100")
    assert status == 200, body
    return body["dag_runs"]


def wait_for_backfill(rest: RestClient, intervals: list[int], timeout: float) -> list[dict]:
    """The backfill runs of the slots `intervals` once all ended and the scheduler marked the
    backfill complete (Airflow allows one active backfill per DAG)."""
    starts = {slot(i)[0] for i in intervals}
    deadline = time.monotonic() + timeout
    while True:
        runs = [
            r
            for r in dag_runs(rest, "backfill")
            if datetime.fromisoformat(r["data_interval_start"]) in starts
        ]
        status, body = rest.get(f"/api/v2/backfills?dag_id={DAG}")
        assert status == 200, body
        complete = all(b["completed_at"] for b in body["backfills"])
        ended = len(runs) == len(starts) and all(r["state"] in ("success", "failed") for r in runs)
        if ended and complete:
            return sorted(runs, key=lambda r: r["data_interval_start"])
        assert time.monotonic() < deadline, f"backfill not done after {timeout} s: {runs} {body}"
        time.sleep(3)


def assert_replayed(
    af: AirflowEnv, runs: list[dict], intervals: list[int], deleted: set[int]
) -> None:
    """Each backfill run landed its slot, its data interval, in interval mode: the slot's
    entries (and the relay's repeat, if it is of the slot) read, those of a deleted slot
    inserted once, those of an intact slot left as they were."""
    records = run_records(af)
    assert len(runs) == len(intervals)
    for run, i in zip(runs, intervals, strict=True):
        assert run["state"] == "success", run
        assert run["run_type"] == "backfill"
        start, end = slot(i)
        interval = (run["data_interval_start"], run["data_interval_end"])
        assert tuple(map(datetime.fromisoformat, interval)) == (start, end)
        record = records[run["dag_run_id"]]
        assert f"interval [{start.isoformat()}, {end.isoformat()})" in record["report"]
        land = record["land"]
        assert land["step"] == "interval" and land["status"] == "ok", land
        assert (land["start"], land["end"]) == (start.isoformat(), end.isoformat())
        repeats = int(REPEATED["event_id"] in in_slot(i))
        counts = (land["read"], land["landed"], land["duplicates"], land["quarantined"])
        read, inserted = len(in_slot(i)) + repeats, len(in_slot(i)) if i in deleted else 0
        assert counts == (read, inserted, read - inserted, 0), land


@pytest.mark.timeout(900)
def test_batch_runs_land_each_entry_once(af: AirflowEnv, batches: Batches) -> None:
    (first, second), rows = batches
    land = first["land"]
    assert land["step"] == "batch" and first["params"]["mode"] == "auto"
    assert (land["batch"], land["read"], land["landed"], land["duplicates"]) == (0, 30, 30, 0)
    assert land["lag"] == len(ENTRIES) + 1 - FIRST_BATCH
    assert land["by_event_type"] == {t: 10 for t in TYPES}
    for row in ("entries landed       30", "lag left             19 entries", "by event type"):
        assert row in first["report"], first["report"]
    # the second lands the rest; the relay's repeat of an entry merges away
    land = second["land"]
    assert (land["batch"], land["read"], land["landed"], land["duplicates"]) == (1, 19, 18, 1)
    assert land["lag"] == 0
    assert "duplicates           1" in second["report"]

    assert sorted(rows) == [e["event_id"] for e in ENTRIES]
    fields = ("event_type", "doc_id", "doc_path", "principal", "event_date")
    for e in ENTRIES:
        row = rows[e["event_id"]]
        assert {k: row[k] for k in fields} == {k: e[k] for k in fields}
        assert row["event_day"] == e["event_date"].date()
    assert land["delta_version"] == table_version(af)


@pytest.mark.timeout(900)
def test_bad_params_stop_before_spark(af: AirflowEnv, rest: RestClient) -> None:
    version = table_version(af)
    # Param schemas: the API refuses to create the run, or the backfill
    for conf in ({"mode": "replay"}, {"failure_threshold": 2}, {"batch_limit": -1}):
        status, body = rest.post(
            f"/api/v2/dags/{DAG}/dagRuns", {"logical_date": None, "conf": conf}
        )
        assert status == 400 and next(iter(conf)) in json.dumps(body), (conf, status, body)
    end = slot(1)[1].isoformat()
    status, body = rest.post(
        "/api/v2/backfills",
        {"dag_id": DAG, "from_date": end, "to_date": end, "dag_run_conf": {"mode": "sometimes"}},
    )
    assert status == 422 and "param mode" in json.dumps(body), (status, body)
    # What only the job's check_args refuses: the validate task stops the run
    status, run = rest.post(
        f"/api/v2/dags/{DAG}/dagRuns",
        {
            "logical_date": None,
            "conf": {"start": slot(1)[1].isoformat(), "end": slot(1)[0].isoformat()},
        },
    )
    assert status == 200, run
    run_id = run["dag_run_id"]
    deadline = time.monotonic() + 300
    while (run := rest.get(f"/api/v2/dags/{DAG}/dagRuns/{run_id}")[1])["state"] not in (
        "success",
        "failed",
    ):
        assert time.monotonic() < deadline, run
        time.sleep(2)
    assert run["state"] == "failed"
    status, body = rest.get(f"/api/v2/dags/{DAG}/dagRuns/{run_id}/taskInstances")
    states = {t["task_id"]: t["state"] for t in body["task_instances"]}
    assert states == {"validate": "failed", "land": "upstream_failed", "summary": "upstream_failed"}
    assert table_version(af) == version, "a Spark job wrote to the table"


@pytest.mark.timeout(1800)
def test_backfills_replay_deleted_intervals(
    af: AirflowEnv, batches: Batches, rest: RestClient
) -> None:
    _, landed = batches
    delete_slots(af, 1, 2)
    assert set(table(af)) == set(landed) - in_slot(1) - in_slot(2)

    # CLI: the runs scheduled at the ends of slots 1 and 2. `completed`: rerun a slot even if it
    # had a successful run. (That a rerun leaves an intact interval as it was is the job's
    # property, tested on the shared session in test_audit_job.py, without a spark-submit.)
    done = subprocess.run(
        [
            str(VENV_BIN / "airflow"),
            *("backfill", "create", "--dag-id", DAG),
            *("--from-date", slot(1)[1].isoformat(), "--to-date", slot(2)[1].isoformat()),
            *("--reprocess-behavior", "completed", "--max-active-runs", "1"),
        ],
        env=af.env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert_replayed(af, wait_for_backfill(rest, [1, 2], timeout=900), [1, 2], {1, 2})
    assert table(af) == landed

    # REST: slot 0 alone, whose entry the relay repeated later in the log
    delete_slots(af, 0)
    status, body = rest.post(
        "/api/v2/backfills",
        {
            "dag_id": DAG,
            "from_date": slot(0)[1].isoformat(),
            "to_date": slot(0)[1].isoformat(),
            "reprocess_behavior": "completed",
            "max_active_runs": 1,
        },
    )
    assert status == 200, body
    assert_replayed(af, wait_for_backfill(rest, [0], timeout=600), [0], {0})
    assert table(af) == landed

    # Runs the scheduler made on its own meanwhile are batch runs with nothing new to land:
    # validate skips them, and the rest of the run with it, before any Spark job.
    records = run_records(af)
    for run in dag_runs(rest, "scheduled"):
        if run["state"] == "success":
            assert run["dag_run_id"] not in records, records[run["dag_run_id"]]
            run_id = urllib.parse.quote(run["dag_run_id"], safe="")
            status, body = rest.get(f"/api/v2/dags/{DAG}/dagRuns/{run_id}/taskInstances")
            assert status == 200, body
            states = {ti["task_id"]: ti["state"] for ti in body["task_instances"]}
            assert states == dict.fromkeys(("validate", "land", "summary"), "skipped"), states
