"""`streamcore bulk submit | status | abort | list | wait` through the real entry point: output,
JSON, exit codes and messages."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cli_support import Result, cli_runner

from streamcore.bulk import BulkService, BulkStatus, State
from streamcore.bulk.progress import progress, progress_line
from streamcore.config import load_config


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("STREAMCORE_OUTBOX_URL", raising=False)
    monkeypatch.setenv("USER", "tester")
    return tmp_path / "home"


@pytest.fixture
def cli(home: Path, capsys: pytest.CaptureFixture[str]) -> Callable[..., Result]:
    return cli_runner(home, capsys)


def update(home: Path, command_id: str, **fields: Any) -> BulkStatus:
    """What the job does: merge a delta into the command's status."""
    with BulkService(load_config(home=home)) as service:
        return service.update(command_id, BulkStatus(command_id=command_id, delta=True, **fields))


def submit(cli: Callable[..., Result], *argv: str) -> str:
    result = cli("bulk", "submit", *argv, "--json")
    assert result.rc == 0, result.err
    return str(result.json()["commandId"])


def test_submit_and_status(cli: Callable[..., Result], home: Path) -> None:
    result = cli(
        "bulk",
        "submit",
        "setProperties",
        "--query",
        "type = 'Note'",
        "--params",
        '{"properties": {"dc:source": "cli"}}',
        "--bucket-size",
        "10",
        "--batch-size",
        "5",
        "--id",
        "cmd-1",
    )
    assert result.rc == 0, result.err
    lines = dict(line.split(None, 1) for line in result.out.splitlines() if " " in line)
    assert lines["command"].strip() == "cmd-1"
    assert lines["state"].strip() == "SCHEDULED"
    assert lines["username"].strip() == "tester"
    assert lines["progress"].strip() == "0/?"
    with BulkService(load_config(home=home)) as service:
        command = service.command("cmd-1")
    assert (command.bucket_size, command.batch_size, command.username) == (10, 5, "tester")
    assert (home / "outbox.db").is_file()

    update(home, "cmd-1", state=State.RUNNING, total=200, processing_start_ms=1)
    shown = cli("bulk", "status", "cmd-1")
    assert shown.rc == 0
    assert "state             RUNNING" in shown.out
    assert "progress          0/200, 0%, 0.0 docs/s" in shown.out
    assert "processing start  1970-01-01T00:00:00.001Z" in shown.out
    document = cli("bulk", "status", "cmd-1", "--json").json()
    assert document["commandId"] == "cmd-1" and document["state"] == "RUNNING"
    assert document["processing_start_time"] == "1970-01-01T00:00:00.001Z"
    assert document["progress"]["total"] == 200 and document["progress"]["percent"] == 0


def test_progress_rate_and_eta() -> None:
    status = BulkStatus(
        command_id="c",
        state=State.RUNNING,
        total=1000,
        processed=200,
        skipped=50,
        processing_start_ms=10_000,
    )
    assert progress(status, now=20_000) == {
        "processed": 200,
        "skipped": 50,
        "total": 1000,
        "percent": 25.0,
        "rate_per_s": 20.0,
        "eta_ms": 37_500,
    }
    done = BulkStatus(
        command_id="c",
        state=State.COMPLETED,
        total=10,
        processed=10,
        processing_start_ms=0,
        processing_end_ms=2000,
    )
    assert progress(done)["rate_per_s"] == 5.0 and progress(done)["eta_ms"] is None
    assert progress_line(done) == "10/10, 100%, 5.0 docs/s"


def test_list_abort_and_filters(cli: Callable[..., Result]) -> None:
    first = submit(cli, "trash", "--query", "isTrashed = false", "--username", "ann")
    second = submit(cli, "untrash", "--query", "isTrashed")
    aborted = cli("bulk", "abort", first, "--json")
    assert aborted.rc == 0 and aborted.json()["state"] == "ABORTED"
    assert aborted.json()["completed_time"] is not None

    listed = cli("bulk", "list")
    assert listed.rc == 0
    rows = listed.out.splitlines()
    assert rows[0].split() == ["command", "action", "username", "state", "progress", "submitted"]
    assert [row.split()[0] for row in rows[2:]] == [second, first]
    assert (
        cli("bulk", "list", "--state", "ABORTED", "--json").json()["commands"][0]["commandId"]
        == first
    )
    assert [
        c["commandId"]
        for c in cli("bulk", "list", "--action", "untrash", "--json").json()["commands"]
    ] == [second]
    assert cli("bulk", "list", "--action", "delete").out == "no bulk commands\n"


