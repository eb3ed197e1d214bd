"""The counts Great Expectations derives its results from, computed by Spark aggregates that ride
along the row-check pass instead of by GX's own Spark jobs.

GX validates a Spark frame with one Spark job per metric and expectation (the unexpected values,
the column-pair counts) plus one aggregate per domain, about as long as reading and decoding the
batch. For the row-level expectations whose GX meaning `Expectation.failure()` reproduces, every
data metric GX asks is one of: the rows of the domain (`table.row_count`, after the
row_condition), the nulls of the column, the rows failing (`unexpected_count`), the rows where
either column of a pair is set (`filtered_row_count`), and the unexpected values (none when
nothing fails, else read from the few failing rows). `FrameMetrics` holds those counts;
`jobs.spark.quality.gx_engine` hands them to GX, which still computes every other metric itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import reduce
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from jobs.spark.quality.expectations import (
    Expectation,
    Suite,
    failure_aggregates,
    read_failure_counts,
)

__all__ = [
    "CheckAggregates",
    "FrameMetrics",
    "check_aggregates",
    "compute_metrics",
    "modelled",
    "unexpected_values",
]

# The kwargs of each type whose GX meaning `failure()` reproduces, besides the domain and the
# ones that do not change the metrics. An expectation with any other kwarg (strict_min,
# parse_strings_as_datetimes, a suite parameter...) is left to GX.
_MODELLED = {
    "expect_column_values_to_not_be_null": set(),
    "expect_column_values_to_be_null": set(),
    "expect_column_values_to_be_in_set": {"value_set"},
    "expect_column_values_to_not_be_in_set": {"value_set"},
    "expect_column_values_to_be_between": {"min_value", "max_value"},
    "expect_column_value_lengths_to_be_between": {"min_value", "max_value"},
    "expect_column_values_to_match_regex": {"regex"},
    "expect_column_values_to_not_match_regex": {"regex"},
    "expect_column_pair_values_a_to_be_greater_than_b": {"or_equal", "ignore_row_if"},
}
_NEUTRAL = {"column", "column_A", "column_B", "row_condition", "condition_parser", "mostly"}
_NEUTRAL |= {"catch_exceptions", "meta", "result_format", "include_config"}
# At most this many failing rows are collected for the unexpected value lists; past it GX
# queries them itself (one job per failing expectation).
SAMPLE_ROWS = 10_000


def modelled(e: Expectation) -> bool:
    """True if GX's metrics of `e` can be derived from `e.failure()`."""
    k = e.kwargs
    if e.type not in _MODELLED or set(k) - _MODELLED[e.type] - _NEUTRAL:
        return False
    if k.get("row_condition") is not None and (
        not isinstance(k["row_condition"], str) or k.get("condition_parser") != "spark"
    ):
        return False
    if "value_set" in k and not isinstance(k["value_set"], list | tuple | set):
        return False
    if any(isinstance(k.get(b), dict) for b in ("min_value", "max_value", "regex")):
        return False  # a suite parameter: GX resolves it
    return k.get("ignore_row_if", "both_values_are_missing") == "both_values_are_missing"


@dataclass(frozen=True)
class FrameMetrics:
    """Per modelled expectation (its index in `suite.expectations`): `rows` of its domain,
    `unexpected` rows, and `nulls` of its column or `filtered` rows of its pair."""

    counts: dict[int, dict[str, int]]

    @property
    def failing(self) -> dict[int, int]:
        return {i: c["unexpected"] for i, c in self.counts.items() if c["unexpected"]}


