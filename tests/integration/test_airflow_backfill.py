"""`airflow backfill create` over 2 daily intervals of the backfill DAG, with the api-server,
scheduler and dag-processor running: each run replays its day of a week of history into another
stream with its job on a Spark Connect server, so the target holds exactly those two days, in
order, once (two, not more: two already show the order)."""

from __future__ import annotations

import json
import subprocess
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from airflow_harness import (
    VENV_BIN,
    AirflowServices,
    RestClient,
    make_airflow_env,
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


@pytest.mark.timeout(1500)
def test_backfill_create_replays_two_days(tmp_path_factory: pytest.TempPathFactory) -> None:
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
        for h in range(6 * 24):  # one record an hour over six days
            at = first + h * HOUR
            ms = int(at.timestamp() * 1000)
            record = Record(f"h{h}", at.isoformat().encode(), Watermark.of(ms).value)
            appender.append_batch([(record.key, codec.encode(record))], timestamps=[ms])
    finally:
        manager.close()
    days = [first + timedelta(days=d) for d in (1, 2)]  # replay [D, D + 1) for these

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
            for _attempt in range(3):
                done = subprocess.run(
                    command, env=af.env, capture_output=True, text=True, timeout=120
                )
                # SQLite answers "database is locked" at once, whatever the busy timeout, when two
                # connections both try to turn a read into a write (the scheduler, just unpaused,
                # creating its own run): the command wrote nothing, so it is run again.
                if done.returncode == 0 or "database is locked" not in done.stderr + done.stdout:
                    break
                time.sleep(5)
            assert done.returncode == 0, done.stdout + done.stderr
            runs = _wait_for_backfill(rest, len(days), timeout=900)
        finally:
            services.stop()
    assert [r["state"] for r in runs] == ["success"] * 2, runs
    starts = sorted(datetime.fromisoformat(r["data_interval_start"]) for r in runs)
    assert starts == days
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