def test_wait_exit_codes(cli: Callable[..., Result], home: Path) -> None:
    running = submit(cli, "trash", "--query", "true")
    timed_out = cli("bulk", "wait", running, "--timeout", "0.2")
    assert timed_out.rc == 1
    assert f"command {running} not finished after 0.2 s" in timed_out.err

    update(home, running, state=State.RUNNING, total=1)
    update(home, running, processed=1)
    completed = cli("bulk", "wait", running, "--json")
    assert completed.rc == 0 and completed.json()["state"] == "COMPLETED"

    aborted = submit(cli, "trash", "--query", "true")
    assert cli("bulk", "abort", aborted).rc == 0
    assert cli("bulk", "wait", aborted).rc == 1


def test_errors_and_exit_codes(cli: Callable[..., Result], home: Path) -> None:
    bad_query = cli("bulk", "submit", "trash", "--query", "tittle = 1")
    assert bad_query.rc == 2
    assert "unknown column 'tittle' (did you mean title?)" in bad_query.err
    bad_json = cli("bulk", "submit", "trash", "--query", "true", "--params", "{nope")
    assert bad_json.rc == 2 and "--params is not JSON" in bad_json.err
    bad_params = cli("bulk", "submit", "trash", "--query", "true", "--params", '{"x": 1}')
    assert bad_params.rc == 2 and "action trash: params" in bad_params.err
    unknown = cli("bulk", "submit", "archive", "--query", "true")
    assert unknown.rc == 2 and "known actions: csvExport" in unknown.err
    sizes = cli(
        "bulk", "submit", "trash", "--query", "true", "--bucket-size", "1", "--batch-size", "2"
    )
    assert sizes.rc == 2 and "bucket size >= batch size" in sizes.err
    missing = cli("bulk", "status", "nope")
    assert missing.rc == 2 and "no bulk command 'nope'" in missing.err

    for argv in (
        ("submit", "trash", "--query", "true", "--id", "../../outside"),
        ("status", "/tmp/outside"),
        ("abort", "a/b"),
        ("wait", ".."),
    ):
        bad_id = cli("bulk", *argv)
        assert bad_id.rc == 2 and "a command id is a UUID or a slug" in bad_id.err, argv
    assert not (home.parent / "outside").exists()

    done = submit(cli, "trash", "--query", "true")
    update(home, done, state=State.COMPLETED, total=0)
    refused = cli("bulk", "abort", done)
    assert refused.rc == 1
    assert "a completed command cannot be aborted" in refused.err


def test_console_script(home: Path) -> None:
    script = Path(sys.executable).with_name("streamcore")
    ran = subprocess.run(
        [str(script), "--home", str(home), "bulk", "list", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout) == {"commands": []}


def test_submit_wait_follows_the_command_to_its_end(cli: Callable[..., Result], home: Path) -> None:
    """`submit --wait`: a progress line on stderr at each change, then the final status; exit 0
    on COMPLETED, 1 on ABORTED, 1 with the reason when --timeout passes first. The job is
    played by a thread that makes the job's store updates as it does."""

    def run_job_when_submitted(abort: bool = False) -> threading.Thread:
        def play() -> None:
            with BulkService(load_config(home=home)) as service:
                deadline = time.monotonic() + 60
                while not service.list(state=State.SCHEDULED):
                    if time.monotonic() > deadline:
                        return  # the CLI submitted nothing: its assertions fail
                    time.sleep(0.05)
                (waiting,) = service.list(state=State.SCHEDULED)
                cid = waiting.command_id
                if abort:
                    service.abort(cid)
                    return
                service.update(
                    cid,
                    BulkStatus(
                        command_id=cid,
                        delta=True,
                        state=State.RUNNING,
                        total=4,
                        processing_start_ms=1,
                    ),
                )
                service.update(cid, BulkStatus(command_id=cid, delta=True, processed=2), bucket=0)
                service.update(cid, BulkStatus(command_id=cid, delta=True, processed=2), bucket=1)

        worker = threading.Thread(target=play)
        worker.start()
        return worker

    worker = run_job_when_submitted()
    done = cli("bulk", "submit", "trash", "--query", "true", "--wait", "--timeout", "60")
    worker.join()
    assert done.rc == 0, done.err
    assert "state             COMPLETED" in done.out
    lines = done.err.splitlines()
    assert lines[0].startswith("SCHEDULED: waiting for the dispatcher"), lines
    assert "streamcore_bulk_dispatch" in lines[0]
    assert lines[-1].startswith("COMPLETED 4/4, 100%"), lines

    worker = run_job_when_submitted(abort=True)
    aborted = cli("bulk", "submit", "trash", "--query", "true", "--wait", "--json")
    worker.join()
    assert aborted.rc == 1 and aborted.json()["state"] == "ABORTED"

    late = cli("bulk", "submit", "trash", "--query", "true", "--wait", "--timeout", "0.3")
    assert late.rc == 1
    assert "not finished after 0.3 s" in late.err and "state             SCHEDULED" in late.out
