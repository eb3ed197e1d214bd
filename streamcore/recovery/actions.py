"""A recovery run from a request: the action and its fields as a form gives them (the Params of
the DAG streamcore_recovery, docs/recovery.md), text as a person typed it.

    request = {"action": "reset", "stream": "app/orders", "group": "enrich",
               "reset_to": "date", "reset_value": "2026-11-24T08:00:00Z", "partition": None,
               "reason": "replay", "dry_run": True, "force": False}
    check_request(request)                            # refusals that need no log
    with Recovery(config, principal="ops") as recovery:
        out = run_action(recovery, request)           # Outcome.to_dict(), or the errors listing

The dead-letter actions (`DEAD_LETTER_ACTIONS`) take their selection through jobs/recovery.py's
arguments, which scale to Spark; `run_action` runs the others: `skip` and `reset` through
`Recovery.skip` / `Recovery.reset`, the outbox actions through `Recovery.outbox_*`. A request
that does not fit raises `SelectionError` naming the field (`RecoveryError` for the rest), before
anything changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from streamcore.recovery.errors import SelectionError
from streamcore.recovery.targets import parse_offset, parse_reset_target

if TYPE_CHECKING:
    from streamcore.recovery.service import Outcome, Recovery

__all__ = [
    "DEAD_LETTER_ACTIONS",
    "RECOVERY_ACTIONS",
    "check_request",
    "field_text",
    "move_group",
    "run_action",
]

DEAD_LETTER_ACTIONS = ("list", "redrive")  # the ones that scale with the dead-letter streams
RECOVERY_ACTIONS = (
    *DEAD_LETTER_ACTIONS,
    "skip",
    "reset",
    "outbox-errors",
    "outbox-retry",
    "outbox-purge",
)


def field_text(request: Mapping[str, Any], name: str) -> Any:
    """The field `name` with its text stripped; None for a missing or blank one."""
    value = request.get(name)
    return value.strip() or None if isinstance(value, str) else value


def _required(request: Mapping[str, Any], name: str, needed: bool = True) -> str:
    value = field_text(request, name)
    if needed and value is None:
        raise SelectionError(f"action {request['action']} needs the Param {name}")
    return value or ""


def check_request(request: Mapping[str, Any]) -> None:
    """What a request must hold whatever the logs say: a reason when it changes something, and
    the queue an outbox action works on (all queues for a purge)."""
    action = request["action"]
    changes = action not in ("list", "outbox-errors")
    if changes and not request["dry_run"] and not field_text(request, "reason"):
        raise SelectionError("a run that changes something needs a reason (Param reason)")
    if action.startswith("outbox-"):
        _required(request, "queue", action != "outbox-purge")


def move_group(recovery: Recovery, request: Mapping[str, Any], *, dry_run: bool) -> Outcome:
    """Run (or preview) a `skip` (past the record at `offsets`, one `P:O`) or a `reset` (to
    `reset_to` with `reset_value`, on `partition` or all) of `group` on `stream`."""
    stream, group = _required(request, "stream"), _required(request, "group")
    reason = field_text(request, "reason") or ""
    if request["action"] == "skip":
        partition, offset = parse_offset(_required(request, "offsets"), None, "offsets")
        return recovery.skip(
            stream, group, partition, offset,
            reason=reason, dry_run=dry_run, force=request["force"],
        )  # fmt: skip
    target, partitions = parse_reset_target(
        request["reset_to"],
        field_text(request, "reset_value"),
        partition=request.get("partition"),
        option="reset_value",
    )
    return recovery.reset(
        stream, group, target,
        reason=reason, partitions=partitions, dry_run=dry_run, force=request["force"],
    )  # fmt: skip


def _outbox_action(recovery: Recovery, request: Mapping[str, Any]) -> dict[str, Any]:
    action, dry_run = request["action"], bool(request["dry_run"])
    reason = field_text(request, "reason") or ""
    if action == "outbox-errors":
        errors = recovery.outbox_errors(_required(request, "queue"))
        rows = [
            {"id": e.id, "tries": e.tries, "error": f"{e.error_type}: {e.error_message}"}
            for e in errors
        ]
        summary = {"queue": field_text(request, "queue"), "errors": len(rows)}
        return {"action": action, "dry_run": dry_run, "summary": summary, "rows": rows}
    if action == "outbox-retry":
        outcome = recovery.outbox_retry(
            _required(request, "queue"),
            reason=reason,
            job_id=field_text(request, "job_id"),
            dry_run=dry_run,
        )
    else:
        outcome = recovery.outbox_purge(
            older_than_s=float(request["older_than_s"]),
            reason=reason,
            queue=field_text(request, "queue"),
            dry_run=dry_run,
        )
    return outcome.to_dict()


def run_action(recovery: Recovery, request: Mapping[str, Any]) -> dict[str, Any]:
    """Run a position or outbox action (a dry run when `request["dry_run"]`): what it did, as
    `Outcome.to_dict()` (the outbox errors: their listing)."""
    action = request["action"]
    if action in ("skip", "reset"):
        return move_group(recovery, request, dry_run=bool(request["dry_run"])).to_dict()
    if action.startswith("outbox-"):
        return _outbox_action(recovery, request)
    raise SelectionError(
        f"action {action!r}: run_action runs {', '.join(RECOVERY_ACTIONS[2:])}; the dead-letter "
        "actions run through jobs/recovery.py"
    )
