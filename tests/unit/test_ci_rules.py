"""The repository's rules a machine keeps: with CI=true a skipped test fails the run (a missing
broker or server must break the build; without it a skip stays a skip), and no tracked file refers
to a file or folder outside the repository."""

from __future__ import annotations

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
