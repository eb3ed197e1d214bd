"""What starts a submitted bulk command, without Airflow (docs/bulk.md, "Dispatch").

Every command runs in one run of the Airflow DAG `streamcore_bulk_action` (its runner,
`<dag id>/<run id>`, claimed in the command store: `BulkService.claim`). A DAG run that submits
its own command (the bulk DAG triggered with an action and a query, a scheduled action) claims
it as it stores it. Any other command (`streamcore bulk submit`, `BulkService.submit` from a
program) is claimed by the dispatcher DAG `streamcore_bulk_dispatch`, every
`dispatch_interval`, which then triggers the bulk DAG with the command's id as the run id
`bulk__<id>`: Airflow creates a run id once, so a command is never started twice, even by a
dispatcher that stopped between its claim and the trigger and is offered again.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import timedelta

from streamcore.config import StreamcoreConfig, load_config, parse_duration_ms
from streamcore.errors import ConfigError

__all__ = [
    "BULK_DAG_ID",
    "DISPATCH_DAG_ID",
    "dispatch_interval",
    "dispatch_run_id",
    "dispatched_runner",
    "runner",
]


BULK_DAG_ID = "streamcore_bulk_action"
DISPATCH_DAG_ID = "streamcore_bulk_dispatch"
DISPATCH_INTERVAL = "30s"
_SHORTEST = timedelta(seconds=5)
_INTERVAL_ENV = "STREAMCORE_BULK_DISPATCH_INTERVAL"


def runner(dag_id: str, run_id: str) -> str:
    """The runner name of a DAG run, as the command store keeps it."""
    return f"{dag_id}/{run_id}"


def dispatch_run_id(command_id: str) -> str:
    """The bulk DAG's run id for a dispatched command."""
    return f"bulk__{command_id}"


def dispatched_runner(command_id: str) -> str:
    """The runner the dispatcher claims a command for."""
    return runner(BULK_DAG_ID, dispatch_run_id(command_id))


def dispatch_interval(config: StreamcoreConfig | None = None) -> timedelta:
    """`[bulk] dispatch_interval` (`STREAMCORE_BULK_DISPATCH_INTERVAL`; default 30 s): how often
    the dispatcher looks for commands to start, at least 5 s. `ConfigError` naming the key."""
    config = config or load_config()
    bulk = config.table.get("bulk", {})
    configured = bulk.get("dispatch_interval") if isinstance(bulk, Mapping) else None
    value = os.environ.get(_INTERVAL_ENV) or configured or DISPATCH_INTERVAL
    interval = timedelta(milliseconds=parse_duration_ms(value, "bulk.dispatch_interval"))
    if interval < _SHORTEST:
        raise ConfigError(
            f"bulk.dispatch_interval is {value!r}: give at least 5s (each dispatch is an "
            "Airflow DAG run), e.g. '30s'"
        )
    return interval
