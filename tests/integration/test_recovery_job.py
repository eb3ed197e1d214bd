"""jobs/recovery.py on the shared Spark session, on the local log and on the real Kafka broker:
the Spark listing equals the in-process one (summary and Parquet listing), a dry run changes
nothing, a redrive sends each dead letter back once (key, data, watermark, flags and trace context
restored; an undecodable record as its raw bytes; foreign records never), the ledger is shared
with the in-process engine, bad selections are refused before anything changes, and a job killed
between its append and its ledger update (spark-submit, fault point) is completed, not repeated,
by the next run."""

from __future__ import annotations

import contextlib
import io
import json
import os
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa
from kafka_broker import scratch_prefix
from recovery_support import DLQ, SOURCE, source_records, write_dead_letters
from spark_session import spark_submit

from streamcore.audit import QUEUE as AUDIT_QUEUE
from streamcore.audit import decode_entry
from streamcore.codecs import get_codec
from streamcore.config import load_config
from streamcore.outbox.schema import jobs
from streamcore.recovery import Recovery

pytestmark = [pytest.mark.spark, pytest.mark.timeout(1200)]

CODEC = get_codec("avro")


def _run(*args: str) -> tuple[int, dict[str, Any]]:
    from jobs import recovery

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = recovery.main(list(args))
    return code, json.loads(out.getvalue().strip().splitlines()[-1])


def _audit_comments() -> list[tuple[str, str]]:
    with Recovery(load_config()) as recovery, recovery.outbox.engine.connect() as conn:
        query = sa.select(jobs.c.payload).where(jobs.c.queue == AUDIT_QUEUE)
        rows = conn.execute(query).all()
    entries = [decode_entry(CODEC.decode(bytes(r.payload)).data) for r in rows]
    return [(e.event_type, e.comment) for e in entries]


