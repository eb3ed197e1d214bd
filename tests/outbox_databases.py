"""Databases for the outbox tests: every test that uses `outbox_url` runs once on SQLite and once
on the real PostgreSQL server (marked `postgres`). Each PostgreSQL test gets its own schema
(search_path in the URL, so worker and LISTEN connections see it too), dropped afterwards.

Loaded from tests/conftest.py (`pytest_plugins`), with `postgres_server`.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from streamcore.outbox import Outbox, Registry


def scratch_schema_url(base_url: str) -> tuple[str, str]:
    """A fresh schema in the test database and a URL whose connections use it."""
    schema = f"t_{uuid.uuid4().hex[:12]}"
    engine = sa.create_engine(base_url)
    with engine.begin() as conn:
        conn.execute(sa.text(f"CREATE SCHEMA {schema}"))
    engine.dispose()
    return f"{base_url}?options=-csearch_path%3D{schema}", schema


def drop_schema(base_url: str, schema: str) -> None:
    engine = sa.create_engine(base_url)
    with engine.begin() as conn:
        conn.execute(sa.text(f"DROP SCHEMA IF EXISTS {schema} CASCADE"))
    engine.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def outbox_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The URL of an empty outbox database: SQLite file, or a PostgreSQL scratch schema."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'outbox.db'}"
        return
    from postgres_server import ensure_postgres

    base = ensure_postgres()
    url, schema = scratch_schema_url(base)
    yield url
    drop_schema(base, schema)


@pytest.fixture
def registry() -> Registry:
    """A registry of this test only (the process-wide one stays empty)."""
    return Registry()


@pytest.fixture
def make_outbox(outbox_url: str, registry: Registry) -> Iterator[Callable[..., Outbox]]:
    """`make_outbox(**options)`: an Outbox on the test database with fast test timings
    (poll 0.1 s), schema created, closed at the end of the test."""
    made: list[Outbox] = []

    def make(**options: Any) -> Outbox:
        options.setdefault("poll_interval", 0.1)
        options.setdefault("watcher_interval", 0.05)
        outbox = Outbox(outbox_url, registry=registry, **options)
        outbox.create_schema()
        made.append(outbox)
        return outbox

    yield make
    for outbox in made:
        outbox.close()
