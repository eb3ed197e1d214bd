"""Recovery end to end on real backends (memory, local, Kafka for the logs; SQLite here, both
SQLite and PostgreSQL for the outbox actions): dead letters written by a real StreamProcessor,
listed, filtered and redriven once; a poison record that terminated a computation skipped, after
which a new processor goes on; resets with their preview; live-member refusal; bad input refused
before anything changes; dry runs that change nothing; audit entries written."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from recovery_support import T0, purged_stream, source_records

from streamcore.audit import QUEUE as AUDIT_QUEUE
from streamcore.audit import decode_entry
from streamcore.codecs import get_codec
from streamcore.computation import (
    Computation,
    ComputationPolicy,
    Settings,
    StreamProcessor,
    Topology,
)
from streamcore.config import load_config
from streamcore.log import LogManager, LogPartition, open_log_manager
from streamcore.log.config import TOOLS_GROUP
from streamcore.outbox.schema import jobs
from streamcore.record import Record
from streamcore.recovery import (
    DeadLetterFilter,
    LedgerBusyError,
    LiveMembersError,
    Recovery,
    RedriveLedger,
    ResetTarget,
    SelectionError,
    error_counts,
)

CODEC = get_codec("avro")
FAST = dict(delay=0.001, max_delay=0.002)
DLQ = "app/dlq-parse"


class Parse(Computation):
    """Upper-cases; data starting with b"bad" always fails; a checkpoint per record."""

    def __init__(self) -> None:
        super().__init__("parse", 1, 1)

    def process_record(self, context, input_stream, record) -> None:
        if record.data.startswith(b"bad"):
            raise ValueError(f"cannot parse {record.key}")
        context.produce_record("o1", Record(record.key, record.data.upper(), record.watermark))
        context.ask_for_checkpoint()


TOPOLOGY = Topology.builder().add_computation(Parse, ["i1:app/in", "o1:app/out"]).build()


def feed(manager: LogManager, records: list[Record]) -> None:
    if not manager.exists("app/in"):
        manager.create("app/in", 1)
    with manager.appender("app/in", CODEC) as appender:
        appender.append_batch([(r.key, r) for r in records])


def read_all(manager: LogManager, stream: str) -> list[Record]:
    with manager.tailer("test/reader", stream, CODEC) as tailer:
        out = []
        while (rec := tailer.read(1.0 if not out else 0.5)) is not None:
            out.append(rec.message)
        return out


def run_until_quiet(manager: LogManager, policy: ComputationPolicy) -> StreamProcessor:
    settings = Settings(drain_quiet=0.3).set_policy("parse", policy)
    processor = StreamProcessor(manager, TOPOLOGY, settings).start()
    processor.drain_and_stop(60)
    return processor


@pytest.fixture
def recovery(
    manager: LogManager, tmp_path: Path, clean_env: pytest.MonkeyPatch
) -> Iterator[Recovery]:
    clean_env.setenv("STREAMCORE_HOME", str(tmp_path))
    with Recovery(load_config(), manager=manager, codec="avro", principal="ops") as recovery:
        yield recovery


def audit_entries(recovery: Recovery) -> list[Any]:
    with recovery.outbox.engine.connect() as conn:
        rows = conn.execute(sa.select(jobs.c.payload).where(jobs.c.queue == AUDIT_QUEUE)).all()
    return [decode_entry(CODEC.decode(bytes(r.payload)).data) for r in rows]


# -- dead letters ---------------------------------------------------------------------------------
def test_list_filter_and_redrive_once(manager: LogManager, recovery: Recovery) -> None:
    feed(
        manager,
        [
            Record("k0", b"a", 10),
            Record("k1", b"bad1", 11),
            Record("k2", b"c", 12),
            Record("k3", b"bad3", 13),
        ],
    )
    run_until_quiet(manager, ComputationPolicy(max_retries=2, dlq=DLQ, **FAST))
    letters = recovery.dead_letters()
    assert [
        (e.dlq, e.offset, e.letter.record.key, e.letter.stream, e.letter.offset) for e in letters
    ] == [
        (DLQ, 0, "k1", "app/in", 1),
        (DLQ, 1, "k3", "app/in", 3),
    ]
    first = letters[0].letter
    assert (first.computation, first.attempts, first.error_type) == ("parse", 3, "ValueError")
    assert first.error == "cannot parse k1" and first.first_failed_at <= first.failed_at
    assert error_counts(letters) == [("ValueError", 2)]
    reads: list[tuple[int, int]] = []
    recovery.dead_letters(progress=lambda read, total: reads.append((read, total)))
    assert reads == [(1, 2), (2, 2)]
    assert [e.offset for e in recovery.dead_letters(DeadLetterFilter(error="k3"))] == [1]
    assert recovery.dead_letters(DeadLetterFilter(computation="other")) == []
    assert len(recovery.dead_letters(DeadLetterFilter(since_ms=first.failed_at + 3_600_000))) == 0

    end = manager.end_offsets("app/in")
    dry = recovery.redrive(DeadLetterFilter(), reason="", dry_run=True)
    assert (dry.summary["redriven"], dry.audit_event_id) == (2, None)
    assert manager.end_offsets("app/in") == end and audit_entries(recovery) == []

    one = DeadLetterFilter(streams=(DLQ,), offsets=frozenset({(0, 0)}))
    outcome = recovery.redrive(one, reason="parser fixed")
    assert outcome.summary["redriven"] == 1 and outcome.rows == [{"target": "app/in", "records": 1}]
    redriven = read_all(manager, "app/in")[-1]
    assert (redriven.key, redriven.data, redriven.watermark) == ("k1", b"bad1", 11)

    again = recovery.redrive(DeadLetterFilter(), reason="the rest")
    assert (again.summary["redriven"], again.summary["already"]) == (1, 1)
    third = recovery.redrive(DeadLetterFilter(), reason="once more")
    assert (third.summary["redriven"], third.summary["already"], third.audit_event_id) == (
        0,
        2,
        None,
    )
    assert manager.end_offsets("app/in") == [end[0] + 2]

    entries = audit_entries(recovery)
    assert [e.event_type for e in entries] == ["recoveryRedrive", "recoveryRedrive"]
    assert entries[0].principal == "ops" and entries[0].comment == "parser fixed"
    assert entries[0].category == "recovery" and entries[0].extended["redriven"] == "1"


def test_a_redrive_stopped_before_its_ledger_update_is_completed_not_repeated(
    manager: LogManager, recovery: Recovery, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crash between the append and the ledger's `done` (injected: the update fails once)."""
    feed(manager, [Record("k1", b"bad", 5)])
    run_until_quiet(manager, ComputationPolicy(max_retries=0, dlq=DLQ, **FAST))
    finish = RedriveLedger.finish
    calls = []

    def crash_once(self: RedriveLedger, landed: Any, trail: Any = None) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("killed before the ledger update")
        return finish(self, landed, trail)

    monkeypatch.setattr(RedriveLedger, "finish", crash_once)
    with pytest.raises(RuntimeError, match="killed"):
        recovery.redrive(DeadLetterFilter(), reason="first try")
    assert manager.end_offsets("app/in") == [2]  # appended, not marked done
    assert audit_entries(recovery) == []
    outcome = recovery.redrive(DeadLetterFilter(), reason="second try")
    assert (outcome.summary["redriven"], outcome.summary["completed"]) == (0, 1)
    assert manager.end_offsets("app/in") == [2]
    assert [e.comment for e in audit_entries(recovery)] == ["second try"]
    assert recovery.redrive(DeadLetterFilter(), reason="third").summary["already"] == 1


