"""Shared fixtures of the Spark tests: one local SparkSession (with Delta, spark-avro and the
Kafka source from the jar cache) for the whole pytest session, and helpers to run the importer
and read Delta tables independently of Spark.

Loaded from tests/conftest.py (`pytest_plugins`); helpers are imported from `spark_session`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Consume arguments of tests that do not look at the GX report's details: pass/fail only.
FAST = ("--gx-result-format", "BOOLEAN_ONLY")


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """A small local session shared by every Spark test (starting one costs 10-20 s)."""
    from jobs.spark.session import build_session

    session = build_session(
        "streamcore-tests",
        "local[2]",
        conf={
            "spark.sql.shuffle.partitions": "2",
            "spark.ui.enabled": "false",
            "spark.default.parallelism": "2",
            "spark.driver.memory": "2g",
        },
    )
    yield session
    jvm = session.sparkContext._gateway.proc
    session.stop()
    # The JVM outlives stop() until this process exits, and with it the Kafka producers Spark
    # caches, which then log reconnection attempts to the broker the session has stopped. The
    # gateway JVM exits when its stdin closes.
    jvm.stdin.close()
    jvm.wait(60)


def run_importer(*args: str) -> tuple[int, dict[str, Any]]:
    """Run `jobs.importer.main` in this process (on the shared session); (exit code, summary)."""
    import contextlib
    import io

    from jobs import importer

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = importer.main(list(args))
    lines = out.getvalue().strip().splitlines()
    return code, json.loads(lines[-1])


def run_importer_process(
    *args: str, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """Run `python jobs/importer.py ...` as its own process (its own Spark)."""
    full_env = {**os.environ, **(env or {})}
    return subprocess.run(
        [sys.executable, str(ROOT / "jobs" / "importer.py"), *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
        cwd=ROOT,
    )


def read_delta(path: str | Path) -> Any:
    """The table at `path` as a pyarrow Table, read by delta-rs (not Spark)."""
    from deltalake import DeltaTable

    return DeltaTable(str(path)).to_pyarrow_table()


def delta_version(path: str | Path) -> int:
    from deltalake import DeltaTable

    return DeltaTable(str(path)).version()


def spark_submit(
    job: str, *args: str, home: Path, timeout: float = 600, env: dict[str, str] | None = None
) -> tuple[int, Any, str]:
    """`spark-submit jobs/<job>.py args` on local[2] with STREAMCORE_HOME `home` and `env`
    added to the environment; (exit code, summary or None, stderr)."""
    from jobs.spark.submit import submit_config

    config = submit_config()
    confs = [arg for k, v in config["conf"].items() for arg in ("--conf", f"{k}={v}")]
    command = [
        str(ROOT / ".venv" / "bin" / "spark-submit"),
        *("--master", "local[2]", "--jars", config["jars"]),
        *confs,
        *("--conf", "spark.ui.enabled=false", "--conf", "spark.ui.showConsoleProgress=false"),
        str(ROOT / "jobs" / f"{job}.py"),
        *args,
    ]
    environment = {**os.environ, **config["env_vars"], "STREAMCORE_HOME": str(home), **(env or {})}
    done = subprocess.run(
        command, env=environment, cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith('{"job"')]
    return done.returncode, json.loads(lines[-1]) if lines else None, done.stderr
