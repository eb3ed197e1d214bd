"""The SQL text of jobs.spark.delta.sql and the session choice of jobs.spark.session: values
reach Delta's SQL escaped, and an `sc://` URL selects a Spark Connect session."""

from __future__ import annotations

import pytest

from jobs.spark.delta.sql import insert_columns, quoted, set_columns, sql_string, table_ref
from jobs.spark.session import remote_url


def test_paths_and_names_are_backquoted_with_backquotes_doubled() -> None:
    assert table_ref("/tmp/a`b") == "delta.`/tmp/a``b`"
    assert quoted("we`ird") == "`we``ird`"
    assert set_columns(["a", "b`"]) == "`a` = s.`a`, `b``` = s.`b```"
    assert insert_columns(["a", "b"]) == "(`a`, `b`) VALUES (s.`a`, s.`b`)"


def test_string_values_are_escaped_literals() -> None:
    assert sql_string("it's") == "'it\\'s'"
    assert sql_string("a\\' OR 1=1 --") == "'a\\\\\\' OR 1=1 --'"


def test_an_sc_url_selects_a_connect_session(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STREAMCORE_SPARK_REMOTE", raising=False)
    monkeypatch.setenv("STREAMCORE_SPARK_MASTER", "local[2]")
    assert remote_url() is None and remote_url("local[*]") is None
    assert remote_url("sc://127.0.0.1:15002") == "sc://127.0.0.1:15002"
    monkeypatch.setenv("STREAMCORE_SPARK_REMOTE", "sc://127.0.0.1:15003")
    assert remote_url() == "sc://127.0.0.1:15003"
    monkeypatch.delenv("STREAMCORE_SPARK_REMOTE")
    monkeypatch.setenv("STREAMCORE_SPARK_MASTER", "sc://127.0.0.1:15004")
    assert remote_url() == "sc://127.0.0.1:15004"