class _Plan:
    """The aggregates of a suite's metrics, deduplicated (most expectations share the row count
    and many a column's null count), and which one each expectation reads. `counted`: the
    aliases of aggregates the pass already has for some expectations' unexpected rows (the
    per-expectation sums of `failure_aggregates`: evaluating the regexes twice costs about 1 s
    per million rows)."""

    def __init__(self, suite: Suite, counted: dict[int, str] | None = None) -> None:
        self.predicates: dict[str, Column] = {}
        self.aliases: dict[str, str] = {}
        self.reads: dict[int, dict[str, str]] = {}
        # A column's nulls are the unexpected rows of its expect_column_values_to_not_be_null.
        not_null = {
            (e.kwargs["column"], e.kwargs.get("row_condition")): f"unexpected {i}"
            for i, e in enumerate(suite.expectations)
            if e.type == "expect_column_values_to_not_be_null" and modelled(e)
        }
        for i, e in enumerate(suite.expectations):
            if not modelled(e):
                continue
            k = e.kwargs
            condition = k.get("row_condition")
            # GX filters the domain with the condition: a null condition drops the row.
            where = F.coalesce(F.expr(condition), F.lit(False)) if condition else F.lit(True)
            wanted = {"rows": (f"rows {condition}", where)}
            if counted and i in counted:
                self.aliases[f"unexpected {i}"] = counted[i]
                wanted["unexpected"] = (f"unexpected {i}", None)
            else:
                wanted["unexpected"] = (f"unexpected {i}", e.failure())
            if (k.get("column"), condition) in not_null:
                wanted["nulls"] = (not_null[k["column"], condition], None)
            elif "column" in k:
                null = where & F.col(k["column"]).isNull()
                wanted["nulls"] = (f"nulls {k['column']} {condition}", null)
            else:  # a pair: GX drops the rows where both are null (ignore_row_if)
                a, b = F.col(k["column_A"]), F.col(k["column_B"])
                filtered = where & (a.isNotNull() | b.isNotNull())
                wanted["filtered"] = (
                    f"filtered {k['column_A']} {k['column_B']} {condition}",
                    filtered,
                )
            for key, predicate in wanted.values():
                if predicate is not None and key not in self.predicates:
                    self.predicates[key] = predicate
                    self.aliases[key] = f"gx{len(self.predicates)}"
            self.reads[i] = {kind: key for kind, (key, _) in wanted.items()}

    def aggregates(self, keep: Column | None) -> list[Column]:
        return [
            F.sum((p if keep is None else keep & p).cast("long")).alias(self.aliases[key])
            for key, p in self.predicates.items()
        ]

    def read(self, row: Mapping[str, Any]) -> FrameMetrics:
        return FrameMetrics(
            {
                i: {kind: int(row[self.aliases[key]] or 0) for kind, key in reads.items()}
                for i, reads in self.reads.items()
            }
        )


def compute_metrics(df: DataFrame, suite: Suite) -> FrameMetrics:
    """The metrics of `df` in one aggregate (when no row-check pass computed them)."""
    plan = _Plan(suite)
    if not plan.predicates:
        return FrameMetrics({})
    return plan.read(df.agg(*plan.aggregates(None)).first())


@dataclass(frozen=True)
class CheckAggregates:
    """The aggregates of a row-check pass: `failure_counts(df, suite, also=also)` and the
    metrics of the rows `also` does not hold for (the frame the validation gets). They ride any
    pass over the rows: `df.agg(*columns)`, or `df.observe(observation, *columns)` beside another
    action; `read` turns that pass's row (or the observation's values) into both."""

    columns: list[Column]
    read: Callable[[Mapping[str, Any]], tuple[dict[str, int], FrameMetrics]]


def check_aggregates(suite: Suite, *, also: Column | None = None) -> CheckAggregates:
    position = {id(e): j for j, e in enumerate(suite.row_level)}
    counted = {
        i: f"e{position[id(e)]}" for i, e in enumerate(suite.expectations) if id(e) in position
    }
    plan = _Plan(suite, counted)
    keep = None if also is None else ~also
    return CheckAggregates(
        [*failure_aggregates(suite, also=also), *plan.aggregates(keep)],
        lambda row: (read_failure_counts(row, suite, also=also), plan.read(row)),
    )


def unexpected_values(
    df: DataFrame, suite: Suite, metrics: FrameMetrics
) -> dict[int, list[Any]] | None:
    """Every unexpected value of each failing modelled expectation, in the frame's order (what
    GX lists: the column's value, or the pair of values), from one query of the failing rows;
    None if more than `SAMPLE_ROWS` would be collected."""
    failing = metrics.failing
    if not failing:
        return {}
    if sum(failing.values()) > SAMPLE_ROWS:
        return None
    flags = {i: suite.expectations[i].failure() for i in failing}
    columns = sorted({c for i in failing for c in _columns(suite.expectations[i])})
    rows = (
        df.where(reduce(lambda a, b: a | b, flags.values()))
        .select(*columns, *(flag.alias(f"_f{i}") for i, flag in flags.items()))
        .collect()
    )
    out: dict[int, list[Any]] = {}
    for i in failing:
        names = _columns(suite.expectations[i])
        values = [tuple(r[c] for c in names) for r in rows if r[f"_f{i}"]]
        out[i] = [v[0] for v in values] if len(names) == 1 else values
    return out


def _columns(e: Expectation) -> list[str]:
    return (
        [e.kwargs["column"]]
        if "column" in e.kwargs
        else [e.kwargs["column_A"], e.kwargs["column_B"]]
    )