def test_redrive_refuses_bad_selections_before_appending(
    manager: LogManager, recovery: Recovery
) -> None:
    feed(manager, [Record("k1", b"bad", 5)])
    run_until_quiet(manager, ComputationPolicy(max_retries=0, dlq=DLQ, **FAST))
    end = manager.end_offsets("app/in")
    cases = [
        (DeadLetterFilter(streams=("app/in",)), "not a dead-letter stream"),
        (DeadLetterFilter(streams=("app/dlq-nope",)), "does not exist"),
        (
            DeadLetterFilter(streams=(DLQ,), offsets=frozenset({(0, 7)})),
            r"holds offsets 0\.\.0, not 7",
        ),
        (
            DeadLetterFilter(streams=(DLQ,), offsets=frozenset({(3, 0)})),
            r"has partitions 0\.\.0, not 3",
        ),
    ]
    for selection, message in cases:
        with pytest.raises(SelectionError, match=message):
            recovery.redrive(selection, reason="x")
    with pytest.raises(SelectionError, match="app/gone: the stream does not exist"):
        recovery.redrive(DeadLetterFilter(), reason="x", target="app/gone")
    with pytest.raises(SelectionError, match="needs a reason"):
        recovery.redrive(DeadLetterFilter(), reason=" ")
    assert manager.end_offsets("app/in") == end and audit_entries(recovery) == []


