"""Running the `streamcore` command in process for the CLI tests: `cli_runner(home, capsys)` is a
function `run(*argv) -> Result` (exit code, stdout, stderr) over the real entry point, with
`--home home`."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from streamcore.cli.main import main


@dataclass
class Result:
    rc: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)

    def json_lines(self) -> list[dict]:
        return [json.loads(line) for line in self.out.splitlines() if line.strip()]


def cli_runner(home: Path, capsys: pytest.CaptureFixture[str]) -> Callable[..., Result]:
    def run(*argv: str) -> Result:
        capsys.readouterr()
        rc = main(["--home", str(home), *argv])
        out, err = capsys.readouterr()
        return Result(rc, out, err)

    return run
