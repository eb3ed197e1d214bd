"""The repository's rules a machine keeps: with CI=true a skipped test fails the run (a missing
broker or server must break the build; without it a skip stays a skip), no tracked file refers
to a file or folder outside the repository, no two classes share a name, and every logger is
named for its module."""

from __future__ import annotations

import ast
import functools
import re
import subprocess
from pathlib import Path

import pytest

from streamcore.config import project_root

CONFTEST = (Path(__file__).resolve().parents[1] / "conftest.py").read_text()
SKIPPING = """
import pytest

def test_needs_a_broker():
    pytest.skip("no broker running")

def test_passes():
    assert True
"""


@pytest.mark.parametrize(("ci", "failed", "skipped"), [("true", 1, 0), ("", 0, 1)])
def test_skips_fail_only_in_ci(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, ci: str, failed: int, skipped: int
) -> None:
    monkeypatch.setenv("CI", ci)
    # The plugins (broker, servers, Spark) are not needed to check the skip rule; drop the
    # assignment whether it spans one line or a parenthesised tuple.
    conftest = re.sub(r"(?ms)^pytest_plugins = (\(.*?^\)|[^\n]*)\n", "", CONFTEST)
    assert "pytest_plugins" not in conftest
    pytester.makeconftest(conftest)
    pytester.makepyfile(test_skipping=SKIPPING)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=failed, skipped=skipped)
    if failed:
        result.stdout.fnmatch_lines(
            ["*skipped in CI, which counts as a failure*no broker running*"]
        )


# -- what the repository refers to ---------------------------------------------------------------
# The design document is docs/design.md, ours. The patterns are written so this file does not
# match them itself: a folder `shared` beside the checkout, its reference files, and a design file
# spelled in capitals, which only that folder has.
OUTSIDE = re.compile(r"\.\./+shared\b|\bshared/+(?:DESIGN|reference)\b|\bDESIGN\.md\b")
LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def _tracked_text_files() -> list[tuple[str, str]]:
    """(path, text) of every file git tracks that reads as UTF-8 text (not images, not jars)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=project_root(), capture_output=True, check=True
    ).stdout.decode()
    files = []
    for name in filter(None, listed.split("\0")):
        path = project_root() / name
        if not path.is_file():  # deleted in the work tree, not yet in a commit
            continue
        data = path.read_bytes()
        if b"\0" in data:
            continue
        try:
            files.append((name, data.decode("utf-8")))
        except UnicodeDecodeError:
            continue
    return files


def test_no_tracked_file_refers_to_a_design_file_or_folder_outside_the_repository() -> None:
    found = [
        f"{name}:{number}: {line.strip()}"
        for name, text in _tracked_text_files()
        for number, line in enumerate(text.splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert not found, (
        "these lines refer to files outside the repository; cite docs/design.md (with the "
        "section's name) instead:\n" + "\n".join(found)
    )


def test_markdown_links_stay_inside_the_repository() -> None:
    root = project_root()
    escaping = []
    for name, text in _tracked_text_files():
        if not name.endswith(".md"):
            continue
        folder = (root / name).parent
        for number, line in enumerate(text.splitlines(), 1):
            for target in LINK.findall(line):
                path = target.split("#", 1)[0]
                if not path or SCHEME.match(path) or path.startswith("/"):
                    continue  # an anchor, a URL, or a site path
                if not (folder / path).resolve().is_relative_to(root):
                    escaping.append(f"{name}:{number}: {target}")
    assert not escaping, "links that leave the repository:\n" + "\n".join(escaping)


# -- names -------------------------------------------------------------------------------------
# One name, one thing: two classes (or errors) with one name in the library and the jobs read as
# one in a traceback, a log line or an import. And one logger convention (docs/computations.md,
# Logging): a logger is named for its module.
CODE = ("streamcore", "jobs", "dags", "plugins")


@functools.cache
def _modules() -> list[tuple[str, ast.Module]]:
    root = project_root()
    return [
        (str(path.relative_to(root)), ast.parse(path.read_text(encoding="utf-8"), str(path)))
        for folder in CODE
        for path in sorted((root / folder).rglob("*.py"))
    ]


def test_no_two_classes_share_a_name() -> None:
    defined: dict[str, list[str]] = {}
    for name, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                defined.setdefault(node.name, []).append(f"{name}:{node.lineno}")
    shared = {cls: where for cls, where in defined.items() if len(where) > 1}
    assert not shared, "classes defined more than once; name each for what it is:\n" + "\n".join(
        f"{cls}: {', '.join(where)}" for cls, where in sorted(shared.items())
    )


def _logger_name_expected(name: str) -> str | None:
    """The literal a file must pass to getLogger, or None when `__name__` is its path: job
    scripts run as `__main__` by spark-submit and DAG files Airflow imports under another name."""
    path = Path(name)
    if path.parent.name in ("jobs", "dags") and len(path.parts) == 2:
        return f"{path.parent.name}.{path.stem}"
    return None


def test_every_logger_is_named_for_its_module() -> None:
    wrong = []
    for name, tree in _modules():
        expected = _logger_name_expected(name)
        for node in tree.body:
            if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)):
                continue
            if ast.unparse(node.value.func) != "logging.getLogger":
                continue
            target, args = ast.unparse(node.targets[0]), node.value.args
            arg = ast.unparse(args[0]) if args else ""
            if target == "logger":
                ok = arg == (repr(expected) if expected else "__name__")
            else:  # a child logger for a library's own lines: f"{__name__}.<library>"
                ok = arg.startswith("f'{__name__}.")
            if not ok:
                wrong.append(f"{name}:{node.lineno}: {ast.unparse(node)}")
    assert not wrong, (
        "write logger = logging.getLogger(__name__) (in a job script or DAG file, the literal "
        "'jobs.<file>' / 'dags.<file>'):\n" + "\n".join(wrong)
    )