# -- positions ------------------------------------------------------------------------------------
def test_skip_a_poison_record_then_processing_resumes(
    manager: LogManager, recovery: Recovery
) -> None:
    feed(manager, [Record("k0", b"a", 1), Record("k1", b"bad", 2), Record("k2", b"c", 3)])
    settings = Settings(drain_quiet=0.3).set_policy(
        "parse", ComputationPolicy(max_retries=1, **FAST)
    )
    processor = StreamProcessor(manager, TOPOLOGY, settings).start()
    deadline = time.monotonic() + 30
    while not processor.failed_computations() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processor.failed_computations() == ["parse"]
    processor.stop(10)
    assert manager.committed("app/in", "parse") == [1]

    with pytest.raises(SelectionError, match=r"stands at offset 1 .* not at 2"):
        recovery.skip("app/in", "parse", 0, 2, reason="wrong record")
    dry = recovery.skip("app/in", "parse", 0, 1, reason="", dry_run=True)
    assert dry.rows == [
        {"partition": 0, "before": 1, "after": 2, "end": 3, "reread": 0, "skipped": 1}
    ]
    assert manager.committed("app/in", "parse") == [1]
    outcome = recovery.skip("app/in", "parse", 0, 1, reason="corrupt order")
    assert manager.committed("app/in", "parse") == [2] and outcome.audit_event_id

    run_until_quiet(manager, ComputationPolicy(max_retries=0, **FAST))
    assert [r.data for r in read_all(manager, "app/out")] == [b"A", b"C"]
    entry = audit_entries(recovery)[-1]
    assert entry.event_type == "recoverySkip" and entry.comment == "corrupt order"
    assert '"before": 1' in entry.extended["partitions"] and entry.extended["group"] == "parse"


def test_reset_previews_refusals_and_live_members(manager: LogManager, recovery: Recovery) -> None:
    feed(manager, [Record(f"k{i}", b"x", 100 + i) for i in range(6)])
    run_until_quiet(manager, ComputationPolicy.NONE)
    assert manager.committed("app/in", "parse") == [6]

    preview = recovery.reset("app/in", "parse", ResetTarget(watermark=103), reason="", dry_run=True)
    assert preview.rows == [
        {"partition": 0, "before": 6, "after": 3, "end": 6, "reread": 3, "skipped": 0}
    ]
    assert manager.committed("app/in", "parse") == [6]
    refusals = [
        (("app/in", "nobody", ResetTarget(end=True)), "group 'nobody' has no position on app/in"),
        (("app/in", "parse", ResetTarget(offset=9)), "ends at 6; offset 9 does not exist"),
        (("app/nope", "parse", ResetTarget(end=True)), "app/nope does not exist"),
    ]
    for (stream, group, target), message in refusals:
        with pytest.raises(SelectionError, match=message):
            recovery.reset(stream, group, target, reason="x")

    member = manager.subscribe("parse", ["app/in"], None, CODEC)
    try:
        deadline = time.monotonic() + 20
        while not manager.group_members("parse") and time.monotonic() < deadline:
            member.read(0.1)
        with pytest.raises(LiveMembersError, match="live member"):
            recovery.reset("app/in", "parse", ResetTarget(offset=0), partitions=[0], reason="x")
        assert manager.committed("app/in", "parse") == [6]
    finally:
        member.close()
    outcome = recovery.reset(
        "app/in", "parse", ResetTarget(offset=2), partitions=[0], reason="replay"
    )
    assert outcome.rows[0]["reread"] == 4 and manager.committed("app/in", "parse") == [2]
    stamp = read_all(manager, "app/in")  # appended timestamps: now; a date ahead skips all
    assert stamp
    ahead = recovery.reset(
        "app/in",
        "parse",
        ResetTarget(timestamp_ms=int(time.time() * 1000) + 3_600_000),
        reason="skip all",
    )
    assert ahead.rows[0]["skipped"] == 4 and manager.committed("app/in", "parse") == [6]
    assert [e.event_type for e in audit_entries(recovery)] == ["recoveryReset", "recoveryReset"]


PURGING = [pytest.param("local"), pytest.param("kafka", marks=pytest.mark.kafka)]