def _same_foreign(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`rows` with the reason of each foreign record checked, then replaced by "foreign"."""
    for row in rows:
        if row.get("foreign") is not None:
            assert "not a streamcore dead-letter record" in row["foreign"], row
    return [{**r, "foreign": "foreign"} if r.get("foreign") else r for r in rows]


@pytest.fixture(params=["local", "kafka"])
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "kafka":
        monkeypatch.setenv("STREAMCORE_LOG_BACKEND", "kafka")
        bootstrap = request.getfixturevalue("kafka_bootstrap")
        monkeypatch.setenv("STREAMCORE_KAFKA_BOOTSTRAP_SERVERS", bootstrap)
        monkeypatch.setenv("STREAMCORE_KAFKA_TOPIC_PREFIX", scratch_prefix())
    return request.param


def test_list_and_redrive_with_spark(spark, backend: str, tmp_path: Path) -> None:
    write_dead_letters(load_config())

    # The listing: Spark and the in-process engine agree, summary and Parquet rows.
    listed = {}
    for engine in ("spark", "process"):
        out = tmp_path / f"listing-{engine}"
        code, summary = _run("--action", "list", "--engine", engine, "--output", str(out))
        assert code == 0, summary
        listed[engine] = summary, pq.read_table(out).sort_by([("partition", "ascending")])
    summary, table = listed["spark"]
    assert summary["selected"] == 8
    assert summary["by_error"] == [
        {"error_type": "ValueError", "records": 4},
        {"error_type": "TimeoutError", "records": 2},
        {"error_type": "(not a dead letter)", "records": 1},
        {"error_type": "KeyError", "records": 1},
    ]
    assert {(r["computation"], r["records"]) for r in summary["by_stream"]} == {
        ("parse", 5),
        ("enrich", 2),
        (None, 1),
    }
    in_process, process_table = listed["process"]
    for key in ("selected", "by_error", "by_stream"):
        assert summary[key] == in_process[key], key
    # Only the wording of why a record is foreign differs: Python's parser explains more.
    assert _same_foreign(summary["sample"]) == _same_foreign(in_process["sample"])
    key_order = [("partition", "ascending"), ("offset", "ascending")]
    assert _same_foreign(table.sort_by(key_order).to_pylist()) == _same_foreign(
        process_table.sort_by(key_order).to_pylist()
    )
    foreign = [r for r in summary["sample"] if "foreign" in r]
    assert [r["dlq"] for r in foreign] == [DLQ] and "not a streamcore" in foreign[0]["foreign"]

    code, timeouts = _run("--action", "list", "--error", "TimeoutError")
    assert code == 0 and timeouts["selected"] == 2
    assert {r["key"] for r in timeouts["sample"]} == {"k4", "k5"}

    # Bad selections: refused before anything is read or changed.
    code, bad = _run("--action", "redrive", "--stream", "app/nope", "--all", "--reason", "r")
    assert code == 1 and "dlq-" in bad["error"]
    code, bad = _run("--action", "redrive", "--stream", DLQ, "--offsets", "0:999", "--reason", "r")
    assert code == 1 and "not 999" in bad["error"]
    code, bad = _run("--action", "redrive", "--all", "--to", "app/missing", "--reason", "r")
    assert code == 1 and "does not exist" in bad["error"]
    assert source_records(load_config()) == ([], [])

    code, dry = _run("--action", "redrive", "--all", "--dry-run")
    assert code == 0, dry
    assert (dry["redriven"], dry["foreign"], dry["audit_event_id"]) == (7, 1, None)
    assert source_records(load_config()) == ([], [])

    # One through the in-process engine first: the ledger is shared.
    with Recovery(load_config()) as recovery:
        k0 = next(e for e in recovery.dead_letters() if e.letter and e.letter.record.key == "k0")
    one = f"{k0.partition}:{k0.offset}"
    code, first = _run(
        "--action", "redrive", "--engine", "process", "--stream", DLQ, "--offsets", one,
        "--reason", "k0 first",
    )  # fmt: skip
    assert code == 0 and first["redriven"] == 1, first

    code, done = _run("--action", "redrive", "--error", "ValueError", "--reason", "parser fixed")
    assert code == 0, done
    assert (done["redriven"], done["already"], done["targets"]) == (3, 1, {SOURCE: 3})
    code, rest = _run("--action", "redrive", "--all", "--reason", "the rest")
    assert code == 0, rest
    assert (rest["selected"], rest["redriven"], rest["already"], rest["foreign"]) == (7, 3, 4, 1)
    code, again = _run("--action", "redrive", "--all", "--reason", "once more")
    assert code == 0 and (again["redriven"], again["audit_event_id"]) == (0, None)

    decoded, raw = source_records(load_config())
    assert len(raw) == 7
    assert sorted((r.key, r.data, r.watermark, r.flags, r.trace_context) for r in decoded) == [
        (f"k{n}", f"v{n}".encode(), 100 + n, 1, b"t-5" if n == 5 else None) for n in range(6)
    ]
    assert b"\xff\xferaw" in raw  # the undecodable one, as the bytes it was
    assert _audit_comments() == [
        ("recoveryRedrive", "k0 first"),
        ("recoveryRedrive", "parser fixed"),
        ("recoveryRedrive", "the rest"),
    ]


def test_a_job_killed_before_its_ledger_update_is_completed_not_repeated(
    spark, tmp_path: Path
) -> None:
    write_dead_letters(load_config())
    home = Path(os.environ["STREAMCORE_HOME"])
    code, summary, stderr = spark_submit(
        "recovery", "--action", "redrive", "--all", "--reason", "crash",
        home=home, env={"STREAMCORE_FAULT": "recovery.before_ledger_done"},
    )  # fmt: skip
    assert code in (-9, 137) and summary is None, stderr[-4000:]  # 137: the shell's SIGKILL
    assert len(source_records(load_config())[1]) == 7  # appended, but the ledger still says pending

    code, resumed = _run("--action", "redrive", "--all", "--reason", "after the crash")
    assert code == 0, resumed
    assert (resumed["completed"], resumed["redriven"], resumed["already"]) == (7, 0, 0)
    assert len(source_records(load_config())[1]) == 7
    assert _audit_comments() == [("recoveryRedrive", "after the crash")]


@pytest.mark.airflow
def test_the_recovery_dag_refuses_a_reset_into_purged_records(tmp_path: Path) -> None:
    """The DAG's validate (`plan`) previews a reset through the same plan as the commands: a date
    or watermark whose first record retention may have purged is refused there, before anything
    moves, naming the backfill."""
    import subprocess
    import sys
    import textwrap
    from datetime import UTC, datetime

    from recovery_support import T0, purged_stream

    from streamcore.log import LocalLogManager, LogPartition

    home = Path(os.environ["STREAMCORE_HOME"])
    with LocalLogManager(home / "log", config=load_config(home=home)) as manager:
        purged_stream(manager, "local", "app/old")
        manager.commit_position(LogPartition.of("app/old", 0), "replay", 10)
    before = datetime.fromtimestamp(T0 / 1000, UTC).isoformat()
    root = Path(__file__).resolve().parents[2]
    code = f"""
        import json, sys
        sys.path.insert(0, {str(root / "dags")!r})
        import streamcore_recovery as m
        from airflow.sdk.exceptions import AirflowFailException
        defaults = {{k: p.value for k, p in m.PARAMS.items()}}
        reset = {{"action": "reset", "stream": "app/old", "group": "replay"}}
        out = {{}}
        for kind, value in (("date", {before!r}), ("watermark", "100"), ("start", None)):
            params = {{**defaults, **reset, "reset_to": kind, "reset_value": value}}
            try:
                out[kind] = m.plan(params, "manual__r1", "ops")["preview"]["rows"]
            except AirflowFailException as exc:
                out[kind] = str(exc)
        print(json.dumps(out))
    """
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path / "airflow")}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    for kind in ("date", "watermark"):
        assert isinstance(out[kind], str), f"reset_to {kind} was accepted: {out[kind]}"
        assert "purged" in out[kind] and "backfill" in out[kind], out[kind]
    assert out["start"][0]["after"] == 5  # the start skips the purged records knowingly
    with LocalLogManager(home / "log", config=load_config(home=home)) as manager:
        assert manager.committed("app/old", "replay") == [10]
