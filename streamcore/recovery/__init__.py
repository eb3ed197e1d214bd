"""Recovery (docs/recovery.md): see what failed and repair it safely, with an audit trail.

- `Recovery`: dead letters (list, redrive), group positions (skip a poison record, reset with a
  preview), outbox errors (list, retry, purge); every change has a dry run, refuses what does not
  fit the logs before it changes anything, and writes an audit entry.
- `DeadLetterFilter`, `scan_dead_letters`, `error_counts`: the dead letters of the `*/dlq-*`
  streams.
- `ResetTarget`, `plan_skip`, `plan_reset`: position moves, computed and checked, then applied.
- `RedriveLedger`: which dead letters were redriven, so a rerun does not redrive them again.
"""

from __future__ import annotations

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
from streamcore.recovery.positions import (
    PositionMove,
    PositionPlan,
    ResetTarget,
    plan_reset,
    plan_skip,
)
from streamcore.recovery.redrive import RedriveResult, redrive
from streamcore.recovery.service import Outcome, Recovery

__all__ = [
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
    "dlq_streams",
    "error_counts",
    "plan_reset",
    "plan_skip",
    "redrive",
    "scan_dead_letters",
]
