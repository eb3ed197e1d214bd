"""The README's Python examples run as written (STREAMCORE_HOME is a temp folder here), so the
documentation cannot drift from the API."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_has_python_examples() -> None:
    assert BLOCKS, "README.md lost its Python examples"


@pytest.mark.parametrize("source", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_readme_example_runs(source: str, capsys: pytest.CaptureFixture[str]) -> None:
    exec(compile(source, str(README), "exec"), {"__name__": "readme_example"})
    out = capsys.readouterr().out
    if "manager.lag(" in source:  # the log example reads back all it wrote and commits
        assert "LogLag(pos=1001, end=1001, lag=0, lost=0)" in out
