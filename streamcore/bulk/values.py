"""The values a bulk query's named placeholders (`:retention_days`) may take, checked in one place
for `check_query` and for the schedules of the configuration, which must not import sqlglot (a
DAG file parses them).

Spark replaces `${env:NAME}`, `${system:...}`, `${spark:...}` and the like in the text of the SQL
it parses, string literals included, so a string holding `${` would read the job's environment
and configuration. sqlglot writes a float nan or inf as a bare word, which Spark reads as a
column name.
"""

from __future__ import annotations

import math

__all__ = ["VARIABLE", "VARIABLE_FIX", "value_problem"]


# What Spark's variable substitution looks for (`${name}`, `${prefix:name}`).
VARIABLE = "${"
VARIABLE_FIX = (
    "Spark would replace it with a variable of the job (its environment or configuration) "
    "before running the query; to compare with these characters, write them apart, e.g. "
    "concat('$', '{name}')"
)


def value_problem(value: object) -> str | None:
    """Why `value` cannot be bound into a query (to follow its name), or None: a value is a
    boolean, a finite number or a string without `${`."""
    if isinstance(value, bool | int):
        return None
    if isinstance(value, float):
        return None if math.isfinite(value) else f"is {value!r}; a number value must be finite"
    if isinstance(value, str):
        return None if VARIABLE not in value else f"holds `${{` ({value!r:.80}): {VARIABLE_FIX}"
    return f"is {value!r}; a value is a boolean, a number or a string"
