"""`check_query`: a bulk query is a Spark SQL boolean predicate over a repository's columns, and
nothing else (docs/bulk.md, "Queries").

The query is parsed with sqlglot (Spark dialect) and every node of the tree is checked against an
allow-list, so what is refused is whatever is not known to be harmless: statements, subqueries,
comments, anonymous placeholders, qualified or unknown columns, and functions outside a short
list of pure ones. Named placeholders (`:days`) are bound to literals in the tree. The job
filters with the SQL sqlglot regenerates from the checked tree, never with the text as given, so
what runs is what was checked.

Spark replaces `${env:NAME}`, `${system:...}`, `${spark:...}` and the like in the SQL text before
it parses it, string literals included, so a query holding one would read the job's environment
and configuration (a LIKE on it answers a guess). The jobs' sessions turn that substitution off
(`spark.sql.variable.substitute=false`, jobs/spark/submit.py); the check refuses `${` in the SQL
that would run as well, so a session configured elsewhere leaks nothing either.
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Mapping

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, SqlglotError

from streamcore.bulk.columns import repository_columns
from streamcore.bulk.errors import BulkQueryError
from streamcore.bulk.values import VARIABLE, VARIABLE_FIX, value_problem

__all__ = ["check_query"]


# The pure functions a query may call, by the name users write. sqlglot turns several into
# other nodes (`date(x)` is a CAST, `date_sub` a DATE_ADD of a negated count): the allowed node
# classes are read from how sqlglot parses these calls, so they follow sqlglot's versions.
FUNCTIONS = {
    "lower": "lower(s)",
    "upper": "upper(s)",
    "trim": "trim(s)",
    "ltrim": "ltrim(s)",
    "rtrim": "rtrim(s)",
    "length": "length(s)",
    "substring": "substring(s, 1, 2)",
    "substr": "substr(s, 1, 2)",
    "concat": "concat(s, s)",
    "coalesce": "coalesce(s, s)",
    "date": "date(s)",
    "to_date": "to_date(s)",
    "to_timestamp": "to_timestamp(s)",
    "current_date": "current_date()",
    "current_timestamp": "current_timestamp()",
    "date_add": "date_add(s, 1)",
    "date_sub": "date_sub(s, 1)",
    "datediff": "datediff(s, s)",
    "year": "year(s)",
    "month": "month(s)",
    "day": "day(s)",
    "abs": "abs(n)",
    "round": "round(n, 2)",
    "floor": "floor(n)",
    "ceil": "ceil(n)",
    "map_contains_key": "map_contains_key(m, 'k')",
}
ALLOWED_TEXT = (
    "comparisons (= <> != < <= > >= <=>), AND, OR, NOT, arithmetic (+ - * / %), IN (literals), "
    "BETWEEN, LIKE, ILIKE, IS [NOT] NULL, CAST, properties['key'], literals, INTERVAL, and the "
    f"functions {', '.join(sorted(FUNCTIONS))}"
)
EXAMPLE = "type = 'Note' AND modified < current_timestamp() - INTERVAL 30 DAYS"
_COMPARISONS = (
    exp.EQ,
    exp.NEQ,
    exp.GT,
    exp.GTE,
    exp.LT,
    exp.LTE,
    exp.NullSafeEQ,
    exp.NullSafeNEQ,
    exp.In,
    exp.Between,
    exp.Like,
    exp.ILike,
    exp.Is,
    exp.MapContainsKey,
)
_STRUCTURE = (
    *_COMPARISONS,
    exp.And,
    exp.Or,
    exp.Not,
    exp.Paren,
    exp.Add,
    exp.Sub,
    exp.Mul,
    exp.Div,
    exp.Mod,
    exp.Neg,
    exp.Column,
    exp.Identifier,
    exp.Literal,
    exp.Boolean,
    exp.Null,
    exp.Cast,
    exp.DataType,
    exp.DataTypeParam,
    exp.Bracket,
    exp.Interval,
    exp.Var,
)
_CAST_TYPES = {
    exp.DataType.Type.BOOLEAN,
    exp.DataType.Type.TINYINT,
    exp.DataType.Type.SMALLINT,
    exp.DataType.Type.INT,
    exp.DataType.Type.BIGINT,
    exp.DataType.Type.FLOAT,
    exp.DataType.Type.DOUBLE,
    exp.DataType.Type.DECIMAL,
    exp.DataType.Type.TEXT,
    exp.DataType.Type.VARCHAR,
    exp.DataType.Type.DATE,
    exp.DataType.Type.TIMESTAMP,
    exp.DataType.Type.TIMESTAMPLTZ,
    exp.DataType.Type.TIMESTAMPNTZ,
    exp.DataType.Type.TIMESTAMPTZ,
}
_LITERALS = (exp.Literal, exp.Boolean, exp.Null)


@functools.cache
def _function_classes() -> frozenset[type[exp.Expr]]:
    classes: set[type[exp.Expr]] = set()
    for sample in FUNCTIONS.values():
        for node in sqlglot.parse_one(sample, read="spark").walk():
            if isinstance(node, exp.Func):
                classes.add(type(node))
    return frozenset(classes)


def _refuse(problem: str) -> BulkQueryError:
    return BulkQueryError(f"{problem}; a query may use {ALLOWED_TEXT} (e.g. {EXAMPLE})")


def _shown(node: exp.Expr) -> str:
    text = node.sql(dialect="spark")
    return text if len(text) <= 80 else text[:77] + "..."


def check_query(
    query: str,
    columns: Mapping[str, str] | None = None,
    values: Mapping[str, bool | int | float | str] | None = None,
) -> str:
    """The Spark SQL of `query` regenerated from its checked tree, or `BulkQueryError` naming
    the part at fault and what is allowed. `columns` (name → type, e.g. `map<string,string>`)
    are those a query may name; default: the `repository` table's (`repository_columns()`).
    `values` bind the query's named placeholders (`:retention_days`): each becomes a literal in
    the tree, never text pasted into the query."""
    if not isinstance(query, str) or not query.strip():
        raise _refuse("the query is empty")
    known = dict(repository_columns() if columns is None else columns)
    try:
        trees = [tree for tree in sqlglot.parse(query, read="spark") if tree is not None]
    except ParseError as exc:
        where = exc.errors[0] if exc.errors else {}
        problem = where.get("description") or str(exc).splitlines()[0]
        at = f" at column {where['col']}" if where.get("col") else ""
        raise _refuse(f"the query {query!r:.100} is not valid Spark SQL{at}: {problem}") from None
    except SqlglotError as exc:
        raise _refuse(f"the query {query!r:.100} is not valid Spark SQL: {exc}") from None
    if len(trees) != 1:
        raise _refuse(f"the query holds {len(trees)} statements; give one condition, without ';'")
    tree = _bind(trees[0], values or {})
    for node in tree.walk():
        _check_node(node, query, known)
    if not _is_predicate(tree, known):
        raise _refuse(
            f"the query `{_shown(tree)}` is not a condition: it must be true or false for each "
            "document (a comparison, IN, LIKE, IS NULL, a boolean column, ...)"
        )
    sql = tree.sql(dialect="spark")
    if VARIABLE in sql:
        # The SQL that runs, not the text given: sqlglot writes escapes such as '\u0024{' back
        # as the characters they stand for.
        found = next(
            (n for n in tree.walk() if isinstance(n, exp.Literal) and VARIABLE in n.sql("spark")),
            tree,
        )
        raise BulkQueryError(f"the query holds `${{` in `{_shown(found)}`: {VARIABLE_FIX}")
    return sql


def _bind(tree: exp.Expr, values: Mapping[str, bool | int | float | str]) -> exp.Expr:
    """`tree` with each named placeholder replaced by the literal of its value."""
    for node in list(tree.find_all(exp.Placeholder)):
        name = node.name
        if name == "?" or not name:
            continue  # anonymous: refused by the node check
        if name not in values:
            given = ", ".join(sorted(values)) or "none"
            raise _refuse(f"the query uses :{name}, which has no value (values given: {given})")
        value = values[name]
        problem = value_problem(value)
        if problem is not None:
            raise BulkQueryError(f"the value of :{name} {problem}")
        if isinstance(value, bool):
            literal: exp.Expr = exp.Boolean(this=value)
        elif isinstance(value, int | float):
            literal = exp.Literal.number(value)
        else:
            literal = exp.Literal.string(value)
        if node is tree:
            return literal
        node.replace(literal)
    return tree


def _check_node(node: exp.Expr, query: str, columns: Mapping[str, str]) -> None:
    if node.comments:
        found = _comment(query, node.comments[0])
        raise _refuse(f"comments are not allowed in a query (found {found})")
    if isinstance(node, exp.Query | exp.Subquery):
        raise _refuse(f"subqueries are not allowed: `{_shown(node)}`")
    if isinstance(node, exp.Column):
        _check_column(node, columns)
    elif isinstance(node, exp.In):
        _check_in(node)
    elif isinstance(node, exp.Bracket):
        _check_bracket(node, columns)
    elif isinstance(node, exp.DataType):
        if node.this not in _CAST_TYPES:
            raise _refuse(f"CAST to {_shown(node)} is not allowed (cast to simple types only)")
    elif isinstance(node, exp.Var):
        if node.arg_key != "unit":
            raise _refuse(f"`{_shown(node)}` is not allowed here (only as an interval unit)")
    elif isinstance(node, _STRUCTURE) or type(node) in _function_classes():
        return
    elif isinstance(node, exp.Func):
        name = node.name if isinstance(node, exp.Anonymous) else node.sql_name()
        raise _refuse(f"function {name.lower()} is not allowed: `{_shown(node)}`")
    else:
        raise _refuse(f"`{_shown(node)}` ({type(node).__name__}) is not allowed in a query")


def _comment(query: str, text: str) -> str:
    """The comment whose text is `text` as the query wrote it (sqlglot keeps only its text)."""
    for written in (f"--{text}", f"/*{text}*/"):
        if written in query:
            return written.strip()
    return f"/*{text}*/"


def _check_column(node: exp.Column, columns: Mapping[str, str]) -> None:
    if node.table:
        raise _refuse(
            f"column `{_shown(node)}` is qualified; name repository columns alone (`{node.name}`)"
        )
    if node.name not in columns:
        close = difflib.get_close_matches(node.name, list(columns), n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise BulkQueryError(
            f"unknown column {node.name!r}{hint}; the repository has {', '.join(columns)}"
        )


def _check_in(node: exp.In) -> None:
    if node.args.get("query") is not None:
        raise _refuse(f"subqueries are not allowed: `{_shown(node)}`")
    for item in node.expressions:
        value = item.this if isinstance(item, exp.Neg) else item
        if not isinstance(value, _LITERALS):
            raise _refuse(f"IN takes literals only, not `{_shown(item)}`")


def _check_bracket(node: exp.Bracket, columns: Mapping[str, str]) -> None:
    target, keys = node.this, node.expressions
    if (
        not isinstance(target, exp.Column)
        or not columns.get(target.name, "").startswith("map<")
        or len(keys) != 1
        or not (isinstance(keys[0], exp.Literal) and keys[0].is_string)
    ):
        raise _refuse(
            f"`{_shown(node)}`: [] only reads a map column by a string key, e.g. "
            "properties['dc:source']"
        )


def _is_predicate(node: exp.Expr, columns: Mapping[str, str]) -> bool:
    if isinstance(node, exp.Paren):
        return _is_predicate(node.this, columns)
    if isinstance(node, exp.And | exp.Or):
        return _is_predicate(node.left, columns) and _is_predicate(node.right, columns)
    if isinstance(node, exp.Not):
        return _is_predicate(node.this, columns)
    if isinstance(node, (*_COMPARISONS, exp.Boolean)):
        return True
    if isinstance(node, exp.Column):
        return columns.get(node.name) == "boolean"
    if isinstance(node, exp.Cast):
        kind: object = node.to.this
        return kind == exp.DataType.Type.BOOLEAN
    if isinstance(node, exp.Coalesce):
        return all(_is_predicate(arg, columns) for arg in (node.this, *node.expressions))
    return False
