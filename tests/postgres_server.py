"""pytest plugin: the local PostgreSQL server for tests marked `postgres`.

- `postgres_url` (session fixture): the SQLAlchemy URL of a running server. If none answers on
  `127.0.0.1:$STREAMCORE_POSTGRES_PORT` (default 55432), `scripts/postgres.sh start` installs
  (when missing) and starts one, and the session stops it at its end; a server that was already
  running is left running. A server that cannot start fails the tests that need it (never a
  skip: CI must not pass without PostgreSQL).
- `ensure_postgres()`: the same, callable from factories that are not fixtures.

Loaded from tests/conftest.py (`pytest_plugins`).
"""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "postgres.sh"

_lock = threading.Lock()
_state: dict[str, object] = {"url": None, "started": False, "error": None}


def _run(command: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), command], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )


def ensure_postgres() -> str:
    """The URL of a running local server, started if needed (once per session)."""
    with _lock:
        if _state["url"] is not None:
            return str(_state["url"])
        if _state["error"] is not None:
            pytest.fail(str(_state["error"]), pytrace=False)
        started = False
        if _run("status", 60).returncode != 0:
            try:
                result = _run("start", 600)
            except subprocess.TimeoutExpired:
                _state["error"] = "scripts/postgres.sh start did not finish within 600 s"
                pytest.fail(str(_state["error"]), pytrace=False)
            if result.returncode != 0:
                _state["error"] = (
                    "the local PostgreSQL server could not start (scripts/postgres.sh start, exit "
                    f"{result.returncode}); the tests marked postgres need it.\n{result.stdout}"
                    f"{result.stderr}"
                )
                pytest.fail(str(_state["error"]), pytrace=False)
            started = "already running" not in result.stdout
        _state["url"] = _run("url", 30).stdout.strip()
        _state["started"] = started
        return str(_state["url"])


@pytest.fixture(scope="session")
def postgres_url() -> str:
    """The SQLAlchemy URL of the local test database (`scripts/postgres.sh`)."""
    return ensure_postgres()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _state["started"]:
        _run("stop", 120)
