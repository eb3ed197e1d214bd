"""Scheduled bulk actions from the configuration (`streamcore.bulk.schedules`), and the named
placeholders their values bind into queries (`check_query(values=...)`)."""

from __future__ import annotations

import tomllib
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from streamcore.bulk import BulkQueryError, check_query
from streamcore.bulk.schedules import schedules_for
from streamcore.config import StreamcoreConfig, load_config
from streamcore.errors import ConfigError

ROOT = Path(__file__).resolve().parents[3]


def config(text: str) -> StreamcoreConfig:
    return StreamcoreConfig(home=Path("."), table=tomllib.loads(text))


def test_the_shipped_example() -> None:
    (example,) = schedules_for(load_config(ROOT / "include" / "streamcore.toml"))
    assert (example.name, example.dag_id) == ("trash_old_notes", "streamcore_bulk_trash_old_notes")
    assert (example.schedule.cron, example.schedule.period) == ("0 2 * * *", timedelta(days=1))
    assert (example.action, example.values, example.params) == ("trash", {"retention_days": 30}, {})
    bound = check_query(example.query, values=example.values)
    assert bound == "type = 'Note' AND modified < DATE_ADD(CURRENT_DATE, 30 * -1)"


def test_no_schedules() -> None:
    assert schedules_for(config("")) == []


GOOD = """
[bulk.schedules.nightly]
schedule = "0 3 * * *"
action = "setProperties"
query = "type = :kind"
params = {properties = {reviewed = "no"}}
bucket_size = 1000
[bulk.schedules.nightly.values]
kind = "Note"
"""


def test_a_schedule_with_every_key() -> None:
    (schedule,) = schedules_for(config(GOOD))
    assert schedule.params == {"properties": {"reviewed": "no"}}
    assert (schedule.bucket_size, schedule.batch_size, schedule.query_limit) == (1000, None, None)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (GOOD.replace("nightly", "Nightly-1"), "lowercase letters, digits and _"),
        (GOOD.replace('action = "setProperties"\n', ""), "missing action"),
        (GOOD.replace("bucket_size", "bucket"), "unknown key(s) bucket"),
        (GOOD.replace('"0 3 * * *"', '"*/7 * * * *"'), "bulk.schedules.nightly.schedule"),
        (GOOD.replace('query = "type = :kind"', 'query = ""'), "query must be a non-empty"),
        (GOOD.replace("bucket_size = 1000", 'bucket_size = "big"'), "bucket_size must be an int"),
        (GOOD.replace('kind = "Note"', "kind = [1]"), "values must be a table of booleans"),
        (GOOD.replace("params = {properties", "params = 3 #"), "params must be a table"),
        ('[bulk]\nschedules = "nightly"\n', "must hold tables"),
        # TOML's nan and inf: sqlglot would write them as bare words, which Spark reads as
        # columns.
        (GOOD.replace('kind = "Note"', "kind = nan"), "values.kind is nan"),
        (GOOD.replace('kind = "Note"', "kind = inf"), "values.kind is inf"),
        (GOOD.replace('kind = "Note"', "kind = -inf"), "values.kind is -inf"),
        (GOOD.replace('kind = "Note"', 'kind = "${env:KAFKA_PASSWORD}"'), "values.kind holds"),
    ],
)
def test_bad_schedules_are_refused_with_the_key(text: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        schedules_for(config(text))
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("values", "sql"),
    [
        ({"t": "it's"}, "title = 'it\\'s'"),
        ({"t": "x' OR 1=1 --"}, "title = 'x\\' OR 1=1 --'"),  # a literal, never SQL
        ({"t": 7}, "title = 7"),
        ({"t": True}, "title = TRUE"),
    ],
)
def test_named_placeholders_bind_as_literals(values: dict[str, Any], sql: str) -> None:
    assert check_query("title = :t", values=values) == sql


def test_placeholders_without_a_value_are_refused() -> None:
    with pytest.raises(BulkQueryError, match=r":t, which has no value \(values given: u\)"):
        check_query("title = :t", values={"u": 1})
    with pytest.raises(BulkQueryError):
        check_query("title = ?", values={"u": 1})
