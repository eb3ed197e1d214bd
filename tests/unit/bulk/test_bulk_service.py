"""`BulkService` on SQLite and on the real PostgreSQL server (`outbox_url`): submit, idempotent
resubmit, exclusive actions (two processes racing), abort, the job's updates with counted buckets,
wait and list, and what the streams bulk/command, bulk/status and bulk/done receive."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from streamcore.bulk import (
    COMMAND_STREAM,
    DONE_STREAM,
    STATUS_STREAM,
    ActionRegistry,
    BulkAction,
    BulkCommand,
    BulkError,
    BulkParamsError,
    BulkQueryError,
    BulkService,
    BulkStatus,
    CommandNotFoundError,
    ExclusiveActionError,
    NotAbortableError,
    State,
    UnknownActionError,
    actions_for,
    decode_command,
    decode_status,
)
from streamcore.codecs import get_codec
from streamcore.config import load_config
from streamcore.log import open_log_manager


class Reindex(BulkAction):
    """An exclusive action: one running command per repository."""

    name = "reindex"
    exclusive = True
    bucket_size = 10
    batch_size = 5

    def apply(self, docs: Any, params: dict[str, Any], F: Any) -> Any:
        return docs.select("id")


@pytest.fixture
def registry() -> ActionRegistry:
    registry = actions_for(load_config())
    registry.register(Reindex)
    return registry


@pytest.fixture
def service(outbox_url: str, registry: ActionRegistry) -> Iterator[BulkService]:
    with BulkService(url=outbox_url, registry=registry) as service:
        yield service


def read_stream(name: str) -> list[tuple[int, str, Any]]:
    """(partition, key, decoded payload) of every record of `name`, in partition order."""
    decode = decode_command if name == COMMAND_STREAM else decode_status
    with open_log_manager(load_config()) as manager:
        if not manager.exists(name):
            return []
        out = []
        with manager.tailer("test/reader", name, get_codec("avro")) as tailer:
            while records := tailer.read_batch(100, timeout=0):
                out += [(r.partition.partition, r.key, decode(r.message.data)) for r in records]
        return out


def stream_sizes() -> dict[str, int]:
    with open_log_manager(load_config()) as manager:
        return {name: manager.size(name) for name in (COMMAND_STREAM, STATUS_STREAM, DONE_STREAM)}


def test_submit_stores_the_command_and_publishes_it(service: BulkService) -> None:
    status = service.submit(
        "setProperties",
        "type='Note' and modified < current_timestamp() - interval 1 day",
        {"properties": {"dc:source": "bulk"}},
        username="ann",
    )
    assert status.state is State.SCHEDULED and not status.delta
    assert (status.action, status.username) == ("setProperties", "ann")
    assert status.submit_ms is not None and status.submit_ms > 0
    command = service.command(status.command_id)
    assert command.query == "type = 'Note' AND modified < CURRENT_TIMESTAMP() - INTERVAL '1' DAY"
    assert command.params == {"properties": {"dc:source": "bulk"}}
    assert (command.bucket_size, command.batch_size, command.query_limit) == (100_000, 100_000, 0)
    assert command.repository == "repository" and command.created_ms == status.submit_ms
    assert service.status(status.command_id) == status

    assert stream_sizes() == {COMMAND_STREAM: 2, STATUS_STREAM: 1, DONE_STREAM: 1}
    [(_, key, published)] = read_stream(COMMAND_STREAM)
    assert key == status.command_id and published == command
    assert read_stream(STATUS_STREAM) == [(0, status.command_id, status)]
    assert read_stream(DONE_STREAM) == []


def test_submit_takes_the_action_defaults_and_explicit_sizes(service: BulkService) -> None:
    export = service.command(service.submit("csvExport", "true", username="ann").command_id)
    assert export.query_limit == 100_000 and export.params["sort"] is True
    status = service.submit(
        "trash", "isTrashed = false", username="ann", bucket_size=10, batch_size=10, query_limit=0
    )
    trash = service.command(status.command_id)
    assert (trash.bucket_size, trash.batch_size, trash.query_limit) == (10, 10, 0)


def test_submit_binds_values_into_the_stored_query(service: BulkService) -> None:
    """A schedule's values: the command keeps the query with them bound as literals, and the
    bucket alone given makes the default batch fit in it."""
    status = service.submit(
        "trash", "title = :t", username="ann", values={"t": "x' OR 1=1"}, bucket_size=10
    )
    command = service.command(status.command_id)
    assert command.query == "title = 'x\\' OR 1=1'"
    assert (command.bucket_size, command.batch_size) == (10, 10)


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        ({"action": "nope"}, UnknownActionError, "unknown bulk action 'nope'"),
        ({"params": {"properties": 3}}, BulkParamsError, "params/properties: 3 is not of type"),
        ({"query": "tittle = 'a'"}, BulkQueryError, "did you mean title?"),
        ({"query": "1; drop table x"}, BulkQueryError, "2 statements"),
        ({"bucket_size": 5, "batch_size": 10}, BulkParamsError, "bucket size >= batch size > 0"),
        ({"batch_size": 0}, BulkParamsError, "bucket size >= batch size > 0"),
        ({"query_limit": -1}, BulkParamsError, "query limit -1"),
        ({"username": " "}, BulkParamsError, "needs a username"),
        ({"repository": "no-such table"}, BulkParamsError, "repository 'no-such table'"),
    ],
)
def test_submit_checks_everything_before_storing(
    service: BulkService, call: dict[str, Any], error: type[Exception], message: str
) -> None:
    arguments: dict[str, Any] = {
        "action": "setProperties",
        "query": "type = 'Note'",
        "params": {"properties": {"k": "v"}},
        "username": "ann",
        **call,
    }
    with pytest.raises(error, match=message):
        service.submit(
            arguments.pop("action"), arguments.pop("query"), arguments.pop("params"), **arguments
        )
    assert service.list() == []
    assert read_stream(COMMAND_STREAM) == []


@pytest.mark.parametrize("bad", ["../../outside", "/tmp/outside", "a/b", ".."])
def test_command_ids_are_checked_at_every_entry(service: BulkService, bad: str) -> None:
    with pytest.raises(BulkParamsError, match="a command id is a UUID or a slug"):
        service.submit("trash", "true", username="ann", command_id=bad)
    assert service.list() == [] and read_stream(COMMAND_STREAM) == []
    delta = BulkStatus(command_id=bad, delta=True, processed=1)
    for call in (
        lambda: service.status(bad),
        lambda: service.command(bad),
        lambda: service.abort(bad),
        lambda: service.wait(bad, 0),
        lambda: service.update(bad, delta),
    ):
        with pytest.raises(BulkParamsError, match="a command id is a UUID or a slug"):
            call()


def test_resubmitting_an_id_returns_the_stored_status(service: BulkService) -> None:
    first = service.submit("trash", "type = 'Note'", username="ann", command_id="run-1")
    assert first.command_id == "run-1"
    again = service.submit("trash", "type = 'Note'", username="ann", command_id="run-1")
    assert again == first
    service.update("run-1", BulkStatus(command_id="run-1", delta=True, state=State.RUNNING))
    assert (
        service.submit("trash", "true", username="bob", command_id="run-1").state is State.RUNNING
    )
    assert len(read_stream(COMMAND_STREAM)) == 1


def test_a_second_exclusive_command_is_refused_until_the_first_finishes(
    service: BulkService,
) -> None:
    first = service.submit("reindex", "true", username="ann")
    with pytest.raises(ExclusiveActionError) as caught:
        service.submit("reindex", "type = 'Note'", username="bob")
    assert caught.value.running == first.command_id
    assert f"command {first.command_id}" in str(caught.value)
    assert f"streamcore bulk abort {first.command_id}" in str(caught.value)
    # Other actions, and the same action on another repository, are not held back.
    service.submit("trash", "true", username="bob")
    service.submit("reindex", "true", username="bob", repository="archive_copy")

    service.abort(first.command_id)
    second = service.submit("reindex", "true", username="bob")
    cid = second.command_id
    service.update(cid, BulkStatus(command_id=cid, delta=True, state=State.RUNNING, total=1))
    with pytest.raises(ExclusiveActionError):
        service.submit("reindex", "true", username="carl")
    service.update(cid, BulkStatus(command_id=cid, delta=True, processed=1))
    assert service.status(cid).state is State.COMPLETED
    service.submit("reindex", "true", username="carl")


RACER = """
import json, sys
from typing import Any
from streamcore.bulk import BulkAction, BulkService, ExclusiveActionError, actions_for


