"""Great Expectations validation of a DataFrame against a `Suite`, with Data Docs.

The GX project lives under `STREAMCORE_HOME/gx` (file mode), so every run's results accumulate
and the Data Docs site (`.../data_docs/local_site/index.html`) shows the history. GX computes
its metrics with Spark on the DataFrame it is given, except the ones of the row-level
expectations: those come from one aggregate (`jobs.spark.quality.gx_metrics`, ideally computed in
the row-check pass) and GX's engine is handed them (`jobs.spark.quality.gx_engine`); GX still
evaluates the expectations, stores the results and renders the Data Docs. With the Document suite,
GX then runs no Spark job at all: what it computes itself comes from the frame's schema.
"""

from __future__ import annotations

import functools
import importlib
import logging
import os
import threading
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame

from jobs.spark.quality.expectations import Suite
from jobs.spark.quality.gx_metrics import FrameMetrics

__all__ = ["RESULT_FORMATS", "ValidationReport", "preload", "validate"]

logger = logging.getLogger(__name__)


@dataclass
class ValidationReport:
    """What the job summary says about a validation."""

    success: bool
    evaluated: int
    failed: dict[str, int | None] = field(default_factory=dict)  # expectation → unexpected rows
    data_docs: str | None = None
    # GX's ExpectationValidationResults, and how many metrics came precomputed / GX computed.
    results: list[Any] = field(default_factory=list, repr=False)
    metrics_given: int = 0
    metrics_computed: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "success": self.success,
            "evaluated_expectations": self.evaluated,
            "failed_expectations": sorted(self.failed),
            "unexpected_counts": {k: v for k, v in sorted(self.failed.items())},
        }


RESULT_FORMATS = ("BOOLEAN_ONLY", "BASIC", "SUMMARY", "COMPLETE")
DOCS_INDEX_RUNS = 100  # runs listed on the Data Docs index page (`_bound_docs_index`)


def preload() -> None:
    """Import Great Expectations in a background thread. The import takes 2.5 to
    4.5 s, a fixed cost of every validating job; started once the SparkSession is up, it overlaps
    the Spark jobs that run before the validation (the thread holds the GIL only while Python
    runs; the driver mostly waits on the JVM). Call it after the session is built: the main
    thread's own heavy imports are then done, and two threads importing the same packages at
    once is what can trip Python's import-deadlock detection. A failed import here is ignored:
    `validate` imports again and raises it."""

    def load() -> None:
        os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
        try:
            importlib.import_module("great_expectations.checkpoint")
        except Exception as exc:  # validate() raises it where the job can report it
            logger.debug("preloading Great Expectations failed: %s", exc)

    threading.Thread(target=load, name="gx-preload", daemon=True).start()


