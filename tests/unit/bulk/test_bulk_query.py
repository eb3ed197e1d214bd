"""`check_query`: Spark SQL boolean predicates over the repository columns, nothing else."""

from __future__ import annotations

import pytest

from streamcore.bulk import BulkQueryError, check_query
from streamcore.bulk.columns import repository_columns


@pytest.mark.parametrize(
    ("query", "sql"),
    [
        (
            "type = 'Note' AND modified < current_timestamp() - INTERVAL 30 DAYS",
            "type = 'Note' AND modified < CURRENT_TIMESTAMP() - INTERVAL '30' DAYS",
        ),
        ("properties['dc:source'] = 'scan'", "properties['dc:source'] = 'scan'"),
        ("isTrashed", "isTrashed"),
        (
            "NOT isTrashed OR lifecycleState <> 'deleted'",
            "NOT isTrashed OR lifecycleState <> 'deleted'",
        ),
        ("type IN ('Note', 'File')", "type IN ('Note', 'File')"),
        ("blobSize BETWEEN 1 AND -2", "blobSize BETWEEN 1 AND -2"),
        ("lower(title) LIKE 'a%'", "LOWER(title) LIKE 'a%'"),
        ("description IS NOT NULL", "NOT description IS NULL"),
        ("cast(blobSize AS int) * 2 + 1 >= 3", "CAST(blobSize AS INT) * 2 + 1 >= 3"),
        ("date(modified) = current_date()", "CAST(modified AS DATE) = CURRENT_DATE"),
        ("date_sub(current_date(), 3) < created", "DATE_ADD(CURRENT_DATE, 3 * -1) < created"),
        ("coalesce(length(trim(title)), 0) > 0", "COALESCE(LENGTH(TRIM(title)), 0) > 0"),
        ("abs(round(blobSize / 2)) % 2 = 0", "ABS(ROUND(blobSize / 2)) % 2 = 0"),
        ('(type = "Note")', "(type = 'Note')"),
        ("true", "TRUE"),
        ("map_contains_key(properties, 'k')", "MAP_CONTAINS_KEY(properties, 'k')"),
    ],
)
def test_accepted(query: str, sql: str) -> None:
    assert check_query(query) == sql


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("", "the query is empty"),
        ("type = ", "is not valid Spark SQL"),
        ("type = 'a'; DROP TABLE repository", "2 statements"),
        ("DELETE FROM repository", "DELETE"),
        ("SELECT id FROM repository", "subqueries are not allowed"),
        ("id IN (SELECT id FROM repository)", "subqueries are not allowed"),
        ("EXISTS (SELECT 1)", "not allowed"),
        ("type = 'a' -- hidden", "comments are not allowed"),
        ("type = /* x */ 'a'", "comments are not allowed"),
        ("tittle = 'a'", "unknown column 'tittle' (did you mean title?)"),
        ("r.type = 'a'", "column `r.type` is qualified"),
        ("reflect('java.lang.Runtime', 'getRuntime') = 1", "function reflect is not allowed"),
        ("rand() > 0.5", "function rand is not allowed"),
        ("id IN (title)", "IN takes literals only"),
        ("title[0] = 'a'", "only reads a map column by a string key"),
        ("properties[title] = 'a'", "only reads a map column by a string key"),
        ("CAST(title AS array<string>) IS NULL", "CAST to ARRAY<STRING> is not allowed"),
        ("title = ?", "Placeholder"),
        ("title", "the query `title` is not a condition"),
        ("blobSize + 1", "is not a condition"),
        ("isTrashed AND 1", "is not a condition"),
    ],
)
def test_refused(query: str, message: str) -> None:
    with pytest.raises(BulkQueryError) as caught:
        check_query(query)
    assert message in str(caught.value)


def test_refusals_say_what_is_allowed() -> None:
    with pytest.raises(BulkQueryError, match=r"a query may use comparisons .* lower"):
        check_query("rand() > 1")


def test_columns_can_be_given() -> None:
    assert check_query("flag", {"flag": "boolean"}) == "flag"
    with pytest.raises(BulkQueryError, match="unknown column 'type'"):
        check_query("type = 'Note'", {"flag": "boolean"})


def test_repository_columns_include_the_bulk_columns() -> None:
    columns = repository_columns()
    assert columns["id"] == "string" and columns["properties"] == "map<string,string>"
    assert columns["isTrashed"] == "boolean" and columns["lifecycleState"] == "string"


# Spark replaces `${prefix:name}` in the SQL text before parsing it, string literals included:
# each prefix reads another secret (the job's environment, JVM properties, Spark and Hive confs).
SUBSTITUTIONS = [
    "${env:KAFKA_PASSWORD}",
    "${system:user.home}",
    "${spark:spark.hadoop.fs.s3a.secret.key}",
    "${sparkconf:spark.hadoop.fs.s3a.secret.key}",
    "${hiveconf:spark.app.name}",
    "${hivevar:name}",
    "${spark.app.name}",
]


@pytest.mark.parametrize("variable", SUBSTITUTIONS)
def test_variable_substitution_is_refused(variable: str) -> None:
    for query in (
        f"'{variable}' LIKE 'a%'",
        f"title = '{variable}'",
        f"properties['{variable}'] = 'a'",
        f'title = "{variable}"',
    ):
        with pytest.raises(BulkQueryError) as caught:
            check_query(query)
        assert "${" in str(caught.value) and "variable" in str(caught.value), query
        assert "concat('$', '{" in str(caught.value), "the message says how to write the text"


@pytest.mark.parametrize(
    "query",
    # sqlglot reads the escapes and writes `${` back: the SQL that would run holds it.
    ["title = '\\u0024{env:KAFKA_PASSWORD}'", "title = '$\\{env:KAFKA_PASSWORD}'"],
)
def test_escaped_variable_substitution_is_refused(query: str) -> None:
    with pytest.raises(BulkQueryError, match=r"\$\{env:KAFKA_PASSWORD\}"):
        check_query(query)


def test_the_characters_themselves_stay_possible() -> None:
    assert check_query("title = concat('$', '{x}')") == "title = CONCAT('$', '{x}')"
    assert check_query("title = '$ {x}'") == "title = '$ {x}'"


@pytest.mark.parametrize("variable", SUBSTITUTIONS)
def test_bound_values_cannot_hold_a_variable(variable: str) -> None:
    with pytest.raises(BulkQueryError, match=r":t holds `\$\{`"):
        check_query("title = :t", values={"t": f"x{variable}"})


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_values_are_refused(value: float) -> None:
    with pytest.raises(BulkQueryError, match=r":n is .*; a number value must be finite"):
        check_query("blobSize > :n", values={"n": value})


@pytest.mark.parametrize(
    ("query", "shown"),
    [
        ("type = 'a' -- hidden", "-- hidden"),
        ("type = /* x */ 'a'", "/* x */"),
        ("type = 'a' --x\n AND blobSize > 1", "--x"),
    ],
)
def test_comments_are_quoted_as_written(query: str, shown: str) -> None:
    with pytest.raises(BulkQueryError) as caught:
        check_query(query)
    assert f"(found {shown})" in str(caught.value)
