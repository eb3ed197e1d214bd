"""jobs/bulk_action.py end to end on the shared Spark session: commands submitted through
`BulkService` (SQLite command store, local logs), run by the job in process (or as a script
for the crash), the table read back with delta-rs. Each built-in action once; a query matching
nothing; the query limit; a SIGKILL after a bucket then a rerun (each bucket counted once); a
running command's progress in `streamcore bulk status` and in the log, then an abort during the
run (later buckets untouched) and one before it; a rerun of a finished command; the README's
action as written."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import logging
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from repository_support import document_id as _id
from repository_support import document_row as _row
from repository_support import write_repository
from spark_session import ROOT, read_delta

from streamcore.bulk import (
    BulkAction,
    BulkParamsError,
    BulkService,
    ExclusiveActionError,
    State,
    decode_status,
)
from streamcore.codecs import get_codec
from streamcore.config import load_config
from streamcore.log import open_log_manager

pytestmark = pytest.mark.spark

DOCS = 20  # ids 0..19 in id order; odd ones are Notes


@pytest.fixture
def repository(spark: Any) -> Path:
    from jobs.spark.delta.catalog import Catalog

    rows = [_row(i) for i in range(DOCS)]
    rows[1]["title"] = 'doc 1, "quoted"'  # CSV quoting
    return Path(write_repository(spark, Catalog(spark, load_config()), rows))


def _rows(path: Path) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in read_delta(path).to_pylist()}


def _submit(action: str, query: str, params: dict | None = None, **sizes: Any) -> str:
    with BulkService() as service:
        return service.submit(action, query, params, username="tester", **sizes).command_id


def _status(command_id: str) -> Any:
    with BulkService() as service:
        return service.status(command_id)


def _job(command_id: str) -> tuple[int, dict[str, Any]]:
    from jobs import bulk_action

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = bulk_action.main(["--command-id", command_id])
    return code, json.loads(out.getvalue().strip().splitlines()[-1])


def _notes() -> set[str]:
    return {_id(i) for i in range(DOCS) if i % 2}


def test_set_properties_then_a_rerun_does_nothing(spark: Any, repository: Path) -> None:
    command = _submit(
        "setProperties",
        "type = 'Note'",
        {"properties": {"reviewed": "yes", "k": None}},
        bucket_size=4,
        batch_size=2,
    )
    code, summary = _job(command)
    assert code == 0, summary
    assert (summary["state"], summary["total"], summary["processed"]) == ("COMPLETED", 10, 10)
    rows = _rows(repository)
    for doc_id, row in rows.items():
        expected = [("reviewed", "yes")] if doc_id in _notes() else [("k", "v")]
        assert sorted(row["properties"]) == expected, row
    status = _status(command)
    assert status.state is State.COMPLETED and status.processed == 10
    assert status.scroll_start_ms <= status.scroll_end_ms <= status.completed_ms
    recorded = read_delta(Path(os.environ["STREAMCORE_HOME"]) / "delta" / "bulk_status")
    assert [(r["command_id"], r["state"]) for r in recorded.to_pylist()] == [(command, "COMPLETED")]
    codec = get_codec("avro")
    with open_log_manager(load_config()) as logs, logs.tailer("test/done", "bulk/done") as tailer:
        done = [
            decode_status(codec.decode(r.message).data)
            for r in iter(lambda: tailer.read(1.0), None)
        ]
    assert [(s.command_id, s.state) for s in done] == [(command, State.COMPLETED)]

    code, again = _job(command)
    assert code == 0 and again["note"] == "already finished: nothing to do", again
    assert _rows(repository) == rows


def test_trash_untrash_system_properties_and_delete(spark: Any, repository: Path) -> None:
    assert _job(_submit("trash", "type = 'Note'"))[1]["processed"] == 10
    assert {i for i, r in _rows(repository).items() if r["isTrashed"]} == _notes()
    assert _job(_submit("untrash", "isTrashed"))[1]["processed"] == 10
    assert not any(r["isTrashed"] for r in _rows(repository).values())
    command = _submit("setSystemProperties", "title = 'doc 2'", {"lifecycleState": "approved"})
    assert _job(command)[1]["processed"] == 1
    assert {i for i, r in _rows(repository).items() if r["lifecycleState"]} == {_id(2)}
    code, deleted = _job(_submit("delete", "type = 'File' AND lifecycleState IS NULL"))
    assert code == 0 and deleted["processed"] == 9, deleted
    assert set(_rows(repository)) == _notes() | {_id(2)}


def test_csv_export_is_one_sorted_zipped_file(spark: Any, repository: Path) -> None:
    command = _submit(
        "csvExport", "type = 'Note'", {"columns": ["id", "title", "properties"]}, bucket_size=3
    )
    code, summary = _job(command)
    assert code == 0 and summary["state"] == "COMPLETED", summary
    path = Path(summary["result"]["url"])
    assert path == Path(_status(command).result["url"]) and path.suffix == ".zip"
    with zipfile.ZipFile(path) as archive:
        (name,) = archive.namelist()
        text = archive.read(name).decode("utf-8")
    rows = list(csv.reader(io.StringIO(text, newline="")))
    assert rows[0] == ["id", "title", "properties"]
    assert [r[0] for r in rows[1:]] == sorted(_notes())
    assert rows[1][1] == 'doc 1, "quoted"' and json.loads(rows[1][2]) == {"k": "v"}


def test_nothing_matched_and_the_query_limit(spark: Any, repository: Path) -> None:
    code, none = _job(_submit("trash", "title = 'no such title'"))
    assert code == 0 and (none["state"], none["total"]) == ("COMPLETED", 0), none
    limit = _submit("trash", "type = 'Note'", query_limit=3)
    code, limited = _job(limit)
    assert code == 0 and limited["query_limit_reached"], limited
    recorded = read_delta(Path(os.environ["STREAMCORE_HOME"]) / "delta" / "bulk_status")
    assert {r["command_id"]: r["query_limit_reached"] for r in recorded.to_pylist()}[limit]
    assert (limited["state"], limited["total"], limited["processed"]) == ("COMPLETED", 3, 3)
    assert {i for i, r in _rows(repository).items() if r["isTrashed"]} == set(sorted(_notes())[:3])


def _crash_after_first_bucket(command: str) -> None:
    crashed = subprocess.run(
        [sys.executable, str(ROOT / "jobs" / "bulk_action.py"), "--command-id", command],
        env={**os.environ, "STREAMCORE_FAULT": "bulk.after_bucket"},
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert crashed.returncode == -9, crashed.stdout + crashed.stderr[-3000:]


def test_a_crash_after_a_bucket_then_a_rerun_counts_each_bucket_once(
    spark: Any, repository: Path
) -> None:
    command = _submit("trash", "type = 'Note'", bucket_size=4)
    _crash_after_first_bucket(command)
    status = _status(command)
    assert (status.state, status.total, status.processed) == (State.RUNNING, 10, 4)
    code, summary = _job(command)
    assert code == 0, summary
    assert (summary["state"], summary["processed"]) == ("COMPLETED", 10)
    assert {i for i, r in _rows(repository).items() if r["isTrashed"]} == _notes()


def test_a_command_id_that_leaves_the_home_is_refused(
    spark: Any, repository: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A stored id with `..` (written to the command store by an older version, or by hand):
    the job refuses it before anything is written, in place of putting its scroll outside
    STREAMCORE_HOME."""
    import sqlalchemy as sa

    from streamcore.bulk.store import commands

    home = Path(os.environ["STREAMCORE_HOME"])
    good = _submit("trash", "type = 'Note'")
    bad = "../../escaped"
    with BulkService() as service:
        with service.engine.connect() as conn:
            stored = conn.execute(sa.select(commands).where(commands.c.id == good)).one()
        row = dict(stored._mapping)
        row["id"] = bad
        row["command"] = json.dumps({**json.loads(row["command"]), "id": bad})
        row["status"] = json.dumps({**json.loads(row["status"]), "commandId": bad})
        with service.engine.begin() as conn:
            conn.execute(commands.insert().values(**row))
            conn.execute(sa.delete(commands).where(commands.c.id == good))
    with pytest.raises(SystemExit) as refused:
        _job(bad)
    assert refused.value.code == 2
    assert "a command id is a UUID or a slug" in capsys.readouterr().err
    assert not (home / "bulk" / bad).resolve().exists()
    # Past the argument check (a job of another version), reading the command refuses it too.
    with BulkService() as service, pytest.raises(BulkParamsError, match="a command id is"):
        service.store.command(bad)
    assert not any(r["isTrashed"] for r in _rows(repository).values())


