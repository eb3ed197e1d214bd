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

import pytest
from scripted_server import ScriptedServer

SERVER = ScriptedServer(
    "postgres.sh",
    "PostgreSQL server",
    "postgres",
    start_timeout=600,
    address=lambda server: server.run("url", 30).stdout.strip(),
)


def ensure_postgres() -> str:
    """The URL of a running local server, started if needed (once per session)."""
    return SERVER.ensure()


@pytest.fixture(scope="session")
def postgres_url() -> str:
    """The SQLAlchemy URL of the local test database (`scripts/postgres.sh`)."""
    return ensure_postgres()


# trylast: after the session fixtures are torn down (pytest's runner does that in this hook),
# so nothing still connected sees its server go away.
@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    SERVER.stop_if_started(120)