class Reindex(BulkAction):
    \"\"\"Exclusive.\"\"\"

    name = "reindex"
    exclusive = True

    def apply(self, docs: Any, params: dict, F: Any) -> Any:
        return docs


registry = actions_for()
registry.register(Reindex)
with BulkService(url=sys.argv[1], registry=registry) as service:
    service.list()  # the tables exist before the race
    print("ready", flush=True)
    sys.stdin.readline()
    try:
        print(json.dumps({"won": service.submit("reindex", "true", username="p").command_id}))
    except ExclusiveActionError as exc:
        print(json.dumps({"lost": exc.running}))
"""


def race(script: str, outbox_url: str) -> list[Any]:
    """Runs `script` in two processes that print "ready", wait for a line on stdin, then print
    one JSON result: both are let go together, and their results returned."""
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", script, outbox_url],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    for racer in racers:
        assert racer.stdout is not None and racer.stdout.readline().strip() == "ready"
    for racer in racers:
        assert racer.stdin is not None
        racer.stdin.write("go\n")
        racer.stdin.flush()
    outcomes = []
    for racer in racers:
        out, err = racer.communicate(timeout=120)
        assert racer.returncode == 0, err
        outcomes.append(json.loads(out))
    return outcomes


def test_two_processes_racing_for_an_exclusive_action(
    outbox_url: str, service: BulkService
) -> None:
    for _round in range(2):
        outcomes = race(RACER, outbox_url)
        winners = [o["won"] for o in outcomes if "won" in o]
        assert len(winners) == 1, outcomes
        assert [o["lost"] for o in outcomes if "lost" in o] == winners
        assert service.list(action="reindex")[0].command_id == winners[0]
        service.abort(winners[0])


def test_abort(service: BulkService) -> None:
    status = service.submit("trash", "true", username="ann")
    cid = status.command_id
    aborted = service.abort(cid)
    assert aborted.state is State.ABORTED and aborted.completed_ms is not None
    assert service.status(cid) == aborted
    assert service.abort(cid) == aborted  # once aborted, nothing more happens

    deltas = [s for _, _, s in read_stream(STATUS_STREAM)]
    assert deltas[0] == status
    assert deltas[1] == BulkStatus(
        command_id=cid, delta=True, state=State.ABORTED, completed_ms=aborted.completed_ms
    )
    assert len(deltas) == 2
    assert read_stream(DONE_STREAM) == [(0, cid, aborted)]
    with pytest.raises(CommandNotFoundError, match="no bulk command 'nope'"):
        service.abort("nope")


def test_a_completed_command_cannot_be_aborted(service: BulkService) -> None:
    cid = service.submit("trash", "true", username="ann").command_id
    done = service.update(
        cid, BulkStatus(command_id=cid, delta=True, state=State.COMPLETED, total=0, completed_ms=1)
    )
    assert done.state is State.COMPLETED
    with pytest.raises(NotAbortableError) as caught:
        service.abort(cid)
    assert str(caught.value) == (
        f"command {cid} completed at 1970-01-01T00:00:00.001Z; a completed command cannot be "
        "aborted"
    )
    assert service.status(cid) == done


def test_update_merges_deltas_and_counts_each_bucket_once(service: BulkService) -> None:
    cid = service.submit("reindex", "true", username="ann").command_id

    def delta(**fields: Any) -> BulkStatus:
        return BulkStatus(command_id=cid, delta=True, **fields)

    service.update(cid, delta(state=State.SCROLLING_RUNNING, scroll_start_ms=10))
    service.update(cid, delta(state=State.RUNNING, scroll_end_ms=20, total=4))
    bucket0 = delta(processed=2, processing_start_ms=30, processing_end_ms=40)
    after0 = service.update(cid, bucket0, bucket=0)
    assert (after0.state, after0.processed) == (State.RUNNING, 2)
    # The job crashed and reran bucket 0: not counted again, nothing published.
    assert service.update(cid, bucket0, bucket=0) == after0
    after1 = service.update(
        cid, delta(processed=1, skipped=1, processing_start_ms=25, processing_end_ms=50), bucket=1
    )
    assert after1.state is State.COMPLETED
    assert (after1.processed, after1.skipped, after1.total) == (3, 1, 4)
    assert (after1.processing_start_ms, after1.processing_end_ms) == (25, 50)
    assert (after1.scroll_start_ms, after1.scroll_end_ms) == (10, 20)
    assert after1.completed_ms is not None and service.status(cid) == after1
    # A late delta after completion still merges, but bulk/done says it once.
    service.update(cid, delta(error_count=1, error_message="late"), bucket=2)

    published = [s for _, _, s in read_stream(STATUS_STREAM)]
    assert len(published) == 6 and published[3] == bucket0 and all(s.delta for s in published[1:])
    [(_, key, done)] = read_stream(DONE_STREAM)
    assert key == cid and done == after1
    service.submit("reindex", "true", username="bob")  # the exclusive slot is free again


def test_update_keeps_an_aborted_command_aborted(service: BulkService) -> None:
    cid = service.submit("trash", "true", username="ann").command_id
    service.abort(cid)
    after = service.update(
        cid, BulkStatus(command_id=cid, delta=True, state=State.RUNNING, total=1, processed=1)
    )
    assert after.state is State.ABORTED and after.processed == 1
    assert len(read_stream(DONE_STREAM)) == 1


def test_update_refuses_a_delta_of_another_command(service: BulkService) -> None:
    cid = service.submit("trash", "true", username="ann").command_id
    with pytest.raises(BulkError, match="about command other, not"):
        service.update(cid, BulkStatus(command_id="other", delta=True, processed=1))
    with pytest.raises(CommandNotFoundError):
        service.update("other", BulkStatus(command_id="other", delta=True, processed=1))


def test_wait(service: BulkService) -> None:
    cid = service.submit("trash", "true", username="ann").command_id
    started = time.monotonic()
    assert service.wait(cid, 0.3).state is State.SCHEDULED
    assert time.monotonic() - started >= 0.3

    def complete() -> None:
        time.sleep(0.3)
        service.update(cid, BulkStatus(command_id=cid, delta=True, state=State.RUNNING, total=1))
        service.update(cid, BulkStatus(command_id=cid, delta=True, processed=1))

    worker = threading.Thread(target=complete)
    worker.start()
    try:
        assert service.wait(cid, 30).state is State.COMPLETED
    finally:
        worker.join()
    with pytest.raises(CommandNotFoundError):
        service.wait("nope", 1)


def test_list_newest_first_with_filters(service: BulkService) -> None:
    ids = []
    for action in ("trash", "untrash", "trash"):
        ids.append(service.submit(action, "true", username="ann").command_id)
        time.sleep(0.002)  # distinct submit times
    service.abort(ids[0])
    assert [s.command_id for s in service.list()] == ids[::-1]
    assert [s.command_id for s in service.list(action="trash")] == [ids[2], ids[0]]
    assert [s.command_id for s in service.list(state=State.ABORTED)] == [ids[0]]
    assert [s.command_id for s in service.list(state="SCHEDULED", limit=1)] == [ids[2]]
    with pytest.raises(BulkParamsError, match="unknown state 'DONE'"):
        service.list(state="DONE")
    with pytest.raises(BulkParamsError, match="limit 0"):
        service.list(limit=0)


def test_reading_an_unknown_command(service: BulkService) -> None:
    with pytest.raises(CommandNotFoundError, match="streamcore bulk list"):
        service.status("nope")
    with pytest.raises(CommandNotFoundError):
        service.command("nope")
    assert isinstance(service.submit("trash", "true", username="a"), BulkStatus)
    assert isinstance(service.command(service.list()[0].command_id), BulkCommand)


def test_an_aborted_command_keeps_its_exclusive_slot_until_its_job_stops(
    service: BulkService,
) -> None:
    """Abort is honoured between buckets: until the job has finished the bucket it is writing
    and acknowledged the abort, a second exclusive command would write the same table."""
    cid = service.submit("reindex", "true", username="ann").command_id
    service.update(cid, BulkStatus(command_id=cid, delta=True, state=State.RUNNING, total=20))
    assert service.abort(cid).state is State.ABORTED
    with pytest.raises(ExclusiveActionError) as caught:
        service.submit("reindex", "true", username="bob")
    assert caught.value.running == cid
    assert "was aborted" in str(caught.value) and "current bucket" in str(caught.value)
    # The bucket the job was writing lands and counts; the slot stays held.
    service.update(cid, BulkStatus(command_id=cid, delta=True, processed=10), bucket=0)
    with pytest.raises(ExclusiveActionError):
        service.submit("reindex", "true", username="bob")
    acknowledged = service.acknowledge_abort(cid)
    assert acknowledged.state is State.ABORTED and acknowledged.processed == 10
    service.submit("reindex", "true", username="bob")


def test_a_command_aborted_before_any_job_frees_its_slot_at_once(service: BulkService) -> None:
    cid = service.submit("reindex", "true", username="ann").command_id
    service.abort(cid)
    service.submit("reindex", "true", username="bob")
    with pytest.raises(BulkError, match="is not aborted"):
        service.acknowledge_abort(service.list(state=State.SCHEDULED)[0].command_id)


def test_dispatch_claims_each_waiting_command_once(service: BulkService) -> None:
    """The dispatcher's claim: every command submitted without a runner (CLI, Python API) is
    claimed once, for the run that will start it; one a DAG run submitted is its own."""
    waiting = [service.submit("trash", "true", username="ann").command_id for _ in range(3)]
    ran = service.submit("trash", "true", username="ann", runner="streamcore_bulk_action/r1")
    done = service.submit("trash", "true", username="ann").command_id
    service.update(done, BulkStatus(command_id=done, delta=True, state=State.COMPLETED, total=0))
    early = service.submit("trash", "true", username="ann").command_id
    service.abort(early)  # aborted before any job: a run records it in bulk_status

    def runner(command_id: str) -> str:
        return f"streamcore_bulk_action/bulk__{command_id}"

    started = service.dispatch(runner)
    assert sorted(started) == sorted((c, runner(c)) for c in [*waiting, early])
    assert ran.command_id not in dict(started)
    assert service.dispatch(runner) == []  # claimed: not started again
    # A dispatcher that crashed between its claim and the trigger: after the grace period the
    # claim is offered again under the same run id (which Airflow refuses to create twice).
    assert sorted(service.dispatch(runner, retry_after_s=0)) == sorted(
        (c, runner(c)) for c in waiting
    )
    service.update(waiting[0], BulkStatus(command_id=waiting[0], delta=True, state=State.RUNNING))
    assert waiting[0] not in dict(service.dispatch(runner, retry_after_s=0))


def test_a_command_runs_under_one_runner(service: BulkService) -> None:
    cid = service.submit("trash", "true", username="ann").command_id
    service.claim(cid, "streamcore_bulk_action/a")
    service.claim(cid, "streamcore_bulk_action/a")  # a retried task of the same run
    with pytest.raises(BulkError, match="streamcore_bulk_action/a runs it"):
        service.claim(cid, "streamcore_bulk_action/b")
    with pytest.raises(CommandNotFoundError):
        service.claim("nope", "streamcore_bulk_action/a")
    assert service.dispatch(lambda c: f"x/{c}") == []


DISPATCHER = """
import json, sys
from streamcore.bulk import BulkService
with BulkService(url=sys.argv[1]) as service:
    service.list()
    print("ready", flush=True)
    sys.stdin.readline()
    print(json.dumps(service.dispatch(lambda c: f"streamcore_bulk_action/bulk__{c}")))
"""


def test_two_dispatchers_racing_start_each_command_once(
    outbox_url: str, service: BulkService
) -> None:
    submitted = {service.submit("trash", "true", username="ann").command_id for _ in range(20)}
    started = [command_id for out in race(DISPATCHER, outbox_url) for command_id, _ in out]
    assert sorted(started) == sorted(submitted)