def validate(
    df: DataFrame,
    suite: Suite,
    gx_root: Path,
    *,
    run_name: str,
    result_format: str = "SUMMARY",
    metrics: FrameMetrics | None = None,
    precompute: bool = True,
) -> ValidationReport:
    """Validate `df` with GX and update the Data Docs under `gx_root`. `result_format` is GX's:
    SUMMARY (default) gives unexpected counts and examples in the Data Docs; BOOLEAN_ONLY only
    pass/fail. `metrics` are the `gx_metrics` of exactly `df` (e.g. from `check_aggregates` in
    a pass over it), else one aggregate computes them; `precompute=False` lets GX compute every
    metric itself (slower, same results)."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    import great_expectations as gx

    gx_root.mkdir(parents=True, exist_ok=True)
    ctx = gx.get_context(mode="file", project_root_dir=str(gx_root))
    _quiet_progress(ctx)
    _bound_docs_index(ctx)
    with warnings.catch_warnings():
        # String row conditions (condition_parser="spark") are deprecated for GX 2.0; they are
        # what the suite files hold and they still work in 1.x, but GX warns each time it reads
        # them back (once per expectation and run): noise in every job log.
        warnings.filterwarnings(
            "ignore",
            message="(The condition_parser parameter|Passing a string to the row_condition "
            "parameter) is deprecated",
            category=DeprecationWarning,
        )
        gx_suite, checkpoint = _checkpoint(ctx, suite, result_format)
        answers = _answers(gx_suite, suite, df, metrics) if precompute else None
        if answers is None:
            result = checkpoint.run(batch_parameters={"dataframe": df}, run_id=_run_id(run_name))
        else:
            from jobs.spark.quality.gx_engine import answering

            with answering(answers):
                result = checkpoint.run(
                    batch_parameters={"dataframe": df}, run_id=_run_id(run_name)
                )
    failed: dict[str, int | None] = {}
    results = [item for run in result.run_results.values() for item in run.results]
    by_config = {_key(e.type, e.kwargs): e for e in suite.expectations}
    for item in results:
        if item.success:
            continue
        config = item.expectation_config
        mine = by_config.get(_key(config.type, config.kwargs))
        label = mine.name if mine else f"{config.type}({config.kwargs.get('column', '')})"
        failed[label] = (item.result or {}).get("unexpected_count")
    docs = [s["site_url"] for s in ctx.get_docs_sites_urls()]
    path = docs[0].removeprefix("file://") if docs else None
    report = ValidationReport(bool(result.success), len(results), failed, path, results)
    if answers is not None:
        report.metrics_given, report.metrics_computed = len(answers.answered), answers.computed
        logger.info(
            "GX metrics: %d from the row checks, %d computed by GX",
            report.metrics_given,
            report.metrics_computed,
        )
    return report


def _checkpoint(ctx: Any, suite: Suite, result_format: str) -> tuple[Any, Any]:
    """The stored suite and checkpoint (with its validation definition, data source, asset and
    batch definition) of `suite`, saved again only when they changed: saving all of them each
    run costs about 0.2 s of GX serialization, and a new batch definition id each run made the
    validation definition and checkpoint change every time."""
    import great_expectations as gx
    from great_expectations.checkpoint import UpdateDataDocsAction
    from great_expectations.datasource.fluent.spark_datasource import SparkDatasource

    source = ctx.data_sources.all().get("spark")
    if not isinstance(source, SparkDatasource):
        source = ctx.data_sources.add_or_update_spark("spark")
    asset_name = f"{suite.name}-frames"
    asset = next((a for a in source.assets if a.name == asset_name), None)
    if asset is None:
        asset = source.add_dataframe_asset(asset_name)
    batch_def = next((b for b in asset.batch_definitions if b.name == "whole"), None)
    if batch_def is None:
        batch_def = asset.add_batch_definition_whole_dataframe("whole")
    # Given to the constructor: `add_expectation` on a suite already in the store writes the
    # whole suite back at each call (1.4 s for 31 expectations). Duplicates are dropped, as
    # `add_expectation` would.
    unique: dict[tuple[str, str], Any] = {}
    for e in suite.expectations:
        unique.setdefault(_key(e.type, e.kwargs), e)
    fresh = gx.ExpectationSuite(suite.name, [e.to_gx() for e in unique.values()])
    gx_suite = _saved(
        ctx.suites, suite.name, lambda found: _configs(found) == _configs(fresh), lambda: fresh
    )
    definition = _saved(
        ctx.validation_definitions,
        f"{suite.name}-validation",
        lambda found: (found.suite.id, found.data.id) == (gx_suite.id, batch_def.id),
        lambda: gx.ValidationDefinition(
            data=batch_def, suite=gx_suite, name=f"{suite.name}-validation"
        ),
    )
    checkpoint = _saved(
        ctx.checkpoints,
        f"{suite.name}-checkpoint",
        lambda found: (
            found.result_format == result_format
            and [v.id for v in found.validation_definitions] == [definition.id]
            and [type(a) for a in found.actions] == [UpdateDataDocsAction]
        ),
        lambda: gx.Checkpoint(
            name=f"{suite.name}-checkpoint",
            validation_definitions=[definition],
            actions=[UpdateDataDocsAction(name="data-docs")],
            result_format=result_format,
        ),
    )
    return gx_suite, checkpoint


def _saved(factory: Any, name: str, same: Any, build: Any) -> Any:
    """`factory`'s stored `name` if `same(it)`, else `build()` added or updated."""
    from great_expectations.exceptions import DataContextError

    try:
        found = factory.get(name)
    except DataContextError:
        found = None
    return found if found is not None and same(found) else factory.add_or_update(build())


