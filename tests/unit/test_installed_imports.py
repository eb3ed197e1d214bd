"""Scripts import the installed project, never a path they edit. `make` installs `streamcore` and
`jobs` (pyproject.toml: `streamcore*`, `jobs*`), so a job file run as a script, as spark-submit's
driver runs it with the environment's Python, imports `jobs.spark.*` from any working directory;
a bench script finds its sibling modules (`from outbox_bench import ...`) because Python puts a
script's folder first on `sys.path`. No file of `jobs/` or `bench/` edits `sys.path`, not even in
the code it hands to a child interpreter.

The real spark-submit of a job is tests/integration/test_stream_stats.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from streamcore.config import project_root

ROOT = project_root()
JOBS = sorted(
    path
    for path in (ROOT / "jobs").glob("*.py")
    if 'if __name__ == "__main__":' in path.read_text()
)
BENCHES = sorted((ROOT / "bench").glob("*_bench.py"))


def clean_env() -> dict[str, str]:
    """The environment without PYTHONPATH: only the installed packages and the script's folder."""
    return {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}


def test_no_sys_path_edits_in_jobs_or_bench() -> None:
    files = [*(ROOT / "jobs").rglob("*.py"), *(ROOT / "bench").rglob("*.py")]
    editing = [str(path.relative_to(ROOT)) for path in files if "sys.path" in path.read_text()]
    assert editing == []


def test_there_are_jobs_and_benches() -> None:
    assert len(JOBS) >= 7 and len(BENCHES) >= 10


@pytest.mark.parametrize("job", JOBS, ids=lambda path: path.stem)
def test_a_job_runs_as_a_script_from_any_directory(job: Path, tmp_path: Path) -> None:
    """`--help` exits before Spark, after the job's module-level imports of `jobs` and
    `streamcore`: the same imports spark-submit's driver makes."""
    done = subprocess.run(
        [sys.executable, str(job), "--help"],
        cwd=tmp_path,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: ")


def test_the_benches_import_their_siblings_from_their_folder(tmp_path: Path) -> None:
    """Each bench module imports with only bench/ added to the path, as `python bench/x.py` runs
    it (its main does not run: the module is imported, not run)."""
    names = [path.stem for path in BENCHES]
    done = subprocess.run(
        [sys.executable, "-c", "; ".join(f"import {name}" for name in names)],
        cwd=tmp_path,
        env={**clean_env(), "PYTHONPATH": str(ROOT / "bench")},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