@pytest.mark.parametrize("backend", PURGING)
def test_a_reset_to_a_time_or_watermark_before_purged_records_is_refused(
    manager: LogManager, backend: str, recovery: Recovery
) -> None:
    """The first record at or after the date (or watermark) may be one retention purged: moving
    to the oldest retained record instead would skip it silently. Refused, naming the backfill;
    the oldest retained record's own millisecond too (purged records may share it)."""
    purged_stream(manager, backend)
    manager.commit_position(LogPartition.of("app/in", 0), "parse", 10)
    for target in (
        ResetTarget(timestamp_ms=T0),  # before every record
        ResetTarget(timestamp_ms=T0 + 500),  # the oldest retained record's millisecond
        ResetTarget(watermark=100),
        ResetTarget(watermark=105),  # the oldest retained one's: a purged one may be above it
    ):
        for dry_run in (True, False):
            with pytest.raises(SelectionError) as refused:
                recovery.reset("app/in", "parse", target, reason="replay", dry_run=dry_run)
            message = str(refused.value)
            assert "purged" in message and "backfill" in message, message
            assert "partition 0" in message and "offset 5" in message, message
            assert "--to-start" in message, message
    assert manager.committed("app/in", "parse") == [10] and audit_entries(recovery) == []

    # Answers the hot log holds are applied; the start skips the purged records knowingly.
    moved = recovery.reset("app/in", "parse", ResetTarget(timestamp_ms=T0 + 501), reason="r")
    assert moved.rows[0]["after"] == 6 and manager.committed("app/in", "parse") == [6]
    recovery.reset("app/in", "parse", ResetTarget(watermark=107), reason="r")
    assert manager.committed("app/in", "parse") == [7]
    recovery.reset("app/in", "parse", ResetTarget(start=True), reason="skip the purged")
    assert manager.committed("app/in", "parse") == [5]


class SlowBroker:
    """A tailer whose first `read_batch` returns nothing, as a slow broker's does: the test
    cannot slow the real broker down, so it wraps the real tailer (a stand-in for the delay
    only; the records still come from the real log). `stalled`: every read returns nothing."""

    def __init__(self, tailer: Any, stalled: bool = False) -> None:
        self._tailer = tailer
        self._stalled = stalled
        self.empty_reads = 0

    def read_batch(self, max_records: int, timeout: float = 0.0) -> list[Any]:
        if self._stalled or not self.empty_reads:
            self.empty_reads += 1
            return []
        return self._tailer.read_batch(max_records, timeout)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tailer, name)

    def __enter__(self) -> SlowBroker:
        return self

    def __exit__(self, *exc: object) -> None:
        self._tailer.close()


