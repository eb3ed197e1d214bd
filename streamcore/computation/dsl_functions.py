"""The user functions of DSL operators: how an operator names one in the chain's text and in
errors, the check that it is callable, and the aggregations `count` and `reduce` are made of
(shared by the plain and the windowed aggregations)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from streamcore.computation.errors import NotCallableError

__all__ = ["Reduced", "callable_name", "plus_one", "require_callable", "sum_counts"]


def callable_name(fn: Any) -> str:
    """`parse`, `Enricher.enrich`, `<lambda>`: short enough to read in an error message."""
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    if not isinstance(name, str):
        return type(fn).__name__
    return name.rsplit("<locals>.", 1)[-1]


def require_callable(fn: Any, where: str, example: str) -> None:
    """Raise `NotCallableError` naming `where` and an `example` unless `fn` is callable."""
    if not callable(fn):
        raise NotCallableError(
            f"{where}: expected a function, got {type(fn).__name__} {fn!r}; pass a callable such "
            f"as `{example}`"
        )


def plus_one(key: str, value: Any, count: int) -> int:
    """`count` as an aggregator."""
    return count + 1


def sum_counts(key: str, count: int, other: int) -> int:
    """`count`'s merger of two sessions."""
    return count + other


class Reduced:
    """`reduce` as an aggregation: no aggregate (None) until the first value, then
    `reducer(aggregate, value)`; two sessions merge with the reducer too."""

    def __init__(self, reducer: Callable[[Any, Any], Any]) -> None:
        self.reducer = reducer

    @staticmethod
    def initial() -> None:
        return None

    def aggregate(self, key: str, value: Any, aggregate: Any) -> Any:
        return value if aggregate is None else self.reducer(aggregate, value)

    def merge(self, key: str, aggregate: Any, other: Any) -> Any:
        if aggregate is None:
            return other
        return aggregate if other is None else self.reducer(aggregate, other)
