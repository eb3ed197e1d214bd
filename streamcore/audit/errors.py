"""Errors of `streamcore.audit`. Messages name the entry, the field and the fix."""

from __future__ import annotations

from streamcore.errors import StreamcoreError

__all__ = ["AuditError", "InvalidAuditEntryError"]


class AuditError(StreamcoreError):
    """Base of the audit errors: the audit queue or stream is not set up as publishing needs."""

    retryable = False


class InvalidAuditEntryError(AuditError, ValueError):
    """An entry does not fit `include/schemas/AuditEntry.avsc` (a missing event id or date, a
    wrong type, an unknown field, a value its `pattern` / `maxLength` refuses). Raised before
    anything is written, so a bad entry never reaches the outbox or the log. `field` is the
    field at fault (None when several are unknown)."""

    def __init__(self, message: str, field: str | None) -> None:
        super().__init__(message)
        self.field = field
