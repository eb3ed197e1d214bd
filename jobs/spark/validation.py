"""Great Expectations validation of a DataFrame against a `Suite`, with Data Docs.

The GX project lives under `STREAMCORE_HOME/gx` (file mode), so every run's results accumulate
and the Data Docs site (`.../data_docs/local_site/index.html`) shows the history. GX computes
the metrics with Spark on the DataFrame it is given; cache that DataFrame first.
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame

from jobs.spark.expectations import Suite

__all__ = ["RESULT_FORMATS", "ValidationReport", "preload", "validate"]

logger = logging.getLogger(__name__)


@dataclass
class ValidationReport:
    """What the job summary says about a validation."""

    success: bool
    evaluated: int
    failed: dict[str, int | None] = field(default_factory=dict)  # expectation → unexpected rows
    data_docs: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "success": self.success,
            "evaluated_expectations": self.evaluated,
            "failed_expectations": sorted(self.failed),
            "unexpected_counts": {k: v for k, v in sorted(self.failed.items())},
        }


RESULT_FORMATS = ("BOOLEAN_ONLY", "BASIC", "SUMMARY", "COMPLETE")


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
    df: DataFrame, suite: Suite, gx_root: Path, *, run_name: str, result_format: str = "SUMMARY"
) -> ValidationReport:
    """Validate `df` with GX and update the Data Docs under `gx_root`. `result_format` is GX's:
    SUMMARY (default) gives unexpected counts and examples in the Data Docs; BOOLEAN_ONLY only
    pass/fail, about twice as fast (fewer metrics, each one Spark job)."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    import great_expectations as gx
    from great_expectations.checkpoint import UpdateDataDocsAction

    gx_root.mkdir(parents=True, exist_ok=True)
    ctx = gx.get_context(mode="file", project_root_dir=str(gx_root))
    _quiet_progress(ctx)
    source = ctx.data_sources.add_or_update_spark("spark")
    asset_name = f"{suite.name}-frames"
    asset = next((a for a in source.assets if a.name == asset_name), None)
    if asset is None:
        asset = source.add_dataframe_asset(asset_name)
    batch_def = next((b for b in asset.batch_definitions if b.name == "whole"), None)
    if batch_def is None:
        batch_def = asset.add_batch_definition_whole_dataframe("whole")
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
        gx_suite = gx.ExpectationSuite(suite.name)
        for expectation in suite.expectations:
            gx_suite.add_expectation(expectation.to_gx())
        gx_suite = ctx.suites.add_or_update(gx_suite)
        definition = ctx.validation_definitions.add_or_update(
            gx.ValidationDefinition(data=batch_def, suite=gx_suite, name=f"{suite.name}-validation")
        )
        checkpoint = ctx.checkpoints.add_or_update(
            gx.Checkpoint(
                name=f"{suite.name}-checkpoint",
                validation_definitions=[definition],
                actions=[UpdateDataDocsAction(name="data-docs")],
                result_format=result_format,
            )
        )
        result = checkpoint.run(batch_parameters={"dataframe": df}, run_id=_run_id(run_name))
    failed: dict[str, int | None] = {}
    evaluated = 0
    by_config = {
        (e.type, repr(sorted(_comparable(e.kwargs).items()))): e for e in suite.expectations
    }
    for run in result.run_results.values():
        for item in run.results:
            evaluated += 1
            if item.success:
                continue
            config = item.expectation_config
            kwargs = {k: v for k, v in config.kwargs.items() if k != "batch_id"}
            mine = by_config.get((config.type, repr(sorted(_comparable(kwargs).items()))))
            label = mine.name if mine else f"{config.type}({kwargs.get('column', '')})"
            failed[label] = (item.result or {}).get("unexpected_count")
    docs = [s["site_url"] for s in ctx.get_docs_sites_urls()]
    path = docs[0].removeprefix("file://") if docs else None
    return ValidationReport(bool(result.success), evaluated, failed, path)


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