def _configs(gx_suite: Any) -> list[tuple[Any, ...]]:
    return [(c.type, c.kwargs, c.notes) for c in gx_suite.expectation_configurations]


def _bound_docs_index(ctx: Any) -> None:
    """List the newest `DOCS_INDEX_RUNS` runs on the Data Docs index page. GX reads back every
    result the index lists (about 4.5 ms each with the Document suite), so an unbounded index
    makes each run's Data Docs update grow with the history: 0.5 s at 100 runs, about 5 s at
    1,000. Older result pages and stored results stay where they are."""
    sites = ctx.variables.data_docs_sites or {}  # (a copy: set it back, in memory only)
    for site in sites.values():
        index = site.setdefault("site_index_builder", {"class_name": "DefaultSiteIndexBuilder"})
        index.setdefault("validation_results_limit", DOCS_INDEX_RUNS)
    ctx.variables.data_docs_sites = sites


def _answers(gx_suite: Any, suite: Suite, df: DataFrame, metrics: FrameMetrics | None) -> Any:
    """What the engine answers: each modelled expectation's metrics, by GX configuration."""
    from jobs.spark.quality.gx_engine import Answers, metric_values
    from jobs.spark.quality.gx_metrics import compute_metrics, unexpected_values

    if metrics is None:
        metrics = compute_metrics(df, suite)
    index = {_key(e.type, e.kwargs): i for i, e in enumerate(suite.expectations)}
    # One query of the failing rows serves every failing expectation, if GX asks for values.
    sample = functools.cache(lambda: unexpected_values(df, suite, metrics))
    expectations = []
    for config in gx_suite.expectation_configurations:
        i = index.get(_key(config.type, config.kwargs))
        if i in metrics.counts:

            def values(i: int = i) -> list[Any] | None:
                found = sample()
                return None if found is None else found[i]

            expectations.append((config, metric_values(config, metrics.counts[i], values)))
    return Answers(expectations)


def _key(type_: str, kwargs: dict[str, Any]) -> tuple[str, str]:
    """An expectation's identity, the same for ours and GX's stored configuration (which holds
    the bounds of expect_column_values_to_be_between as floats)."""
    kwargs = {k: _number(v) for k, v in kwargs.items() if k != "batch_id"}
    return type_, repr(sorted(_comparable(kwargs).items()))


def _number(value: Any) -> Any:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else value


def _comparable(kwargs: dict[str, Any]) -> dict[str, Any]:
    out = dict(kwargs)
    condition = out.get("row_condition")
    if isinstance(condition, dict):  # GX stores a parsed form
        out["row_condition"] = condition.get("pass_through_filter")
    out.pop("condition_parser", None)
    out.pop("notes", None)
    return {k: v for k, v in out.items() if v is not None}


def _run_id(run_name: str) -> Any:
    from great_expectations.core.run_identifier import RunIdentifier

    return RunIdentifier(run_name=run_name)


def _quiet_progress(ctx: Any) -> None:
    """GX draws tqdm progress bars on stderr for every metric: noise in job logs."""
    try:
        from great_expectations.data_context.types.base import ProgressBarsConfig

        ctx.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
    except (ImportError, AttributeError, TypeError) as exc:
        logger.debug("cannot turn GX progress bars off: %s", exc)
