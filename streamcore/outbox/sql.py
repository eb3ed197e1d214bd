"""Running the hot statements at the driver level.

Claims and `done` run once per batch on every worker: SQLAlchemy's statement compilation and
caching cost more there than SQLite's work itself. These statements are written once with
`:name` parameters and rewritten for the driver's style (psycopg: `%(name)s`); both drivers
take a dict of parameters. Everything else goes through SQLAlchemy Core as usual.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

_NAMED = re.compile(r"(?<![:\w]):(\w+)")


@functools.lru_cache(maxsize=256)
def _for_driver(sql: str, paramstyle: str) -> str:
    if paramstyle == "pyformat":
        return _NAMED.sub(r"%(\1)s", sql.replace("%", "%%"))
    return sql


def execute(conn: sa.Connection, sql: str, params: dict[str, Any]) -> Any:
    """Run `sql` (`:name` parameters) with `params`; returns the driver's cursor result."""
    return conn.exec_driver_sql(_for_driver(sql, conn.dialect.paramstyle), params)


def in_list(name: str, values: Sequence[Any], params: dict[str, Any]) -> str:
    """`(:name0, :name1, ...)` for `values`, added to `params`."""
    marks = []
    for n, value in enumerate(values):
        params[f"{name}{n}"] = value
        marks.append(f":{name}{n}")
    return "(" + ", ".join(marks) + ")"
