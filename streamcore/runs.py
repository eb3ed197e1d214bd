"""Run records: the summary a DAG run's summary task keeps, at
`STREAMCORE_HOME/runs/<job>/<record_stem(run id)>.json`. The DAGs (dags/_streamcore.py) write
them and the Airflow UI plugin (plugins/streamcore_ui_app.py) reads them: both take the place
from here, so they cannot disagree. Imports nothing heavy (DAG files and the plugin load it)."""

from __future__ import annotations

import os
import re
from pathlib import Path

__all__ = ["record_stem", "streamcore_home"]

_PROJECT_ROOT = Path(__file__).resolve().parents[1]


def streamcore_home() -> Path:
    """STREAMCORE_HOME as the jobs resolve it (environment, else ./data under the project)."""
    return Path(os.environ.get("STREAMCORE_HOME") or _PROJECT_ROOT / "data").resolve()


def record_stem(run_id: str) -> str:
    """The file name stem of a run's record: the run id with every run of characters other than
    letters, digits, `.`, `_` and `-` made one `_` (Airflow run ids hold `:` and `+`)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", run_id).strip("_")