@pytest.mark.parametrize("backend", ["local", pytest.param("kafka", marks=pytest.mark.kafka)])
def test_scans_read_to_the_end_through_an_empty_read(
    manager: LogManager, recovery: Recovery, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An empty read before the end is a slow broker, not the end of the partition: the
    dead-letter scan still lists every dead letter, and a reset to a watermark finds its record
    (it went to the end, skipping everything). A partition that stays silent fails with a clear
    error instead of ending the read early."""
    from streamcore.recovery.deadletters import read_range
    from streamcore.recovery.errors import RecoveryError

    feed(manager, [Record(f"k{i}", b"bad" if i in (1, 3) else b"a", 10 + i) for i in range(5)])
    run_until_quiet(manager, ComputationPolicy(max_retries=0, dlq=DLQ, **FAST))
    assert manager.committed("app/in", "parse") == [5]
    slow: list[SlowBroker] = []
    real = manager.tailer

    def slow_tailer(*args: Any, **kwargs: Any) -> SlowBroker:
        slow.append(SlowBroker(real(*args, **kwargs)))
        return slow[-1]

    monkeypatch.setattr(manager, "tailer", slow_tailer)
    letters = recovery.dead_letters()
    assert [e.letter.record.key for e in letters] == ["k1", "k3"]
    moved = recovery.reset("app/in", "parse", ResetTarget(watermark=12), reason="replay")
    assert moved.rows[0]["after"] == 2 and manager.committed("app/in", "parse") == [2]
    assert slow and all(t.empty_reads == 1 for t in slow)

    partition = LogPartition.of("app/in", 0)
    with (
        SlowBroker(real(TOOLS_GROUP, [partition]), stalled=True) as tailer,
        pytest.raises(RecoveryError) as stalled,
    ):
        list(read_range(tailer, partition, 0, 5, stall_timeout=0.2))
    message = str(stalled.value)
    assert "app/in" in message and "partition 0" in message and "0..4" in message, message
    assert "no record" in message and "nothing was changed" in message, message


# -- outbox ---------------------------------------------------------------------------------------
@pytest.fixture
def on_outbox(outbox_url: str, tmp_path: Path, clean_env: pytest.MonkeyPatch) -> Iterator[Recovery]:
    from streamcore.log.memory import MemoryLogManager

    clean_env.setenv("STREAMCORE_HOME", str(tmp_path))
    with Recovery(load_config(), manager=MemoryLogManager(), url=outbox_url, principal="ops") as r:
        yield r


def test_outbox_errors_retry_and_purge(on_outbox: Recovery) -> None:
    from streamcore.outbox import Registry
    from streamcore.outbox.put import put_many
    from streamcore.outbox.store import DONE, ERROR, INIT

    registry = Registry()
    registry.register("mail", lambda p: p)
    engine = on_outbox.outbox.engine
    with engine.begin() as conn:
        put_many(conn, "mail", [1, 2, 3, 4], ids=["a", "b", "c", "d"], registry=registry)
        conn.execute(
            sa.update(jobs)
            .where(jobs.c.id.in_(["a", "b", "c"]))
            .values(
                status=ERROR,
                error_ms=1,
                tries=3,
                error_type="SMTPError",
                error_message="relay down",
            )
        )
        conn.execute(sa.update(jobs).where(jobs.c.id == "d").values(status=DONE, done_ms=1))

    def statuses() -> dict[str, str]:
        with engine.connect() as conn:
            rows = conn.execute(sa.select(jobs.c.id, jobs.c.status).where(jobs.c.queue == "mail"))
            return dict(rows.all())

    assert [(e.id, e.error_type) for e in on_outbox.outbox_errors("mail")] == [
        ("a", "SMTPError"),
        ("b", "SMTPError"),
        ("c", "SMTPError"),
    ]
    dry = on_outbox.outbox_retry("mail", reason="", dry_run=True)
    assert dry.summary["retried"] == 3 and statuses()["a"] == ERROR and not audit_entries(on_outbox)
    with pytest.raises(SelectionError, match="no job 'zz' in error"):
        on_outbox.outbox_retry("mail", reason="x", job_id="zz")
    one = on_outbox.outbox_retry("mail", reason="relay back", job_id="b")
    assert one.summary["retried"] == 1 and statuses()["b"] == INIT
    every = on_outbox.outbox_retry("mail", reason="relay back")
    assert every.summary["retried"] == 2 and set(statuses().values()) == {INIT, DONE}
    assert on_outbox.outbox_purge(older_than_s=60, reason="", dry_run=True).summary["purged"] == 1
    assert "d" in statuses()
    purged = on_outbox.outbox_purge(older_than_s=60, reason="tidy", queue="mail")
    assert purged.summary["purged"] == 1 and "d" not in statuses()
    types = [e.event_type for e in audit_entries(on_outbox)]
    assert types == ["recoveryOutboxRetry", "recoveryOutboxRetry", "recoveryOutboxPurge"]


# -- overlapping and crashed repairs, in real processes -------------------------------------------
ROOT = Path(__file__).resolve().parents[3]


def start_python(code: str, **env: str) -> subprocess.Popen[str]:
    """`code` in a Python process of its own, on this test's home and outbox database."""
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        env={**os.environ, **env},
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for_file(path: Path, process: subprocess.Popen[str], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if process.poll() is not None:
            pytest.fail(f"the process ended first: {process.stderr.read()[-3000:]}")
        assert time.monotonic() < deadline, f"{path} did not appear in {timeout} s"
        time.sleep(0.05)


def ledger_states(recovery: Recovery) -> list[str]:
    from streamcore.recovery.ledger import redrives

    with recovery.outbox.engine.connect() as conn:
        return sorted(conn.execute(sa.select(redrives.c.state)).scalars())


@pytest.fixture
def on_home(outbox_url: str, tmp_path: Path, clean_env: pytest.MonkeyPatch) -> Iterator[Recovery]:
    """Recovery on this test's home (local log: `recovery_support`'s seven dead letters of
    app/dlq-parse, failed on app/in) and outbox database; processes started by the test use
    both (STREAMCORE_HOME, OUTBOX_URL)."""
    from recovery_support import write_dead_letters

    clean_env.setenv("STREAMCORE_HOME", str(tmp_path / "home"))
    clean_env.setenv("OUTBOX_URL", outbox_url)
    write_dead_letters(load_config())
    with Recovery(load_config(), url=outbox_url, codec="avro", principal="ops") as recovery:
        yield recovery


def test_an_overlapping_redrive_is_refused_while_the_first_appends(
    on_home: Recovery, tmp_path: Path
) -> None:
    """Run A has written its ledger rows `pending` and is about to append (held there); run B,
    of the same dead letters, took A's live rows for a crashed run's, replaced them and
    appended too: every record twice. B must be refused, and A finish alone."""
    claimed, go = tmp_path / "claimed", tmp_path / "go"
    first = start_python(
        """
        import importlib, json, os, time
        from pathlib import Path
        from streamcore.config import load_config
        from streamcore.recovery import DeadLetterFilter, Recovery

        redrive = importlib.import_module("streamcore.recovery.redrive")  # not the function
        append = redrive._append
        def held(*args, **kwargs):
            Path(os.environ["CLAIMED"]).touch()
            deadline = time.monotonic() + 120
            while not Path(os.environ["GO"]).exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            return append(*args, **kwargs)
        redrive._append = held
        url = os.environ["OUTBOX_URL"]
        with Recovery(load_config(), url=url, codec="avro", principal="a") as recovery:
            print(json.dumps(recovery.redrive(DeadLetterFilter(), reason="first").to_dict()))
        """,
        CLAIMED=str(claimed),
        GO=str(go),
    )
    try:
        wait_for_file(claimed, first)
        with pytest.raises(LedgerBusyError) as busy:
            on_home.redrive(DeadLetterFilter(), reason="second")
        assert "app/dlq-parse" in str(busy.value) and "run it again" in str(busy.value).lower()
    finally:
        go.touch()
        out, err = first.communicate(timeout=120)
    assert first.returncode == 0, err[-3000:]
    assert json.loads(out.strip().splitlines()[-1])["summary"]["redriven"] == 7
    assert len(source_records(load_config())[1]) == 7  # each record once
    assert ledger_states(on_home) == ["done"] * 7
    assert [e.comment for e in audit_entries(on_home)] == ["first"]
    again = on_home.redrive(DeadLetterFilter(), reason="second")
    assert (again.summary["already"], again.summary["redriven"]) == (7, 0)


KILLED_AT_THE_TRAIL = """
    import os, signal
    import streamcore.recovery.service as service
    from streamcore.config import load_config
    from streamcore.recovery import DeadLetterFilter, Recovery, ResetTarget

    def killed(conn, entry):  # the process dies where the audit entry is written
        os.kill(os.getpid(), signal.SIGKILL)
    service.publish = killed
    url = os.environ["OUTBOX_URL"]
    with Recovery(load_config(), url=url, codec="avro", principal="ops") as recovery:
        if os.environ["ACTION"] == "redrive":
            recovery.redrive(DeadLetterFilter(), reason="killed")
        else:
            recovery.reset("app/in", "parse", ResetTarget(start=True), reason="killed")
"""


def test_a_repair_killed_at_its_audit_entry_is_not_left_without_its_trail(
    on_home: Recovery,
) -> None:
    """SIGKILL where a repair writes its audit entry. A redrive's rows are marked done in the
    entry's transaction: they stay `pending`, and the rerun completes them (no second append)
    and writes the entry. A reset's entry is written before the move: nothing moved."""
    killed = start_python(KILLED_AT_THE_TRAIL, ACTION="redrive")
    killed.communicate(timeout=120)
    assert killed.returncode == -signal.SIGKILL
    assert len(source_records(load_config())[1]) == 7  # appended
    assert audit_entries(on_home) == []
    assert ledger_states(on_home) == ["pending"] * 7, "the redrive is done without its trail"
    rerun = on_home.redrive(DeadLetterFilter(), reason="after the crash")
    assert (rerun.summary["completed"], rerun.summary["redriven"]) == (7, 0)
    assert len(source_records(load_config())[1]) == 7
    assert ledger_states(on_home) == ["done"] * 7
    assert [e.comment for e in audit_entries(on_home)] == ["after the crash"]

    with open_log_manager(load_config()) as manager:
        manager.commit_position(LogPartition.of("app/in", 0), "parse", 4)
    killed = start_python(KILLED_AT_THE_TRAIL, ACTION="reset")
    killed.communicate(timeout=120)
    assert killed.returncode == -signal.SIGKILL
    with open_log_manager(load_config()) as manager:
        assert manager.committed("app/in", "parse")[0] == 4, "the reset moved without its trail"
    on_home.reset("app/in", "parse", ResetTarget(start=True), partitions=[0], reason="replay")
    assert [e.event_type for e in audit_entries(on_home)][-1] == "recoveryReset"
