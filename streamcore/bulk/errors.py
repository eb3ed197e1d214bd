"""Errors of `streamcore.bulk`. Messages name the command, action, field or query part at fault
and say what to do about it."""

from __future__ import annotations

from streamcore.errors import StreamcoreError

__all__ = [
    "BulkDatumError",
    "BulkError",
    "BulkParamsError",
    "BulkQueryError",
    "CommandNotFoundError",
    "ExclusiveActionError",
    "NotAbortableError",
    "StatusMismatchError",
    "UnknownActionError",
]


class BulkError(StreamcoreError):
    """Base of the bulk errors: a command, an action or the command store is not as asked."""

    retryable = False


class BulkQueryError(BulkError, ValueError):
    """A query is not a Spark SQL boolean predicate over the repository's columns, built only
    from what `streamcore.bulk.query` allows."""


class BulkParamsError(BulkError, ValueError):
    """An action's params do not fit its JSON schema (`field` is the path at fault, "" for the
    whole object), or a size or limit given to `submit` is out of range."""

    def __init__(self, message: str, field: str = "") -> None:
        super().__init__(message)
        self.field = field


class UnknownActionError(BulkError, LookupError):
    """No action of that name is registered."""


class ExclusiveActionError(BulkError):
    """An exclusive action already has an unfinished command on the repository
    (`running` is its id)."""

    retryable = True

    def __init__(self, message: str, running: str) -> None:
        super().__init__(message)
        self.running = running


class CommandNotFoundError(BulkError, LookupError):
    """No command of that id is stored."""


class NotAbortableError(BulkError):
    """The command completed: there is nothing left to abort."""


class StatusMismatchError(BulkError, ValueError):
    """A status delta was merged into the status of another command: merge only the statuses of
    one command."""


class BulkDatumError(BulkError, TypeError):
    """A command or status datum holds a value of a type its field cannot take (a time that is
    neither epoch milliseconds nor a datetime): the message names the value."""
