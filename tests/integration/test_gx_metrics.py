"""Great Expectations given the metrics of the row-check pass (jobs/spark/quality/gx_metrics.py,
gx_engine.py) gives the same results as GX computing every metric itself: every expectation type
of the Document suite and more, with bad rows of each, nulls, a row condition, and expectations
GX still computes alone."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from streamcore.codecs import SchemaStore
from streamcore.config import load_config

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]
DOCUMENT = "org.streamcore.importer.Document"

# Besides the Document suite (generated + include/expectations/Document.json): the other types
# Expectation.failure() models, and ones GX computes alone (unmodelled kwarg, other types).
EXTRA = [
    ("expect_column_values_to_be_null", {"column": "description", "row_condition": "type = 'Folder'", "condition_parser": "spark"}),  # noqa: E501
    ("expect_column_values_to_not_be_in_set", {"column": "creator", "value_set": ["root"]}),
    ("expect_column_values_to_not_match_regex", {"column": "title", "regex": "^tmp"}),
    ("expect_column_values_to_be_between", {"column": "blobSize", "min_value": 1}),
    ("expect_column_value_lengths_to_be_between", {"column": "creator", "min_value": 2, "max_value": 20}),  # noqa: E501
    ("expect_column_values_to_be_in_set", {"column": "type", "value_set": ["File", "Note"], "mostly": 0.5}),  # noqa: E501
    ("expect_column_pair_values_a_to_be_greater_than_b", {"column_A": "modified", "column_B": "created"}),  # noqa: E501
    ("expect_column_values_to_be_between", {"column": "blobSize", "min_value": 0, "max_value": 100, "strict_min": True}),  # noqa: E501
    # GX raises on this one (min_value > max_value): it must with the precomputed counts too.
    ("expect_column_values_to_be_between", {"column": "blobSize", "min_value": 5, "max_value": 2}),
    ("expect_column_values_to_be_unique", {"column": "id"}),
    ("expect_table_row_count_to_be_between", {"min_value": 1, "max_value": 1000}),
]  # fmt: skip


def _ts(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def _doc(i: int, **changes: Any) -> dict[str, Any]:
    doc = {
        "id": f"{i:08x}-0000-4000-8000-000000000000",
        "parentPath": "/ws",
        "type": "File",
        "title": f"doc {i}",
        "description": None,
        "language": "en_US",
        "creator": "alice",
        "created": 1_700_000_000_000,
        "modified": 1_700_000_100_000,
        "properties": {"k": "v"},
        "blobName": "a.pdf",
        "blobSize": 10,
    }
    doc.update(changes)
    doc["created"] = doc["created"] if doc["created"] is None else _ts(doc["created"])
    doc["modified"] = doc["modified"] if doc["modified"] is None else _ts(doc["modified"])
    return doc


def _docs() -> list[dict[str, Any]]:
    bad = [
        _doc(100, id="not-a-uuid"),
        _doc(101, id=None),
        _doc(102, parentPath="ws/no-slash"),
        _doc(103, parentPath="/" + "p" * 5000),
        _doc(104, type="Zip"),
        _doc(105, type=None),  # the row condition type = 'File' is null: not in its domain
        _doc(106, title=""),
        _doc(107, title="t" * 1100),
        _doc(108, title="tmp draft"),
        _doc(109, language="de_DE"),
        _doc(110, language=None),
        _doc(111, creator="bad user!"),
        _doc(112, creator="root"),
        _doc(113, creator="x"),
        _doc(114, creator=None),
        _doc(115, created=None),
        _doc(116, modified=None),
        _doc(117, modified=1_600_000_000_000),  # before created
        _doc(118, modified=1_700_000_000_000),  # equal: fails the strict pair only
        _doc(119, created=None, modified=None),  # both null: out of the pairs' domain
        _doc(120, properties=None),
        _doc(121, blobName=None),  # a File without blob
        _doc(122, type="Note", blobName=None, blobSize=None),  # fine
        _doc(123, blobSize=-5),
        _doc(124, blobSize=0),
        _doc(125, blobSize=2_000_000_000_000),
        _doc(126, type="Folder", description="has one"),
        _doc(127, type="Folder", blobName=None, blobSize=None),
        _doc(1, title="duplicate id"),
    ]
    # Enough failing rows of one expectation for SUMMARY to cut its list at 20 values.
    many = [_doc(200 + i, language="xx", creator=f"u{i} !") for i in range(25)]
    return [_doc(i) for i in range(1, 30)] + bad + many


def _suite(store: SchemaStore) -> Any:
    from jobs.spark.quality.expectations import Expectation, Suite, load_suite

    suite = load_suite(store.by_name(DOCUMENT))
    return Suite(suite.name, suite.expectations + [Expectation(t, k, "test") for t, k in EXTRA])


def _frame(spark: Any, store: SchemaStore, docs: list[dict[str, Any]]) -> Any:
    """The documents as decoded payloads, nullable columns (bad rows have nulls anywhere)."""
    from pyspark.sql.types import StructField, StructType

    from jobs.spark.logs.avro import spark_schema

    schema = spark_schema(spark, store.by_name(DOCUMENT))
    nullable = StructType([StructField(f.name, f.dataType, True) for f in schema.fields])
    return spark.createDataFrame(docs, nullable)


def _by_expectation(report: Any) -> dict[tuple[str, str], Any]:
    out = {}
    for item in report.results:
        config = item.expectation_config
        kwargs = {k: v for k, v in config.kwargs.items() if k != "batch_id"}
        out[(config.type, repr(sorted(kwargs.items())))] = item
    return out


def _assert_same(given: Any, alone: Any) -> None:
    summary = ("success", "evaluated", "failed")
    assert [getattr(given, k) for k in summary] == [getattr(alone, k) for k in summary]
    ours, theirs = _by_expectation(given), _by_expectation(alone)
    assert ours.keys() == theirs.keys()
    for key, item in theirs.items():
        mine = ours[key]
        assert mine.success == item.success, key
        assert _no_traceback(mine.exception_info) == _no_traceback(item.exception_info), key
        assert mine.result == item.result, key  # counts, percents, value lists, queries


def _no_traceback(info: Any) -> Any:
    """Exception info without the tracebacks (the engine adds a frame)."""
    if isinstance(info, dict):
        return {k: _no_traceback(v) for k, v in info.items() if k != "exception_traceback"}
    return info


_RAISING = "column_values.between"  # the metric of the expectation GX raises on


def _unasked(answers: Any) -> set[str]:
    """The metrics prepared for GX that it did not ask, but those of the expectation it fails
    before asking (its condition raises)."""
    raising = {f"{_RAISING}.unexpected_count", f"{_RAISING}.unexpected_values"}
    unasked = [k for k in answers.prepared if k not in answers.answered]
    assert len([k for k in unasked if k.metric_name in raising]) <= 2
    return {k.metric_name for k in unasked} - raising


@pytest.fixture
def answers(monkeypatch) -> list[Any]:
    """The `Answers` of each validation, to check that GX asked for every prepared metric."""
    from jobs.spark.quality import gx_engine

    seen: list[Any] = []
    real = gx_engine.answering

    def spy(answers: Any) -> Any:
        seen.append(answers)
        return real(answers)

    monkeypatch.setattr(gx_engine, "answering", spy)
    return seen


@pytest.mark.parametrize("result_format", ["SUMMARY", "COMPLETE", "BASIC", "BOOLEAN_ONLY"])
def test_precomputed_metrics_give_gx_results(
    spark, tmp_path: Path, answers: list[Any], result_format: str
) -> None:
    from jobs.spark.quality.gx_metrics import compute_metrics, modelled
    from jobs.spark.quality.validation import validate

    store = SchemaStore(load_config().schemas_dir)
    suite = _suite(store)
    assert {e.type for e in suite.expectations if not modelled(e)} == {
        "expect_column_values_to_be_of_type",
        "expect_column_values_to_be_between",  # the strict_min one
        "expect_column_values_to_be_unique",
        "expect_table_row_count_to_be_between",
    }
    df = _frame(spark, store, _docs()).cache()
    counts = compute_metrics(df, suite).counts
    assert all(c["unexpected"] for i, c in counts.items() if suite.expectations[i].origin == "test")

    alone = validate(
        df, suite, tmp_path / "gx", run_name="alone", result_format=result_format, precompute=False
    )
    given = validate(df, suite, tmp_path / "gx", run_name="given", result_format=result_format)
    _assert_same(given, alone)
    assert alone.success is False and alone.metrics_given == 0
    # GX fails the expectation it cannot evaluate, with or without the precomputed counts.
    errors = [r for r in given.results if "cannot be greater than" in str(r.exception_info)]
    assert [r.expectation_config.kwargs["min_value"] for r in errors] == [5.0]
    # GX took every count and value list of the modelled expectations from the aggregate (the
    # metric ids matched), and computed fewer metrics itself.
    (used,) = answers
    assert len(used.expectations) == len(counts)
    assert _unasked(used) == set() and len(used.answered) > len(counts)
    assert given.metrics_computed < alone.metrics_computed or alone.metrics_computed == 0


def test_metrics_of_the_row_check_pass_skip_undecodable_rows(
    spark, tmp_path: Path, answers: list[Any]
) -> None:
    """The importer's pass: the metrics of the rows that decoded, with the row counts."""
    from pyspark.sql import functions as F

    from jobs.spark.quality.expectations import failure_counts
    from jobs.spark.quality.gx_metrics import check_aggregates
    from jobs.spark.quality.validation import validate

    store = SchemaStore(load_config().schemas_dir)
    suite = _suite(store)
    good = _frame(spark, store, _docs()).withColumn("broken", F.lit(False))
    junk = _frame(spark, store, [_doc(900, id=None, type=None)] * 3)
    frame = good.unionByName(junk.withColumn("broken", F.lit(True))).cache()
    undecodable = F.col("broken")

    checks = check_aggregates(suite, also=undecodable)
    counts, metrics = checks.read(frame.agg(*checks.columns).first().asDict())
    assert counts == failure_counts(frame, suite, also=undecodable)
    assert counts["*"] == 3
    decoded = frame.where(~undecodable).drop("broken")
    given = validate(decoded, suite, tmp_path / "gx", run_name="pass", metrics=metrics)
    alone = validate(decoded, suite, tmp_path / "gx", run_name="alone", precompute=False)
    _assert_same(given, alone)
    assert _unasked(answers[0]) == set()


def test_too_many_failing_rows_leave_the_value_lists_to_gx(
    spark, tmp_path: Path, monkeypatch, answers: list[Any]
) -> None:
    from jobs.spark.quality import gx_metrics
    from jobs.spark.quality.validation import validate

    store = SchemaStore(load_config().schemas_dir)
    suite = _suite(store)
    df = _frame(spark, store, _docs()).cache()
    alone = validate(df, suite, tmp_path / "gx", run_name="alone", precompute=False)
    monkeypatch.setattr(gx_metrics, "SAMPLE_ROWS", 5)
    capped = validate(df, suite, tmp_path / "gx", run_name="capped")
    _assert_same(capped, alone)
    # The counts came from the aggregate, the value lists of the failing ones from GX.
    used = answers[0]
    unasked = {k.metric_name for k in used.prepared if k not in used.answered}
    unasked.discard(f"{_RAISING}.unexpected_count")
    assert unasked and {n.rsplit(".", 1)[1] for n in unasked} == {"unexpected_values"}
