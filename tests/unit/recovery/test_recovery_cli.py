"""`streamcore recovery` on the local log of a home: dead letters written by a real processor,
listed as a table and as JSON, redriven with a dry run first; a skip and a reset refused with
exit 2 on bad input; the outbox commands."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from cli_support import Result, cli_runner

from streamcore.codecs import get_codec
from streamcore.computation import (
    Computation,
    ComputationPolicy,
    Settings,
    StreamProcessor,
    Topology,
)
from streamcore.config import load_config
from streamcore.log import LocalLogManager, LogPartition, open_log_manager
from streamcore.record import Record

CODEC = get_codec("avro")


class Parse(Computation):
    def __init__(self) -> None:
        super().__init__("parse", 1, 1)

    def process_record(self, context, input_stream, record) -> None:
        if record.data == b"bad":
            raise ValueError(f"cannot parse {record.key}")
        context.produce_record("o1", record)
        context.ask_for_checkpoint()


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("STREAMCORE_OUTBOX_URL", raising=False)
    monkeypatch.setenv("USER", "tester")
    home = tmp_path / "home"
    with open_log_manager(load_config(home=home)) as manager:
        manager.create("app/in", 1)
        with manager.appender("app/in", CODEC) as appender:
            appender.append_batch([(k, Record(k, d, 1)) for k, d in [("k0", b"a"), ("k1", b"bad")]])
        topology = Topology.builder().add_computation(Parse, ["i1:app/in", "o1:app/out"]).build()
        policy = ComputationPolicy(max_retries=0, dlq="app/dlq-parse", delay=0.001)
        settings = Settings(drain_quiet=0.3).set_policy("parse", policy)
        assert StreamProcessor(manager, topology, settings).start().drain_and_stop(60)
    return home


@pytest.fixture
def cli(home: Path, capsys: pytest.CaptureFixture[str]) -> Callable[..., Result]:
    return cli_runner(home, capsys)


def test_list_and_redrive(cli: Callable[..., Result], home: Path) -> None:
    listed = cli("recovery", "list", "--codec", "avro")
    assert listed.rc == 0, listed.err
    assert not (home / "outbox.db").exists()  # listing opens no database
    assert "app/dlq-parse" in listed.out and "cannot parse k1" in listed.out
    assert "ValueError" in listed.out and "1 dead letter(s)" in listed.out
    document = cli("recovery", "list", "--codec", "avro", "--json").json()
    assert document["error_counts"] == {"ValueError": 1}
    assert document["dead_letters"][0]["source_offset"] == 1
    refused = cli("recovery", "redrive", "--codec", "avro", "--reason", "x")
    assert refused.rc == 2 and "choose what to redrive" in refused.err
    dry = cli("recovery", "redrive", "--codec", "avro", "--all", "--dry-run")
    assert dry.rc == 0 and "dry run, nothing changed" in dry.out and "redriven 1" in dry.out
    done = cli("recovery", "redrive", "--codec", "avro", "--all", "--reason", "fixed", "--json")
    assert done.rc == 0 and done.json()["summary"]["redriven"] == 1
    assert done.json()["audit_event_id"]
    again = cli("recovery", "redrive", "--codec", "avro", "--all", "--reason", "fixed", "--json")
    assert again.json()["summary"]["already"] == 1


def test_positions_refuse_bad_input_with_exit_2(cli: Callable[..., Result]) -> None:
    bad = [
        (("skip", "-l", "app/in", "-g", "parse", "--offset", "0:9"), "holds offsets 0..1, not 9"),
        (("skip", "-l", "app/in", "-g", "nobody", "--offset", "0:1"), "group 'nobody' has no"),
        (("reset", "-l", "app/in", "-g", "parse", "--to-offset", "0:5"), "ends at 2"),
        (("reset", "-l", "app/in", "-g", "parse", "--to-offset", "nope"), "PARTITION:OFFSET"),
    ]
    for argv, message in bad:
        result = cli("recovery", *argv, "--reason", "x", "--codec", "avro")
        assert (result.rc, message in result.err) == (2, True), (argv, result.err)
    preview = cli(
        "recovery", "reset", "-l", "app/in", "-g", "parse", "--to-offset", "0:0", "--dry-run"
    )
    assert preview.rc == 0 and "reread" in preview.out and "dry run" in preview.out
    start = cli("recovery", "reset", "-l", "app/in", "-g", "parse", "--to-start", "--dry-run")
    assert start.rc == 0 and "reset to-start" in start.out
    moved = cli("recovery", "reset", "-l", "app/in", "-g", "parse", "--to-end", "--reason", "skip")
    assert moved.rc == 0 and "moved" in moved.out and "audit event" in moved.out


def test_position_moves_refuse_a_date_before_purged_records(
    cli: Callable[..., Result], home: Path
) -> None:
    """`streamcore position` and `streamcore recovery reset` make the same move (plan_reset):
    both refuse a date whose first record retention may have purged, naming the backfill."""
    from datetime import UTC, datetime

    from recovery_support import T0, purged_stream

    with LocalLogManager(home / "log", config=load_config(home=home)) as manager:
        purged_stream(manager, "local", "app/old")
        manager.commit_position(LogPartition.of("app/old", 0), "replay", 10)
    before = datetime.fromtimestamp(T0 / 1000, UTC).isoformat()
    for argv in (
        ("position", "-l", "app/old", "-g", "replay", "--after-date", before),
        ("recovery", "reset", "-l", "app/old", "-g", "replay", "--to-date", before,
         "--reason", "replay"),
        ("recovery", "reset", "-l", "app/old", "-g", "replay", "--to-watermark", "100",
         "--dry-run", "--codec", "avro"),
    ):  # fmt: skip
        refused = cli(*argv)
        assert refused.rc == 2, (argv, refused.out, refused.err)
        assert "purged" in refused.err and "backfill" in refused.err, refused.err
    with LocalLogManager(home / "log", config=load_config(home=home)) as manager:
        assert manager.committed("app/old", "replay") == [10]
    assert cli("position", "-l", "app/old", "-g", "replay", "--to-start").rc == 0


def test_dry_runs_on_a_fresh_home_write_nothing(cli: Callable[..., Result], home: Path) -> None:
    """A fresh home (logs and dead letters, no outbox database yet): every dry run, and the
    in-process engine of jobs/recovery.py that the DAG runs, leaves it without a new file."""
    from jobs import recovery as job
    from jobs.spark.job import execute_job

    def files() -> set[Path]:
        return {p.relative_to(home) for p in home.rglob("*") if p.is_file()}

    before = files()
    assert not (home / "outbox.db").exists()
    reset = ("recovery", "reset", "-l", "app/in", "-g", "parse", "--dry-run")
    for argv in (
        ("recovery", "redrive", "--all", "--dry-run", "--codec", "avro"),
        ("recovery", "redrive", "--offsets", "0:0", "-l", "app/dlq-parse", "--dry-run"),
        (*reset, "--to-start"),
        (*reset, "--to-watermark", "1", "--codec", "avro"),
        ("recovery", "skip", "-l", "app/in", "-g", "parse", "--offset", "0:1", "--dry-run"),
        ("recovery", "outbox", "retry", "audit/entries", "--dry-run"),
        ("recovery", "outbox", "purge", "--older-than", "0", "--dry-run"),
        ("recovery", "outbox", "errors", "audit/entries"),
    ):
        result = cli(*argv)
        assert result.rc in (0, 2), (argv, result.err)
        assert files() == before, (argv, files() - before)
    summary, code = execute_job(
        job,
        ["--action", "redrive", "--all", "--dry-run", "--engine", "process", "--home", str(home)],
    )
    assert (code, summary["redriven"]) == (0, 1), summary
    assert files() == before, files() - before


def test_outbox_commands(cli: Callable[..., Result]) -> None:
    errors = cli("recovery", "outbox", "errors", "mail")
    assert errors.rc == 0 and "0 job(s) in error in mail" in errors.out
    retry = cli("recovery", "outbox", "retry", "mail", "--reason", "x", "--json")
    assert retry.rc == 0 and retry.json()["summary"]["retried"] == 0
    purge = cli("recovery", "outbox", "purge", "--older-than", "-1", "--reason", "x")
    assert purge.rc == 2 and "seconds >= 0" in purge.err
