"""Run records: the summary a DAG run's summary task keeps, at
`STREAMCORE_HOME/runs/<job>/<dag id>+<run id>.json` (`record_path`). The DAGs
(dags/_streamcore.py) write them and the Airflow UI plugin (plugins/streamcore_ui_app.py) finds
them by DAG id and run id (`find_record`): both take the place from here, so they cannot
disagree. A run is named by its DAG and its run id together: two DAGs of one job (the bulk
schedules) run on the same cron get the same run ids. The home is `streamcore_home()` of
streamcore.config, the one the jobs and the CLI resolve. Imports nothing heavy (DAG files and the
plugin load it)."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from streamcore.config import streamcore_home

__all__ = ["find_record", "record_path", "record_stem"]


def record_stem(run_id: str) -> str:
    """A run id (or DAG id) as part of a file name: itself if it holds only letters, digits,
    `.`, `_` and `-`; else every run of other characters made one `_` (Airflow run ids hold `:`
    and `+`) and the first 10 hex digits of the id's SHA-256 added, so that two ids that differ
    only there (`a:b`, `a+b`) keep two files."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", run_id).strip("_")
    if stem == run_id:
        return stem
    return f"{stem}-{hashlib.sha256(run_id.encode()).hexdigest()[:10]}"


def _file_name(dag_id: str, run_id: str) -> str:
    # `+` is in neither stem, so the name tells the DAG from the run.
    return f"{record_stem(dag_id)}+{record_stem(run_id)}.json"


def record_path(job: str, dag_id: str, run_id: str, home: Path | None = None) -> Path:
    """Where the record of run `run_id` of DAG `dag_id`, a DAG of `job`, is kept."""
    return (home or streamcore_home()) / "runs" / job / _file_name(dag_id, run_id)


def find_record(
    dag_id: str, run_id: str, home: Path | None = None
) -> tuple[Path, dict[str, Any]] | None:
    """The record of run `run_id` of DAG `dag_id` and its path, whichever job's folder holds it,
    or None. A file whose record names another run is not it."""
    if not dag_id or not run_id:
        return None
    runs = (home or streamcore_home()) / "runs"
    for path in sorted(runs.glob(f"*/{_file_name(dag_id, run_id)}")):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(record, dict) and (record.get("dag_id"), record.get("run_id")) == (
            dag_id,
            run_id,
        ):
            return path, record
    return None
