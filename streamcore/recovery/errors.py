"""Errors of the recovery tools: every one names the problem and the fix."""

from __future__ import annotations

from streamcore.errors import StreamcoreError

__all__ = [
    "LedgerBusyError",
    "LiveMembersError",
    "ReadStalledError",
    "RecoveryError",
    "SelectionError",
]


class RecoveryError(StreamcoreError):
    """A recovery action refused before it changed anything."""

    retryable = False


class SelectionError(RecoveryError, ValueError):
    """The selection (stream, offsets, filter, group, target position) does not fit the logs."""


class LiveMembersError(RecoveryError):
    """The group has live members, which would overwrite or race a moved position."""

    retryable = True


class ReadStalledError(RecoveryError):
    """A partition holding records below the end of a read gave none for too long (a slow or
    unreachable broker)."""

    retryable = True


class LedgerBusyError(RecoveryError):
    """Another redrive holds the ledger's claim on a dead-letter stream this one selects."""

    retryable = True
