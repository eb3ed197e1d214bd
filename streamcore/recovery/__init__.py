"""Recovery (docs/recovery.md): see what failed and repair it safely, with an audit trail.

- `Recovery`: dead letters (list, redrive), group positions (skip a poison record, reset with a
  preview), outbox errors (list, retry, purge); every change has a dry run, refuses what does not
  fit the logs before it changes anything, and writes an audit entry.
- `DeadLetterFilter`, `scan_dead_letters`, `error_counts`: the dead letters of the `*/dlq-*`
  streams.
- `ResetTarget`, `plan_skip`, `plan_reset`: position moves, computed and checked, then applied.
- `parse_offset`, `parse_date_ms`, `parse_reset_target`: positions as people write them
  (`streamcore.recovery.targets`), for every face that takes them as text.
- `RedriveLedger`: which dead letters were redriven, so a rerun does not redrive them again.
- `check_request`, `run_action`, `move_group`: a run from a request of plain fields (the recovery
  DAG's Params), as the DAG's tasks call them (`streamcore.recovery.actions`), and
  `render_report`, its text for the summary task's log.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from streamcore.lazy_exports import lazy_exports

if TYPE_CHECKING:
    # What __getattr__ hands out, for type checkers.
    from streamcore.recovery.actions import (
        DEAD_LETTER_ACTIONS,
        RECOVERY_ACTIONS,
        check_request,
        field_text,
        move_group,
        run_action,
    )
    from streamcore.recovery.deadletters import (
        DeadLetterEntry,
        DeadLetterFilter,
        dlq_streams,
        error_counts,
        scan_dead_letters,
    )
    from streamcore.recovery.errors import (
        LedgerBusyError,
        LiveMembersError,
        ReadStalledError,
        RecoveryError,
        SelectionError,
    )
    from streamcore.recovery.ledger import RedriveLedger
    from streamcore.recovery.positions import PositionMove, PositionPlan, plan_reset, plan_skip
    from streamcore.recovery.redrive import RedriveResult
    from streamcore.recovery.report import render_report
    from streamcore.recovery.service import Outcome, Recovery
    from streamcore.recovery.targets import (
        RESET_TO,
        ResetTarget,
        parse_date_ms,
        parse_offset,
        parse_reset_target,
    )

# Exports are imported on first use (PEP 562): a DAG file takes `RESET_TO` for its Params when
# Airflow parses it, without the SQL engine and the logs the repairs need.
_EXPORTS = {
    "DEAD_LETTER_ACTIONS": "actions",
    "RECOVERY_ACTIONS": "actions",
    "check_request": "actions",
    "field_text": "actions",
    "move_group": "actions",
    "run_action": "actions",
    "DeadLetterEntry": "deadletters",
    "DeadLetterFilter": "deadletters",
    "dlq_streams": "deadletters",
    "error_counts": "deadletters",
    "scan_dead_letters": "deadletters",
    "LedgerBusyError": "errors",
    "LiveMembersError": "errors",
    "ReadStalledError": "errors",
    "RecoveryError": "errors",
    "SelectionError": "errors",
    "RedriveLedger": "ledger",
    "PositionMove": "positions",
    "PositionPlan": "positions",
    "plan_reset": "positions",
    "plan_skip": "positions",
    "RedriveResult": "redrive",
    "render_report": "report",
    "Outcome": "service",
    "Recovery": "service",
    "RESET_TO": "targets",
    "ResetTarget": "targets",
    "parse_date_ms": "targets",
    "parse_offset": "targets",
    "parse_reset_target": "targets",
}
__all__ = [  # written out for the linters; equal to _EXPORTS (tests/unit/recovery)
    "DEAD_LETTER_ACTIONS",
    "RECOVERY_ACTIONS",
    "RESET_TO",
    "DeadLetterEntry",
    "DeadLetterFilter",
    "LedgerBusyError",
    "LiveMembersError",
    "Outcome",
    "PositionMove",
    "PositionPlan",
    "ReadStalledError",
    "Recovery",
    "RecoveryError",
    "RedriveLedger",
    "RedriveResult",
    "ResetTarget",
    "SelectionError",
    "check_request",
    "dlq_streams",
    "error_counts",
    "field_text",
    "move_group",
    "parse_date_ms",
    "parse_offset",
    "parse_reset_target",
    "plan_reset",
    "plan_skip",
    "render_report",
    "run_action",
    "scan_dead_letters",
]


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
