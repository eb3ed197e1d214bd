"""Run a snippet of DAG code in a fresh interpreter, as Airflow would import it: dags/ and
plugins/ on `sys.path`, `json` and `sys` imported, the caller's environment (its own
AIRFLOW_HOME, ...) over this process's. The snippet prints its result as its last line of JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
PREAMBLE = f"import json, sys\nsys.path[:0] = [{str(ROOT / 'dags')!r}, {str(ROOT / 'plugins')!r}]\n"


def run_snippet(
    code: str,
    env: Mapping[str, str],
    *,
    drop: Iterable[str] = (),
    timeout: float = 300,
) -> Any:
    """The last stdout line of `code` (dedented) as JSON; a failed run fails the test with the
    ends of its output. `drop`: variables of this process (prefixes) the snippet must not see."""
    prefixes = tuple(drop)
    environ = {k: v for k, v in os.environ.items() if not (prefixes and k.startswith(prefixes))}
    environ.update(env)
    done = subprocess.run(
        [sys.executable, "-c", PREAMBLE + textwrap.dedent(code)],
        env=environ,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
