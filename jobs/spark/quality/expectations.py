"""Expectation suites of Avro payloads: generated from the schema, plus the hand-written ones of
`include/expectations/<Name>.json`, and their row-level conditions as Spark predicates.

Generated from each field of the schema:
* a non-nullable field: `expect_column_values_to_not_be_null`;
* its Spark type: `expect_column_values_to_be_of_type` (primitive types);
* an enum: `expect_column_values_to_be_in_set` (the symbols);
* custom attributes: `minimum`/`maximum` → `expect_column_values_to_be_between`,
  `maxLength` → `expect_column_value_lengths_to_be_between`, `pattern` →
  `expect_column_values_to_match_regex`.

Row-level expectations also have a Spark predicate (`Expectation.failure()`), so one pass over the
data finds each row's failed expectations for the quarantine, while Great Expectations validates
the same DataFrame for the report (`jobs.spark.quality.validation`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property, reduce
from pathlib import Path
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from streamcore.codecs import ParsedSchema
from streamcore.config import project_root
from streamcore.errors import ConfigError

__all__ = [
    "EXPECTATIONS_DIR",
    "Expectation",
    "Suite",
    "any_failure",
    "failed_expectations",
    "failure_aggregates",
    "failure_counts",
    "load_suite",
    "read_failure_counts",
]

EXPECTATIONS_DIR = project_root() / "include" / "expectations"
_SPARK_TYPES = {
    "string": "StringType",
    "long": "LongType",
    "int": "IntegerType",
    "boolean": "BooleanType",
    "double": "DoubleType",
    "float": "FloatType",
    "bytes": "BinaryType",
}
_LOGICAL_TYPES = {"timestamp-millis": "TimestampType", "timestamp-micros": "TimestampType"}


@dataclass(frozen=True)
class Expectation:
    """One expectation: its GX type (snake case), kwargs, and where it came from."""

    type: str
    kwargs: dict[str, Any]
    origin: str = "schema"
    notes: str = ""

    @property
    def name(self) -> str:
        """Stable label used in quarantine rows and summaries, e.g.
        `expect_column_values_to_not_be_null(id)`."""
        columns = [
            str(self.kwargs[k]) for k in ("column", "column_A", "column_B") if k in self.kwargs
        ]
        label = f"{self.type}({', '.join(columns)})"
        condition = self.kwargs.get("row_condition")
        return f"{label} where {condition}" if condition else label

    def failure(self) -> Column | None:
        """A Spark predicate true for the rows that break this expectation; None if the
        expectation is about the whole table (types, row counts...). Built once: each is a few
        py4j calls, and a landing asks for its suite's about five times (the suite's
        `row_level`, the first pass, GX's metrics, the quarantine), which cost 1.9 s of driver
        time before the first pass for the Document suite."""
        return self._failure

    @cached_property
    def _failure(self) -> Column | None:
        k = self.kwargs
        column = F.col(k["column"]) if "column" in k else None
        broken: Column | None = None
        if self.type == "expect_column_values_to_not_be_null":
            broken = column.isNull()
        elif self.type == "expect_column_values_to_be_null":
            broken = column.isNotNull()
        elif self.type == "expect_column_values_to_be_in_set":
            broken = column.isNotNull() & ~column.isin(list(k["value_set"]))
        elif self.type == "expect_column_values_to_not_be_in_set":
            broken = column.isNotNull() & column.isin(list(k["value_set"]))
        elif self.type == "expect_column_values_to_be_between":
            broken = column.isNotNull() & _outside(column, k)
        elif self.type == "expect_column_value_lengths_to_be_between":
            broken = column.isNotNull() & _outside(F.length(column), k)
        elif self.type == "expect_column_values_to_match_regex":
            broken = column.isNotNull() & ~column.rlike(k["regex"])
        elif self.type == "expect_column_values_to_not_match_regex":
            broken = column.isNotNull() & column.rlike(k["regex"])
        elif self.type == "expect_column_pair_values_a_to_be_greater_than_b":
            a, b = F.col(k["column_A"]), F.col(k["column_B"])
            ok = (a >= b) if k.get("or_equal") else (a > b)
            broken = a.isNotNull() & b.isNotNull() & ~ok
        if broken is None:
            return None
        condition = k.get("row_condition")
        if condition:
            broken = F.expr(condition) & broken
        return F.coalesce(broken, F.lit(False))

    def to_gx(self) -> Any:
        import great_expectations as gx

        cls_name = "".join(part.capitalize() for part in self.type.split("_"))
        cls = getattr(gx.expectations, cls_name, None)
        if cls is None:
            raise ConfigError(
                f"unknown expectation type {self.type!r}; use a Great Expectations 1.x core "
                "expectation name such as expect_column_values_to_not_be_null"
            )
        return cls(**self.kwargs, notes=self.notes or None)


def _outside(value: Column, k: dict[str, Any]) -> Column:
    tests = []
    if k.get("min_value") is not None:
        tests.append(value < F.lit(k["min_value"]))
    if k.get("max_value") is not None:
        tests.append(value > F.lit(k["max_value"]))
    return reduce(lambda x, y: x | y, tests) if tests else F.lit(False)


@dataclass(frozen=True)
class Suite:
    """The expectations of one payload schema."""

    name: str
    expectations: list[Expectation] = field(default_factory=list)

    @property
    def row_level(self) -> list[Expectation]:
        return [e for e in self.expectations if e.failure() is not None]


def generate_expectations(schema: ParsedSchema) -> list[Expectation]:
    """The expectations the schema implies (see the module docstring)."""
    out: list[Expectation] = []
    for fld in schema.raw["fields"]:
        name, ftype = fld["name"], fld["type"]
        nullable = isinstance(ftype, list) and "null" in ftype
        inner = next(t for t in ftype if t != "null") if isinstance(ftype, list) else ftype
        if not nullable:
            out.append(Expectation("expect_column_values_to_not_be_null", {"column": name}))
        spark_type = _spark_type(inner)
        if spark_type:
            out.append(
                Expectation(
                    "expect_column_values_to_be_of_type", {"column": name, "type_": spark_type}
                )
            )
        if isinstance(inner, dict) and inner.get("type") == "enum":
            out.append(
                Expectation(
                    "expect_column_values_to_be_in_set",
                    {"column": name, "value_set": list(inner["symbols"])},
                )
            )
        if "minimum" in fld or "maximum" in fld:
            out.append(
                Expectation(
                    "expect_column_values_to_be_between",
                    {
                        "column": name,
                        "min_value": fld.get("minimum"),
                        "max_value": fld.get("maximum"),
                    },
                )
            )
        if "maxLength" in fld:
            out.append(
                Expectation(
                    "expect_column_value_lengths_to_be_between",
                    {"column": name, "min_value": 0, "max_value": int(fld["maxLength"])},
                )
            )
        if "pattern" in fld:
            out.append(
                Expectation(
                    "expect_column_values_to_match_regex", {"column": name, "regex": fld["pattern"]}
                )
            )
    return out


def _spark_type(avro_type: Any) -> str | None:
    if isinstance(avro_type, dict):
        logical = avro_type.get("logicalType")
        if logical in _LOGICAL_TYPES:
            return _LOGICAL_TYPES[logical]
        if avro_type.get("type") == "enum":
            return "StringType"
        return None
    return _SPARK_TYPES.get(avro_type)


def load_suite(schema: ParsedSchema, directory: Path | None = None) -> Suite:
    """The suite of `schema`: generated expectations plus `<directory>/<Name>.json` if present
    (`ConfigError` naming the file if it is malformed)."""
    directory = directory or EXPECTATIONS_DIR
    short = (schema.fullname or "payload").rsplit(".", 1)[-1]
    expectations = generate_expectations(schema)
    path = directory / f"{short}.json"
    if path.is_file():
        try:
            spec = json.loads(path.read_text())
            for item in spec.get("expectations", []):
                expectations.append(
                    Expectation(
                        item["type"], dict(item["kwargs"]), "hand-written", item.get("notes", "")
                    )
                )
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(
                f"{path} is not a valid expectation file ({exc}); each entry needs 'type' and "
                "'kwargs'"
            ) from exc
        declared = spec.get("schema")
        if declared and declared != schema.fullname:
            raise ConfigError(f"{path} is for schema {declared}, not {schema.fullname}; rename it")
    return Suite(short, expectations)


def failed_expectations(suite: Suite) -> Column:
    """An array<string> column: the names of the row-level expectations each row fails.

    `array_compact` is an interpreted expression: apply it to the failing rows only."""
    checks = [F.when(e.failure(), F.lit(e.name)) for e in suite.row_level]
    if not checks:
        return F.array().cast("array<string>")
    return F.array_compact(F.array(*checks))


def any_failure(suite: Suite) -> Column:
    """True for a row that fails at least one row-level expectation (compiled, cheap)."""
    checks = [e.failure() for e in suite.row_level]
    return reduce(lambda a, b: a | b, checks) if checks else F.lit(False)


def failure_counts(df: DataFrame, suite: Suite, *, also: Column | None = None) -> dict[str, int]:
    """In one pass over `df`: `rows`, and the number of rows failing each row-level expectation
    (by name). `also` is one more failure predicate (e.g. "the payload did not decode"), counted
    as `"*"`; rows it holds for are not checked against the expectations. `"failing"` is the
    number of rows failing anything."""
    row = df.agg(*failure_aggregates(suite, also=also)).first()
    return read_failure_counts(row.asDict(), suite, also=also)


def failure_aggregates(suite: Suite, *, also: Column | None = None) -> list[Column]:
    """The aggregates of `failure_counts`, for a pass that computes more (`read_failure_counts`
    reads them back from its row)."""
    aggregates = [F.count(F.lit(1)).alias("rows")]
    for i, e in enumerate(suite.row_level):
        broken = e.failure() if also is None else (~also & e.failure())
        aggregates.append(F.sum(broken.cast("long")).alias(f"e{i}"))
    failing = any_failure(suite) if also is None else (any_failure(suite) | also)
    aggregates.append(F.sum(failing.cast("long")).alias("failing"))
    if also is not None:
        aggregates.append(F.sum(also.cast("long")).alias("also"))
    return aggregates


def read_failure_counts(
    row: Mapping[str, Any], suite: Suite, *, also: Column | None = None
) -> dict[str, int]:
    counts = {"rows": int(row["rows"]), "failing": int(row["failing"] or 0)}
    if also is not None:
        counts["*"] = int(row["also"] or 0)
    for i, e in enumerate(suite.row_level):
        counts[e.name] = counts.get(e.name, 0) + int(row[f"e{i}"] or 0)
    return counts
