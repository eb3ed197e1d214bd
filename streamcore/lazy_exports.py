"""Package faces that import their exports on first use (PEP 562).

A face (`streamcore`, `streamcore.log` and its backend folders, `streamcore.bulk`,
`streamcore.recovery`) names what it exports and the module each comes from; the module is
imported when a name is first read, so `import streamcore.log` stays cheap and a backend whose
client library is missing (confluent-kafka) breaks only the code that uses it. A face keeps the
same names under `if TYPE_CHECKING:` for type checkers, which cannot follow `__getattr__`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str,
    exports: Mapping[str, str],
    namespace: dict[str, Any],
    computed: Mapping[str, Callable[[], Any]] | None = None,
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The `__getattr__` and `__dir__` of the face `package`, whose `exports` map each name to
    the submodule (relative to `package`) defining it; `computed` names are made by a function
    instead (`__version__`). A value read once is kept in the face's `namespace` (its
    `globals()`), so later reads are plain attribute reads.

    Example:
        __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
    """
    made = dict(computed or {})

    def __getattr__(name: str) -> Any:
        if name in made:
            value = made[name]()
        else:
            module = exports.get(name)
            if module is None:
                raise AttributeError(f"module {package!r} has no attribute {name!r}")
            value = getattr(importlib.import_module(f"{package}.{module}"), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *exports, *made})

    return __getattr__, __dir__