class AbortingTrash(BulkAction):
    """Trash, and in the second bucket (the first one done) look at the running command as a
    person would, with `streamcore bulk status` in a shell, then abort it: a custom action
    (registered through `[bulk] actions` in the configuration)."""

    name = "abortingTrash"
    params_schema = {"type": "object", "additionalProperties": False}
    calls = 0
    shown = ""

    def apply(self, docs: Any, params: dict[str, Any], F: Any) -> Any:
        AbortingTrash.calls += 1
        if AbortingTrash.calls == 2:
            with BulkService() as service:
                (running,) = service.list(state=State.RUNNING)
                cli = ["streamcore.cli.main", "bulk", "status", running.command_id]
                # The CLI loads the configured actions too: this module must import there.
                here = Path(__file__).resolve().parent
                path = os.pathsep.join(map(str, (here, here.parent, ROOT)))
                status = subprocess.run(
                    [sys.executable, "-m", *cli],
                    env={**os.environ, "PYTHONPATH": path},
                    capture_output=True,
                    text=True,
                    timeout=120,
                    cwd=ROOT,
                )
                AbortingTrash.shown = status.stdout + status.stderr
                service.abort(running.command_id)
        return docs.select("id", F.lit(True).alias("isTrashed"))


def test_a_running_command_shows_progress_and_an_abort_stops_it_before_the_next_bucket(
    spark: Any,
    repository: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = tmp_path / "streamcore.toml"
    config.write_text(
        (ROOT / "include" / "streamcore.toml").read_text()
        + '\n[bulk]\nactions = ["test_bulk_action_job:AbortingTrash"]\n'
    )
    monkeypatch.setenv("STREAMCORE_CONFIG", str(config))
    caplog.set_level(logging.INFO, logger="jobs")
    command = _submit("abortingTrash", "type = 'Note'", bucket_size=4)
    code, summary = _job(command)
    assert code == 0 and summary["state"] == "ABORTED" and summary["aborted"], summary
    # During the second bucket the CLI showed the first one's progress, with rate and time left.
    assert "state             RUNNING" in AbortingTrash.shown, AbortingTrash.shown
    progress = re.search(r"progress +4/10, 40%, [\d,.]+ docs/s, ETA \S+", AbortingTrash.shown)
    assert progress, AbortingTrash.shown
    # The task log has the same line after each bucket.
    logged = [r.getMessage() for r in caplog.records if r.name == "jobs.bulk_action"]
    assert any(re.match(r"abortingTrash bucket 1/3: 4/10, 40%, .* docs/s, ETA", m) for m in logged)
    trashed = {i for i, r in _rows(repository).items() if r["isTrashed"]}
    assert trashed == set(sorted(_notes())[:8])  # the first two buckets; the third untouched
    assert _status(command).processed == 8

    # A command aborted before its job ran: the job does nothing but record it.
    early = _submit("trash", "type = 'File'")
    with BulkService() as service:
        service.abort(early)
    code, summary = _job(early)
    assert code == 0 and summary["state"] == "ABORTED", summary
    assert {i for i, r in _rows(repository).items() if r["isTrashed"]} == trashed
    recorded = read_delta(Path(os.environ["STREAMCORE_HOME"]) / "delta" / "bulk_status")
    states = {r["command_id"]: r["state"] for r in recorded.to_pylist()}
    assert states == {command: "ABORTED", early: "ABORTED"}


class ExclusiveTrash(BulkAction):
    """An exclusive trash that, while its job writes the first bucket, is aborted, and another
    exclusive command is submitted on the same repository (what `second` records)."""

    name = "exclusiveTrash"
    exclusive = True
    params_schema = {"type": "object", "additionalProperties": False}
    second: list[str] = []

    def apply(self, docs: Any, params: dict[str, Any], F: Any) -> Any:
        if not ExclusiveTrash.second:
            with BulkService() as service:
                (running,) = service.list(state=State.RUNNING)
                service.abort(running.command_id)
                try:
                    service.submit("exclusiveTrash", "true", username="other")
                    ExclusiveTrash.second.append("accepted while the bucket was being written")
                except ExclusiveActionError as exc:
                    ExclusiveTrash.second.append(str(exc))
        return docs.select("id", F.lit(True).alias("isTrashed"))


def test_an_aborted_exclusive_command_holds_its_slot_until_its_job_stops(
    spark: Any, repository: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "streamcore.toml"
    config.write_text(
        (ROOT / "include" / "streamcore.toml").read_text()
        + '\n[bulk]\nactions = ["test_bulk_action_job:ExclusiveTrash"]\n'
    )
    monkeypatch.setenv("STREAMCORE_CONFIG", str(config))
    command = _submit("exclusiveTrash", "type = 'Note'", bucket_size=4)
    code, summary = _job(command)
    assert code == 0 and summary["state"] == "ABORTED" and summary["aborted"], summary
    (refusal,) = ExclusiveTrash.second
    assert f"command {command}" in refusal and "was aborted" in refusal, refusal
    # The bucket being written when the abort came landed; the later ones are untouched.
    assert {i for i, r in _rows(repository).items() if r["isTrashed"]} == set(sorted(_notes())[:4])
    # The job acknowledged the abort when it stopped: the slot is free.
    assert _status(_submit("exclusiveTrash", "type = 'File'")).state is State.SCHEDULED


def test_the_readme_action_as_written(
    spark: Any, repository: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README's `Archive` (its Python block, as written) registered and run end to end."""
    readme = (ROOT / "README.md").read_text()
    (source,) = [b for b in re.findall(r"```python\n(.*?)```", readme, re.S) if "BulkAction" in b]
    (tmp_path / "readme_archive.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    config = tmp_path / "streamcore.toml"
    config.write_text(
        (ROOT / "include" / "streamcore.toml").read_text()
        + '\n[bulk]\nactions = ["readme_archive:Archive"]\n'
    )
    monkeypatch.setenv("STREAMCORE_CONFIG", str(config))
    command = _submit("archive", "type = 'Note'", {"folder": "/archive"})
    code, summary = _job(command)
    assert code == 0 and (summary["state"], summary["processed"]) == ("COMPLETED", 10), summary
    moved = {i for i, r in _rows(repository).items() if r["parentPath"] == "/archive"}
    assert moved == _notes()
