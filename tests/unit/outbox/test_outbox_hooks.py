"""The outbox's system hooks (streamcore.outbox.hooks), `allow_cas_failure` and the logging context
jobs carry (streamcore.outbox.log_context; docs/outbox.md, "Hooks"), on SQLite and PostgreSQL."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import pytest
import sqlalchemy as sa

from streamcore.outbox import (
    DONE,
    ERROR,
    ConcurrentUpdateError,
    SchemaMissingError,
    create_schema,
    put,
)
from streamcore.outbox.hooks import SystemHooks
from streamcore.outbox.log_context import LogContextFilter, current_log_context, logging_context
from streamcore.outbox.schema import TABLE, jobs


def wait_until(condition: Callable[[], bool], timeout: float = 30.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


def status(engine: sa.Engine, queue: str) -> list[str]:
    with engine.connect() as conn:
        return [
            r.status for r in conn.execute(sa.select(jobs.c.status).where(jobs.c.queue == queue))
        ]


def test_system_errors_and_the_recovery_reach_the_hooks(make_outbox, registry) -> None:
    errors: list[tuple[str, BaseException]] = []
    recoveries: list[tuple[str, float]] = []
    lock = threading.Lock()

    def on_error(where: str, error: BaseException) -> None:
        with lock:
            errors.append((where, error))

    def on_recovery(where: str, seconds: float) -> None:
        with lock:
            recoveries.append((where, seconds))

    seen: list[int] = []
    registry.register("q", lambda payload: seen.append(payload["n"]))
    outbox = make_outbox(on_system_error=on_error, on_system_recovery=on_recovery)
    with outbox:
        with outbox.engine.begin() as conn:
            put(conn, "q", {"n": 1}, registry=registry)
        wait_until(lambda: seen == [1], what="the first job")
        assert errors == [] and recoveries == []
        jobs.drop(outbox.engine)  # the outbox's own database fails under it
        wait_until(lambda: len(errors) >= 2, what="system errors")
        assert any(where.startswith("claiming jobs of q") for where, _ in errors)
        assert all(isinstance(error, sa.exc.DBAPIError) for _, error in errors)
        create_schema(outbox.engine)
        wait_until(lambda: len(recoveries) == 1, what="the recovery")
        with outbox.engine.begin() as conn:
            put(conn, "q", {"n": 2}, registry=registry)
        wait_until(lambda: seen == [1, 2], what="a job after the recovery")
    (_where, seconds) = recoveries[0]
    assert seconds > 0 and len(recoveries) == 1
    assert outbox.hooks.down_since is None and outbox.hooks.errors == len(errors)


def test_the_default_hooks_log_and_a_raising_hook_is_ignored(
    caplog: pytest.LogCaptureFixture,
) -> None:
    hooks = SystemHooks()
    with caplog.at_level("WARNING", logger="streamcore.outbox.hooks"):
        hooks.failed("claiming jobs of q", OSError("database is gone"))
        hooks.succeeded("claiming jobs of q")
        hooks.succeeded("claiming jobs of q")  # no outage: nothing
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0] == "outbox: claiming jobs of q failed; retrying"
    assert lines[1].startswith("outbox: claiming jobs of q works again after")
    assert len(lines) == 2

    def broken(where: str, error: BaseException) -> None:
        raise RuntimeError("the hook itself fails")

    SystemHooks(on_system_error=broken).failed("x", OSError("y"))  # logged, not raised


@pytest.mark.parametrize("allowed", [True, False])
def test_a_lost_concurrent_update_is_done_only_when_the_queue_allows_it(
    make_outbox, registry, allowed: bool
) -> None:
    tries: list[int] = []

    def update_row(payload: dict) -> None:
        tries.append(payload["row"])
        raise ConcurrentUpdateError(f"row {payload['row']} changed since it was read")

    registry.register("sync", update_row, allow_cas_failure=allowed, error_backoff=60.0)
    outbox = make_outbox()
    with outbox:
        with outbox.engine.begin() as conn:
            put(conn, "sync", {"row": 7}, registry=registry)
        wait_until(lambda: status(outbox.engine, "sync") == [DONE if allowed else ERROR])
    assert tries == [7]


def test_a_job_runs_in_the_logging_context_it_was_put_with(make_outbox, registry) -> None:
    seen: list[dict[str, str]] = []
    registry.register("q", lambda payload: seen.append(current_log_context()))
    outbox = make_outbox()
    with outbox:
        with logging_context(request_id="r-42", user="ada"), outbox.engine.begin() as conn:
            put(conn, "q", {"n": 1}, registry=registry)
        wait_until(lambda: len(seen) == 1, what="the first job")
        with outbox.engine.begin() as conn:
            put(conn, "q", {"n": 2}, registry=registry)  # no context: none leaks from the first
        wait_until(lambda: len(seen) == 2, what="the second job")
    assert seen == [{"request_id": "r-42", "user": "ada"}, {}]


def test_the_log_filter_adds_the_context_to_records() -> None:
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "hello", None, None)
    with logging_context(request_id="r-7"):
        assert LogContextFilter().filter(record)
    assert record.log_context == {"request_id": "r-7"}
    assert record.log_context_text == "request_id=r-7"


def test_a_table_of_an_older_version_is_refused_until_migrated(make_outbox, registry) -> None:
    registry.register("q", lambda payload: None)
    outbox = make_outbox()
    with outbox.engine.begin() as conn:
        conn.execute(sa.text(f"ALTER TABLE {TABLE} DROP COLUMN context"))
    missing = r"lacks the column\(s\) \['context'\]"
    with pytest.raises(SchemaMissingError, match=missing), outbox.engine.begin() as conn:
        put(conn, "q", {"n": 1}, registry=registry)
    create_schema(outbox.engine)  # adds the column
    with outbox.engine.begin() as conn:
        put(conn, "q", {"n": 1}, registry=registry)
