"""Bulk actions: run an action over every document of the `repository` table that matches a
query (docs/bulk.md), mirroring Nuxeo's bulk action framework. This package is the pure-Python
side: commands, statuses and their merge, the query check, the actions and their registry, and
the command store with its service; the Spark job (jobs/bulk_action.py) runs the commands.

- `BulkService(config).submit(action, query, params, username=...)` checks and stores a command,
  and publishes it on `bulk/command`; `status`, `list`, `wait`, `abort` follow and stop it;
  the job reports through `update(command_id, delta, bucket=...)`.
- `check_query(query)` is the Spark SQL the job may filter with, or `BulkQueryError`.
- `BulkAction` is the base of actions; `actions_for(config)` the registry of the built-ins plus
  `[bulk] actions = ["module:Class"]`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from streamcore.lazy_exports import lazy_exports

if TYPE_CHECKING:
    # What __getattr__ hands out, for type checkers.
    from streamcore.bulk.actions import BulkAction as BulkAction
    from streamcore.bulk.errors import BulkDatumError as BulkDatumError
    from streamcore.bulk.errors import BulkError as BulkError
    from streamcore.bulk.errors import BulkParamsError as BulkParamsError
    from streamcore.bulk.errors import BulkQueryError as BulkQueryError
    from streamcore.bulk.errors import CommandNotFoundError as CommandNotFoundError
    from streamcore.bulk.errors import ExclusiveActionError as ExclusiveActionError
    from streamcore.bulk.errors import NotAbortableError as NotAbortableError
    from streamcore.bulk.errors import StatusMismatchError as StatusMismatchError
    from streamcore.bulk.errors import UnknownActionError as UnknownActionError
    from streamcore.bulk.messages import COMMAND_STREAM as COMMAND_STREAM
    from streamcore.bulk.messages import DONE_STREAM as DONE_STREAM
    from streamcore.bulk.messages import STATUS_STREAM as STATUS_STREAM
    from streamcore.bulk.messages import decode_command as decode_command
    from streamcore.bulk.messages import decode_status as decode_status
    from streamcore.bulk.model import BulkCommand as BulkCommand
    from streamcore.bulk.model import BulkStatus as BulkStatus
    from streamcore.bulk.model import State as State
    from streamcore.bulk.query import check_query as check_query
    from streamcore.bulk.registry import ActionRegistry as ActionRegistry
    from streamcore.bulk.registry import actions_for as actions_for
    from streamcore.bulk.service import BulkService as BulkService

# Exports are imported on first use (PEP 562): a DAG file that only lists the actions
# (`streamcore.bulk.registry`) must parse fast, without sqlglot, SQLAlchemy and the logs.
_EXPORTS = {
    "BulkAction": "actions",
    "BulkDatumError": "errors",
    "BulkError": "errors",
    "BulkParamsError": "errors",
    "BulkQueryError": "errors",
    "CommandNotFoundError": "errors",
    "ExclusiveActionError": "errors",
    "NotAbortableError": "errors",
    "StatusMismatchError": "errors",
    "UnknownActionError": "errors",
    "COMMAND_STREAM": "messages",
    "DONE_STREAM": "messages",
    "STATUS_STREAM": "messages",
    "decode_command": "messages",
    "decode_status": "messages",
    "BulkCommand": "model",
    "BulkStatus": "model",
    "State": "model",
    "check_query": "query",
    "ActionRegistry": "registry",
    "actions_for": "registry",
    "BulkService": "service",
}
__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
