"""A recovery run from a request of plain fields (`streamcore.recovery.actions`, what the DAG
streamcore_recovery's tasks call) and its text (`streamcore.recovery.report`): the refusals name
the field before anything changes, a dry run changes nothing, an applied move leaves its audit
entry; the DAG's end-to-end test (tests/integration/test_airflow_dags.py) runs the same through
Airflow."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from streamcore.codecs import get_codec
from streamcore.config import load_config
from streamcore.log import LogPartition, open_log_manager
from streamcore.names import Name
from streamcore.record import Record
from streamcore.recovery import (
    Recovery,
    SelectionError,
    check_request,
    render_report,
    run_action,
)

# The DAG's Param defaults.
DEFAULTS: dict[str, Any] = {
    "action": "list",
    "stream": None,
    "group": None,
    "offsets": None,
    "reset_to": "end",
    "reset_value": None,
    "partition": None,
    "queue": None,
    "job_id": None,
    "older_than_s": 604800,
    "reason": "",
    "force": False,
    "dry_run": True,
}
ORDERS = {"stream": "app/orders", "group": "enrich"}


def request(**fields: Any) -> dict[str, Any]:
    return {**DEFAULTS, **fields}


@pytest.fixture
def recovery(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Recovery]:
    monkeypatch.delenv("STREAMCORE_OUTBOX_URL", raising=False)
    config = load_config(home=tmp_path / "home")
    with open_log_manager(config) as manager:
        manager.create("app/orders", 1)
        with manager.appender("app/orders", get_codec("avro")) as appender:
            for n in range(3):
                appender.append(f"o{n}", Record(f"o{n}", b"x", n))
        manager.commit_position(LogPartition.of(Name.of("app/orders"), 0), "enrich", 1)
    with Recovery(config, principal="ops") as recovery:
        yield recovery


def test_requests_refused_before_the_logs() -> None:
    with pytest.raises(SelectionError, match=r"needs a reason \(Param reason\)"):
        check_request(request(action="redrive", dry_run=False))
    with pytest.raises(SelectionError, match="action outbox-retry needs the Param queue"):
        check_request(request(action="outbox-retry"))
    check_request(request(action="outbox-purge"))  # every queue
    check_request(request(action="list", dry_run=False))  # a listing changes nothing
    check_request(request(action="reset", dry_run=False, reason=" replay "))


def test_position_moves(recovery: Recovery) -> None:
    refusals = [
        (request(action="skip", stream="app/orders", group="nobody", offsets="0:1"), "'nobody'"),
        (request(action="reset", **ORDERS, reset_to="offset"), "reset_to offset needs reset_value"),
        (request(action="reset", stream="app/orders"), "action reset needs the Param group"),
        (request(action="skip", **ORDERS), "action skip needs the Param offsets"),
        (request(action="list"), "the dead-letter actions run through jobs/recovery.py"),
    ]
    for fields, message in refusals:
        with pytest.raises(SelectionError, match=message):
            run_action(recovery, fields)

    preview = request(action="reset", **ORDERS, reset_to="start")
    out = run_action(recovery, preview)
    assert out["rows"][0]["before"] == 1 and out["rows"][0]["after"] == 0
    assert out["audit_event_id"] is None
    assert recovery.manager.committed("app/orders", "enrich") == [1]
    report = render_report(preview, "task", out)
    assert report.startswith("action          reset (dry run)\nengine          task\n")
    assert "partition  before  after  end  re-read  skipped" in report
    assert report.splitlines()[-1].startswith("        0       1      0")
    assert "audit entry     none (nothing changed)" in report

    applied = request(action="reset", **ORDERS, reset_to="offset", reset_value="0:2")
    out = run_action(recovery, {**applied, "dry_run": False, "reason": "replay"})
    assert out["audit_event_id"] and out["summary"]["skipped"] == 1
    assert recovery.manager.committed("app/orders", "enrich") == [2]


def test_outbox_actions(recovery: Recovery) -> None:
    errors = run_action(recovery, request(action="outbox-errors", queue=" audit/entries "))
    assert errors == {
        "action": "outbox-errors",
        "dry_run": True,
        "summary": {"queue": "audit/entries", "errors": 0},
        "rows": [],
    }
    purge = request(action="outbox-purge", older_than_s=0)
    out = run_action(recovery, purge)
    assert out["action"] == "outbox-purge" and out["dry_run"] is True
    report = render_report(purge, "task", out)
    assert report.splitlines() == [
        "action        outbox-purge (dry run)",
        "engine        task",
        "queue         None",
        "older_than_s  0.0",
        "purged        0",
        "audit entry   none (nothing changed)",
        "",
        "job  tries  error",
        "---  -----  -----",
    ]


def test_dead_letter_reports() -> None:
    listed = {"selected": 8, "output": "/x/listings/r1", "by_error": [
        {"error_type": "ValueError", "records": 4},
    ]}  # fmt: skip
    report = render_report(request(action="list"), "process", listed)
    assert report.splitlines()[:4] == [
        "action       list (dry run)",
        "engine       process",
        "selected     8",
        "listing      /x/listings/r1",
    ]
    assert "ValueError" in report and "error class  records" in report
    redriven = {"selected": 7, "redriven": 4, "targets": {"app/in": 4}, "audit_event_id": "e1"}
    report = render_report(request(action="redrive", dry_run=False), "spark", redriven)
    assert "engine       spark" in report and "redriven     4" in report
    assert "audit entry  e1" in report and "app/in" in report
