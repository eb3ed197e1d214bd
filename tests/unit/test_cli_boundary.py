"""The CLI is a face, not a library: nothing outside `streamcore/cli/` imports `streamcore.cli`.

What the library, the jobs, the DAGs, the plugins and the benches share with the command (text
rendering, position parsing, topology loading, run summaries) lives in library modules
(`streamcore.text`, `streamcore.recovery.targets`, `streamcore.computation.loader`,
`streamcore.computation.summary`) that the CLI imports too. The source is read with `ast`, so an
import inside a function counts as much as one at the top.
"""

from __future__ import annotations

import ast
from pathlib import Path

from streamcore.config import project_root

FOLDERS = ("streamcore", "jobs", "dags", "plugins", "bench")
CLI = "streamcore.cli"


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(tree: ast.AST, module: str, is_package: bool) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in `tree`, relative ones resolved; a
    `from X import name` counts as X and as X.name (`from streamcore import cli`)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".")
                package = package if is_package else package[:-1]
                package = package[: len(package) - (node.level - 1)]
                base = ".".join([*package, base] if base else package)
            found.append((node.lineno, base))
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
        elif (
            isinstance(node, ast.Call)
            and ast.unparse(node.func) in ("importlib.import_module", "import_module")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.append((node.lineno, node.args[0].value))
    return found


def _cli_imports(source: str, module: str, is_package: bool = False) -> list[tuple[int, str]]:
    tree = ast.parse(source)
    return [
        (line, name)
        for line, name in _imported(tree, module, is_package)
        if name == CLI or name.startswith(CLI + ".")
    ]


def test_nothing_outside_the_cli_imports_it() -> None:
    root = project_root()
    wrong = []
    for folder in FOLDERS:
        for path in sorted((root / folder).rglob("*.py")):
            if path.is_relative_to(root / "streamcore" / "cli"):
                continue
            module = _module_name(path, root)
            source = path.read_text(encoding="utf-8")
            for line, name in _cli_imports(source, module, path.name == "__init__.py"):
                wrong.append(f"{path.relative_to(root)}:{line}: imports {name}")
    assert not wrong, (
        "only streamcore/cli/ imports streamcore.cli; move what these need into a library "
        "module (streamcore.text, streamcore.recovery.targets, ...):\n" + "\n".join(wrong)
    )


def test_the_check_sees_every_way_of_importing() -> None:
    assert _cli_imports("import streamcore.cli.main", "jobs.x")
    assert _cli_imports("from streamcore.cli.table import x", "jobs.x")
    assert _cli_imports("from streamcore import cli", "jobs.x")
    assert _cli_imports("def f():\n    from streamcore.cli.run import load_topology", "jobs.x")
    assert _cli_imports("from ..cli import run", "streamcore.bulk.progress")
    assert _cli_imports("from . import cli", "streamcore", is_package=True)
    assert _cli_imports("importlib.import_module('streamcore.cli.main')", "bench.x")
    assert not _cli_imports("from streamcore.text import render_table", "jobs.x")
    assert not _cli_imports("import streamcore.client", "jobs.x")
    assert not _cli_imports("from ..clients import x", "streamcore.bulk.progress")
