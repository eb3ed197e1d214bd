"""Scheduled bulk actions, declared in the configuration so an operator adds one without Python
(docs/bulk.md, "Schedules").

Each becomes its own Airflow DAG (`streamcore_bulk_<name>`, dags/streamcore_bulk_schedules.py)
whose runs submit the same command:

    [bulk.schedules.trash_old_notes]
    doc = "Trash the Notes nobody modified for `retention_days` days."
    schedule = "0 2 * * *"                      # cron, UTC; one fixed period
    action = "trash"
    query = "type = 'Note' AND modified < date_sub(current_date(), :retention_days)"
    params = {}                                 # the action's params (optional)
    bucket_size = 100000                        # optional, as batch_size and query_limit
    [bulk.schedules.trash_old_notes.values]     # the query's :placeholders, shown as Params
    retention_days = 30

The values are the DAG's Params (a scheduled run takes them as written; a person may trigger a
run with others) and are bound into the query as literals (`check_query(values=...)`).
Here only the shape is checked, so a DAG file parses fast; the action, params and query are
checked when a run submits its command, before Spark.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from streamcore.bulk.values import value_problem
from streamcore.config import CronSchedule, StreamcoreConfig, load_config, parse_cron_schedule
from streamcore.errors import ConfigError

__all__ = ["Schedule", "schedules_for"]


_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_REQUIRED = ("schedule", "action", "query")
_OPTIONAL = ("doc", "params", "values", "bucket_size", "batch_size", "query_limit")


@dataclass(frozen=True)
class Schedule:
    """One `[bulk.schedules.<name>]` table."""

    name: str
    schedule: CronSchedule
    action: str
    query: str
    doc: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    values: dict[str, bool | int | float | str] = field(default_factory=dict)
    bucket_size: int | None = None
    batch_size: int | None = None
    query_limit: int | None = None

    @property
    def dag_id(self) -> str:
        return f"streamcore_bulk_{self.name}"


def schedules_for(config: StreamcoreConfig | None = None) -> list[Schedule]:
    """The schedules of the configuration, by name; `ConfigError` naming the key and the fix."""
    config = config or load_config()
    bulk = config.table.get("bulk", {})
    tables = bulk.get("schedules", {}) if isinstance(bulk, Mapping) else None
    if not isinstance(tables, Mapping):
        raise ConfigError("[bulk.schedules] must hold tables: [bulk.schedules.<name>]")
    return [_schedule(name, raw) for name, raw in sorted(tables.items())]


def _schedule(name: str, raw: Any) -> Schedule:
    key = f"bulk.schedules.{name}"
    if not _NAME.match(name):
        raise ConfigError(
            f"[{key}]: a schedule name is lowercase letters, digits and _ (it names the DAG "
            f"streamcore_bulk_<name>), e.g. trash_old_notes"
        )
    if not isinstance(raw, Mapping):
        raise ConfigError(f"[{key}] must be a table with {', '.join(_REQUIRED)}")
    missing = [k for k in _REQUIRED if k not in raw]
    unknown = sorted(set(raw) - {*_REQUIRED, *_OPTIONAL})
    if missing or unknown:
        raise ConfigError(
            f"[{key}]: {'missing ' + ', '.join(missing) if missing else ''}"
            f"{'; ' if missing and unknown else ''}"
            f"{'unknown key(s) ' + ', '.join(unknown) if unknown else ''}; a schedule has "
            f"{', '.join(_REQUIRED)} and optionally {', '.join(_OPTIONAL)}"
        )
    for text in ("action", "query", "doc"):
        if not isinstance(raw.get(text, ""), str) or (text != "doc" and not raw[text].strip()):
            raise ConfigError(f"{key}.{text} must be a non-empty string, got {raw.get(text)!r}")
    params, values = raw.get("params", {}), raw.get("values", {})
    if not isinstance(params, Mapping):
        raise ConfigError(f"{key}.params must be a table (the action's params), got {params!r}")
    if not isinstance(values, Mapping) or not all(
        isinstance(v, bool | int | float | str) for v in values.values()
    ):
        raise ConfigError(
            f"{key}.values must be a table of booleans, numbers and strings (the query's "
            f":placeholders), got {values!r}"
        )
    for value_name, value in values.items():
        problem = value_problem(value)
        if problem is not None:
            raise ConfigError(f"{key}.values.{value_name} {problem}")
    sizes = {}
    for size in ("bucket_size", "batch_size", "query_limit"):
        value = raw.get(size)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise ConfigError(f"{key}.{size} must be an integer, got {value!r}")
        sizes[size] = value
    return Schedule(
        name=name,
        schedule=parse_cron_schedule(raw["schedule"], f"{key}.schedule"),
        action=raw["action"].strip(),
        query=raw["query"],
        doc=raw.get("doc", ""),
        params=dict(params),
        values=dict(values),
        **sizes,
    )
