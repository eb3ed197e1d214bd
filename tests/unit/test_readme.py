"""The Python examples of the README and of docs/*.md run as written (STREAMCORE_HOME is a temp
folder here), so the documentation cannot drift from the API."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCKS = [
    (page, block)
    for page in PAGES
    for block in re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)
]


def test_docs_have_python_examples() -> None:
    assert BLOCKS, "README.md and docs/ lost their Python examples"


@pytest.mark.parametrize(
    ("page", "source"),
    BLOCKS,
    ids=[f"{page.stem}-block{i}" for i, (page, _) in enumerate(BLOCKS)],
)
def test_doc_example_runs(page: Path, source: str, capsys: pytest.CaptureFixture[str]) -> None:
    exec(compile(source, str(page), "exec"), {"__name__": "readme_example"})
    out = capsys.readouterr().out
    if "manager.lag(" in source:  # the log example reads back all it wrote and commits
        assert "LogLag(pos=1001, end=1001, lag=0, lost=0)" in out
