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
