"""GX's Spark execution engine, answering the metrics of `jobs.spark.quality.gx_metrics` from the
row-check pass instead of running Spark jobs for them; GX computes every other metric as usual.

GX builds the engine of a Spark data source itself (`SparkDatasource.get_execution_engine`), so
the subclass is installed as the data sources' engine class; without answers set in the current
context (`answering`) it is GX's engine unchanged. The metric ids are the ones GX's validator
derives from each expectation (`get_validation_dependencies`, the same code path): a metric GX
asks under another id (another GX version, an unmodelled kwarg) is simply computed by GX.
Answers are only given when GX asks, i.e. after the metric's own dependencies resolved, so an
expectation GX cannot evaluate (e.g. min_value > max_value) still fails in GX as it would.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from great_expectations.constants import MAX_RESULT_RECORDS
from great_expectations.datasource.fluent.spark_datasource import SparkDatasource
from great_expectations.execution_engine import SparkDFExecutionEngine
from great_expectations.expectations.expectation_configuration import ExpectationConfiguration
from great_expectations.validator.metric_configuration import MetricConfiguration

__all__ = ["AnsweringSparkEngine", "Answers", "answering", "metric_values"]

_MISSING = object()


@dataclass
class Answers:
    """Metric values by the name GX's expectation gives them (`table.row_count`,
    `column_values.in_set.unexpected_count`...), per expectation configuration; a callable value
    is called with the `MetricConfiguration` GX asks. `prepared`: the values by metric id, once GX
    asked for metrics; `answered`: the ids GX got from here; `computed`: how many it computed."""

    expectations: list[tuple[ExpectationConfiguration, dict[str, Any]]]
    prepared: dict[Any, Any] | None = None
    answered: set[Any] = field(default_factory=set)
    computed: int = 0

    def by_id(self, engine: SparkDFExecutionEngine, runtime_configuration: dict | None) -> dict:
        if self.prepared is None:  # the validator's runtime configuration comes with the metrics
            self.prepared = {}
            batch_id = engine.batch_manager.active_batch_id
            for config, values in self.expectations:
                config = copy.deepcopy(config)
                if batch_id:
                    config.kwargs["batch_id"] = batch_id
                needs = config.to_domain_obj().get_validation_dependencies(
                    execution_engine=engine, runtime_configuration=runtime_configuration
                )
                for name, metric in needs.metric_configurations.items():
                    if name in values:
                        self.prepared[metric.id] = values[name]
        return self.prepared


_ANSWERS: ContextVar[Answers | None] = ContextVar("gx_answers", default=None)


class AnsweringSparkEngine(SparkDFExecutionEngine):
    """GX's Spark engine that takes the metrics the row-check pass already knows from the answers
    set by `answering`, and has GX compute the rest."""

    def resolve_metrics(
        self,
        metrics_to_resolve: Iterable[MetricConfiguration],
        metrics: dict | None = None,
        runtime_configuration: dict | None = None,
    ) -> dict:
        answers = _ANSWERS.get()
        if answers is None:
            return super().resolve_metrics(metrics_to_resolve, metrics, runtime_configuration)
        known = answers.by_id(self, runtime_configuration)
        resolved: dict = {}
        rest = []
        for metric in metrics_to_resolve:
            value = known.get(metric.id, _MISSING)
            if callable(value):
                value = value(metric)
            if value is _MISSING:
                rest.append(metric)
            else:
                resolved[metric.id] = value
        answers.answered.update(resolved)
        answers.computed += len(rest)
        if rest:  # (GX returns all of `metrics` when given nothing to resolve)
            resolved.update(super().resolve_metrics(rest, metrics, runtime_configuration))
        return resolved


@contextmanager
def answering(answers: Answers) -> Iterator[Answers]:
    """GX validations run in this context take their metrics from `answers` where they can."""
    SparkDatasource.execution_engine_override = AnsweringSparkEngine
    token = _ANSWERS.set(answers)
    try:
        yield answers
    finally:
        _ANSWERS.reset(token)


def metric_values(
    config: ExpectationConfiguration,
    counts: dict[str, int],
    values: Callable[[], list[Any] | None],
) -> dict[str, Any]:
    """The GX metrics of one expectation from its `FrameMetrics` counts; `values()` gives all its
    unexpected values in the frame's order, or None if they were not collected."""
    m = config.to_domain_obj().map_metric
    out: dict[str, Any] = {
        "table.row_count": counts["rows"],
        f"{m}.unexpected_count": counts["unexpected"],
    }
    if "nulls" in counts:
        out["column_values.nonnull.unexpected_count"] = counts["nulls"]
    if "filtered" in counts:
        out[f"{m}.filtered_row_count"] = counts["filtered"]

    def listed(metric: MetricConfiguration) -> Any:
        found = values()
        if found is None:
            return _MISSING
        fmt = metric.metric_value_kwargs["result_format"]
        limit = MAX_RESULT_RECORDS
        if fmt["result_format"] != "COMPLETE":
            limit = min(fmt["partial_unexpected_count"], MAX_RESULT_RECORDS)
        return found[:limit]

    out[f"{m}.unexpected_values"] = listed if counts["unexpected"] else []
    return out
