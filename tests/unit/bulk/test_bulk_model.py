"""Commands, statuses and Nuxeo's status merge (docs/bulk.md, "Commands and statuses"), and their
Avro datums on the streams."""

from __future__ import annotations

import pytest

from streamcore.bulk import BulkCommand, BulkStatus, State, decode_command, decode_status
from streamcore.bulk.messages import command_record, status_record

ID = "c0ffee00-0000-4000-8000-000000000001"


def full(**fields: object) -> BulkStatus:
    return BulkStatus(command_id=ID, action="trash", username="ann", **fields)


def delta(**fields: object) -> BulkStatus:
    return BulkStatus(command_id=ID, delta=True, **fields)


def test_terminal_states() -> None:
    assert {s for s in State if s.terminal} == {State.COMPLETED, State.ABORTED}
    assert State("RUNNING") is State.RUNNING and State.RUNNING == "RUNNING"


def test_command_datum_round_trip_through_avro() -> None:
    command = BulkCommand(
        id=ID,
        action="setProperties",
        query="type = 'Note'",
        params={"properties": {"dc:source": "x", "gone": None}},
        username="ann",
        bucket_size=100,
        batch_size=25,
        query_limit=7,
        created_ms=1_700_000_000_123,
    )
    datum = command.to_datum()
    assert datum["params"] == '{"properties":{"dc:source":"x","gone":null}}'
    assert datum["bucketSize"] == 100 and datum["created"] == 1_700_000_000_123
    assert BulkCommand.from_datum(datum) == command
    record = command_record(command)
    assert record.key == ID
    assert decode_command(record.data) == command


def test_status_datum_round_trip_through_avro() -> None:
    status = full(
        state=State.RUNNING,
        total=10,
        processed=3,
        error_count=1,
        error_message="boom",
        error_code=500,
        submit_ms=1,
        processing_start_ms=2,
        query_limit_reached=False,
        result={"path": "/x.csv"},
    )
    assert status.to_datum()["state"] == "RUNNING"
    assert status.to_datum()["processingStartTime"] == 2
    assert BulkStatus.from_datum(status.to_datum()) == status
    assert decode_status(status_record(status).data) == status
    only_id = BulkStatus(command_id=ID, delta=True)
    assert decode_status(status_record(only_id).data) == only_id


def test_merge_overwrites_the_state_unless_aborted() -> None:
    assert full(state=State.SCHEDULED).merge(delta(state=State.RUNNING)).state is State.RUNNING
    aborted = full(state=State.ABORTED, completed_ms=5)
    assert aborted.merge(delta(state=State.RUNNING)).state is State.ABORTED
    assert full(state=State.RUNNING).merge(delta(total=4)).state is State.RUNNING


def test_merge_adds_counts() -> None:
    merged = full(processed=2, skipped=1, error_count=None).merge(
        delta(processed=3, skipped=2, error_count=4)
    )
    assert (merged.processed, merged.skipped, merged.error_count) == (5, 3, 4)
    assert full(processed=2).merge(delta()).processed == 2


def test_merge_takes_min_processing_start_and_max_end() -> None:
    base = full(processing_start_ms=100, processing_end_ms=200)
    merged = base.merge(delta(processing_start_ms=50, processing_end_ms=150))
    assert (merged.processing_start_ms, merged.processing_end_ms) == (50, 200)
    merged = base.merge(delta(processing_start_ms=150, processing_end_ms=300))
    assert (merged.processing_start_ms, merged.processing_end_ms) == (100, 300)
    first = full().merge(delta(processing_start_ms=7))
    assert first.processing_start_ms == 7


def test_merge_keeps_the_first_error() -> None:
    merged = full().merge(delta(error_message="first", error_code=400))
    merged = merged.merge(delta(error_message="second", error_code=500, error_count=1))
    assert (merged.error_message, merged.error_code) == ("first", 400)


def test_merge_replaces_other_fields_when_given() -> None:
    merged = full(total=10, scroll_start_ms=1).merge(
        delta(total=12, scroll_end_ms=9, query_limit_reached=True, action="other")
    )
    assert (merged.total, merged.scroll_start_ms, merged.scroll_end_ms) == (12, 1, 9)
    assert merged.query_limit_reached is True and merged.action == "other"
    assert merged.username == "ann" and merged.delta is False


def test_merge_result_replaces_or_adds_up() -> None:
    merged = full(result={"path": "/a", "exported": "2"}).merge(
        delta(result={"path": "/b", "+exported": "3", "+new": "1"})
    )
    assert merged.result == {"path": "/b", "exported": "5", "new": "1"}


def test_merge_completes_when_everything_is_processed_or_skipped() -> None:
    running = full(state=State.RUNNING, total=5, processed=2)
    assert running.merge(delta(processed=2)).state is State.RUNNING
    done = running.merge(delta(processed=2, skipped=1))
    assert done.state is State.COMPLETED and done.completed_ms is not None
    given = running.merge(delta(processed=3, completed_ms=42))
    assert given.completed_ms == 42


def test_merge_does_not_complete_without_a_total_or_when_aborted() -> None:
    assert full(state=State.RUNNING).merge(delta(processed=3)).state is State.RUNNING
    nothing = full(state=State.SCROLLING_RUNNING).merge(delta(state=State.COMPLETED, total=0))
    assert nothing.state is State.COMPLETED and nothing.completed_ms is not None
    aborted = full(state=State.ABORTED, total=2, completed_ms=9).merge(delta(processed=2))
    assert aborted.state is State.ABORTED and aborted.processed == 2


def test_merge_refuses_another_command() -> None:
    with pytest.raises(ValueError, match=r"cannot merge a status of command other"):
        full().merge(BulkStatus(command_id="other", delta=True))


# Ids name the job's folders (STREAMCORE_HOME/bulk/<id>) and its Delta app id: a separator or
# `..` would put its scroll and export elsewhere.
BAD_IDS = ["../../etc", "..", "/tmp/x", "a/b", "a\\b", "", " ", "x y", ".hidden", "é", "a" * 129]


@pytest.mark.parametrize("bad", BAD_IDS)
def test_command_ids_are_uuids_or_safe_slugs(bad: str) -> None:
    from streamcore.bulk import BulkParamsError
    from streamcore.bulk.model import check_command_id

    with pytest.raises(BulkParamsError, match="a command id is a UUID or a slug") as caught:
        check_command_id(bad)
    assert caught.value.field == "command_id"
    command = BulkCommand(
        id=ID, action="trash", query="true", username="ann", bucket_size=1, batch_size=1
    )
    with pytest.raises(BulkParamsError, match="a command id is"):
        BulkCommand.from_datum({**command.to_datum(), "id": bad})


def test_good_command_ids() -> None:
    from streamcore.bulk.model import check_command_id

    for good in (ID, "cmd-1", "nightly_2026-01-01", "A" * 128):
        assert check_command_id(good) == good
