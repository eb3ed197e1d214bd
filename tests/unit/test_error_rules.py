"""The error rules a machine keeps (docs/errors.md): library code raises the project's exceptions,
every exception class of streamcore/ is a `StreamcoreError` whose family says whether a retry can
help, and none is an `AssertionError`."""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect
from pathlib import Path

import pytest

from streamcore.config import project_root
from streamcore.errors import StreamcoreError

PACKAGE = project_root() / "streamcore"

BUILTIN_EXCEPTIONS = frozenset(
    name
    for name, value in vars(builtins).items()
    if isinstance(value, type) and issubclass(value, BaseException)
)


def _allowed(exception: str, function: ast.FunctionDef | ast.AsyncFunctionDef | None) -> bool:
    """The builtin raises Python's own protocols ask for:
    - `AttributeError` from a module's or class's `__getattr__` (PEP 562: `hasattr`,
      `getattr(..., default)` and `from module import name` expect exactly it);
    - `NotImplementedError` from an `@abstractmethod`, the abstract contract."""
    if function is None:
        return False
    if exception == "AttributeError":
        return function.name == "__getattr__"
    if exception == "NotImplementedError":
        return any(
            (d.id if isinstance(d, ast.Name) else getattr(d, "attr", None)) == "abstractmethod"
            for d in function.decorator_list
        )
    return False


def _checked_files() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _builtin_raises(source: str, where: str) -> list[str]:
    """`where:line: Name` of each `raise Builtin(...)` / `raise Builtin` not allowed."""
    found: list[str] = []

    def visit(node: ast.AST, function: ast.FunctionDef | ast.AsyncFunctionDef | None) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(child, child)
                continue
            if isinstance(child, ast.Raise) and child.exc is not None:
                target = child.exc.func if isinstance(child.exc, ast.Call) else child.exc
                name = target.id if isinstance(target, ast.Name) else None
                if name in BUILTIN_EXCEPTIONS and not _allowed(name, function):
                    found.append(f"{where}:{child.lineno}: {name}")
            visit(child, function)

    visit(ast.parse(source), None)
    return found


def _module_name(path: Path) -> str:
    parts = path.relative_to(project_root()).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _exception_classes() -> list[type[BaseException]]:
    classes = []
    for path in _checked_files():
        module = importlib.import_module(_module_name(path))
        classes += [
            value
            for value in vars(module).values()
            if inspect.isclass(value)
            and issubclass(value, BaseException)
            and value.__module__ == module.__name__
        ]
    return classes


def test_library_code_raises_no_builtin_exception() -> None:
    root = project_root()
    found = [
        hit
        for path in _checked_files()
        for hit in _builtin_raises(path.read_text(encoding="utf-8"), str(path.relative_to(root)))
    ]
    assert not found, (
        "raise a StreamcoreError subclass named for the problem (also the builtin it replaces, "
        "so callers catching the builtin still work), see docs/errors.md:\n" + "\n".join(found)
    )


SCANNED = """
from abc import ABC, abstractmethod

def check(n):
    if n < 0:
        raise ValueError("negative")
    raise KeyError

def __getattr__(name):
    raise AttributeError(name)

class Contract(ABC):
    @abstractmethod
    def run(self):
        raise NotImplementedError

    def other(self):
        raise NotImplementedError("not abstract")
        raise AttributeError("outside __getattr__")
"""


def test_the_scan_finds_builtin_raises_and_keeps_pythons_protocols() -> None:
    assert _builtin_raises(SCANNED, "x.py") == [
        "x.py:6: ValueError",
        "x.py:7: KeyError",
        "x.py:18: NotImplementedError",
        "x.py:19: AttributeError",
    ]


@pytest.mark.parametrize(
    "cls",
    [c for c in _exception_classes() if c is not StreamcoreError],  # the root: not retryable
    ids=lambda c: f"{c.__module__}.{c.__name__}",
)
def test_every_error_class_is_a_streamcore_error_declaring_whether_a_retry_helps(
    cls: type[BaseException],
) -> None:
    assert issubclass(cls, StreamcoreError), f"{cls.__name__} must subclass StreamcoreError"
    assert not issubclass(cls, AssertionError), f"{cls.__name__} must not be an AssertionError"
    declared = [c for c in cls.__mro__ if c is not StreamcoreError and "retryable" in vars(c)]
    assert declared, (
        f"{cls.__name__}: set retryable on its family (the StreamcoreError subclass it derives "
        "from) or on itself, and add the family to docs/errors.md"
    )
    assert isinstance(declared[0].retryable, bool)


def test_docs_list_every_error_family() -> None:
    text = (project_root() / "docs" / "errors.md").read_text(encoding="utf-8")
    families = {
        c.__name__
        for c in _exception_classes()
        if issubclass(c, StreamcoreError) and "retryable" in vars(c)
    }
    missing = sorted(name for name in families if f"`{name}`" not in text)
    assert not missing, f"docs/errors.md does not list {missing}"
