"""Every public module of streamcore/ says what it offers: it declares `__all__`, and every name in
it exists. A public module is one whose file name does not start with `_` (package faces, the
`__init__.py` files, are checked too when they declare one)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "streamcore"


def _modules() -> list[str]:
    return sorted(
        path.relative_to(ROOT).as_posix()
        for path in PACKAGE.rglob("*.py")
        if "__pycache__" not in path.parts
    )


def _declares_all(path: str) -> bool:
    tree = ast.parse((ROOT / path).read_text())
    return any(
        isinstance(node, ast.Assign | ast.AnnAssign)
        and any(
            isinstance(target, ast.Name) and target.id == "__all__"
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        )
        for node in tree.body
    )


def _module_name(path: str) -> str:
    return path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def _public(path: str) -> bool:
    return not Path(path).name.startswith("_")


def test_every_public_module_declares_all() -> None:
    missing = [p for p in _modules() if _public(p) and not _declares_all(p)]
    assert not missing, (
        f"declare __all__ (the names other modules import, and the documented API) in {missing}"
    )


@pytest.mark.parametrize("path", [p for p in _modules() if _declares_all(p)])
def test_every_name_in_all_exists(path: str) -> None:
    module = importlib.import_module(_module_name(path))
    names = module.__all__
    assert len(names) == len(set(names)), f"{path}: a name is listed twice in __all__"
    absent = [name for name in names if not hasattr(module, name)]
    assert not absent, f"{path}: __all__ lists {absent}, which the module does not define"
