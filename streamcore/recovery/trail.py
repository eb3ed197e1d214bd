"""The audit trail of recovery: one audit entry per action that changed something.

Entries go through the audit API (`streamcore.audit.publish`: the outbox, then the relay to
`audit/entries`, then the audit job to the Delta `audit` table), with `category = "recovery"`,
the operator as `principal`, the reason as `comment`, and what changed in `extended` (strings:
stream, group, counts, and the before / after positions as JSON).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from typing import Any

from streamcore.audit import AuditEntry

__all__ = ["EVENT_TYPES", "audit_entry"]

# Known to the audit job and to publish (streamcore.audit.rules.KNOWN_EVENT_TYPES).
EVENT_TYPES = {
    "redrive": "recoveryRedrive",
    "skip": "recoverySkip",
    "reset": "recoveryReset",
    "outbox-retry": "recoveryOutboxRetry",
    "outbox-purge": "recoveryOutboxPurge",
}


def audit_entry(
    action: str, *, principal: str, reason: str, details: Mapping[str, Any]
) -> AuditEntry:
    """The entry for `action` (a key of `EVENT_TYPES`); `details` values that are not strings
    are stored as JSON."""
    extended = {
        key: value if isinstance(value, str) else json.dumps(value, sort_keys=True)
        for key, value in details.items()
    }
    return AuditEntry(
        event_id=str(uuid.uuid4()),
        event_type=EVENT_TYPES[action],
        category="recovery",
        event_date=int(time.time() * 1000),
        principal=principal,
        comment=reason,
        extended=extended,
    )
