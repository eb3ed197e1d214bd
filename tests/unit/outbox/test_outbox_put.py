"""`put` inside the caller's transaction, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import math

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from streamcore.codecs import get_codec
from streamcore.outbox import (
    DependencyNotFoundError,
    DuplicateJobError,
    InvalidPayloadError,
    OutboxError,
    SchemaMissingError,
    UnknownQueueError,
    VirtualQueue,
    create_engine,
    put,
    put_many,
)
from streamcore.outbox.schema import INIT, jobs

AVRO_SCHEMA = {
    "type": "record",
    "name": "Mail",
    "namespace": "test.outbox",
    "fields": [{"name": "to", "type": "string"}, {"name": "n", "type": "int"}],
}


def job_rows(engine: sa.Engine) -> list[sa.Row]:
    with engine.connect() as conn:
        return list(conn.execute(sa.select(jobs).order_by(jobs.c.seq)))


def test_rollback_leaves_no_job_and_commit_makes_it_visible(make_outbox, registry):
    registry.register("mail", lambda p: p)
    outbox = make_outbox()
    with pytest.raises(RuntimeError), outbox.engine.begin() as conn:
        put(conn, "mail", {"to": "a"}, registry=registry)
        raise RuntimeError("business write failed")
    assert job_rows(outbox.engine) == []
    with outbox.engine.begin() as conn:
        job_id = put(conn, "mail", {"to": "b"}, id="job-1", registry=registry)
    rows = job_rows(outbox.engine)
    assert job_id == "job-1"
    assert [(r.queue, r.id, r.status, r.tries) for r in rows] == [("mail", "job-1", INIT, 0)]
    assert VirtualQueue(outbox).consume_one("mail") == {"to": "b"}


def test_business_row_and_job_commit_together(make_outbox, registry):
    registry.register("mail", lambda p: p)
    outbox = make_outbox()
    accounts = sa.Table("accounts", sa.MetaData(), sa.Column("name", sa.String, primary_key=True))
    accounts.create(outbox.engine)
    with outbox.engine.begin() as conn:
        conn.execute(accounts.insert().values(name="ada"))
        put(conn, "mail", {"welcome": "ada"}, registry=registry)
    with pytest.raises(sa.exc.IntegrityError), outbox.engine.begin() as conn:
        put(conn, "mail", {"welcome": "ada again"}, registry=registry)
        conn.execute(accounts.insert().values(name="ada"))  # duplicate: the whole tx fails
    assert [r.payload for r in job_rows(outbox.engine)] == [b'{"welcome":"ada"}']


def test_put_through_an_orm_session(make_outbox, registry):
    registry.register("mail", lambda p: p)
    outbox = make_outbox()
    with Session(outbox.engine) as session:
        put(session, "mail", [1, 2], registry=registry)
        session.rollback()
        put(session, "mail", [3], registry=registry)
        session.commit()
    assert [bytes(r.payload) for r in job_rows(outbox.engine)] == [b"[3]"]


def test_put_many_is_all_or_nothing(make_outbox, registry):
    registry.register("q", lambda p: p)
    outbox = make_outbox()
    with outbox.engine.begin() as conn:
        ids = put_many(conn, "q", [1, 2, 3], registry=registry)
    assert len(set(ids)) == 3
    duplicate = pytest.raises(DuplicateJobError, match="job id 'b' exists already")
    with duplicate, outbox.engine.begin() as conn:
        put_many(conn, "q", [4, 5], ids=["a", "b"], registry=registry)
        put_many(conn, "q", [6], ids=["b"], registry=registry)
    assert len(job_rows(outbox.engine)) == 3
    # SQLite inserts 64 rows a statement: a duplicate in a later one still undoes the earlier.
    many = [f"m{n}" for n in range(149)] + ["m3"]
    duplicate = pytest.raises(DuplicateJobError, match="1 of 150 job ids exist")
    with duplicate, outbox.engine.begin() as conn:
        put_many(conn, "q", list(range(150)), ids=many, registry=registry)
    assert len(job_rows(outbox.engine)) == 3


def test_put_many_keeps_the_batch_order_and_fills_every_column(make_outbox, registry):
    """Workers claim in `seq` order: a batch must land in the order it was given (PostgreSQL
    inserts it from arrays in one statement, SQLite 64 rows a statement), with its dependencies
    and timestamps."""
    registry.register("q", lambda p: p)
    outbox = make_outbox()
    with outbox.engine.begin() as conn:
        put(conn, "q", 0, id="first", registry=registry)
    ids = [f"job-{n:03d}" for n in range(150, 0, -1)]  # not in sort order
    with outbox.engine.begin() as conn:
        put_many(conn, "q", list(range(150)), ids=ids, depends_on=("q", "first"), registry=registry)
    rows = job_rows(outbox.engine)[1:]
    assert [r.id for r in rows] == ids
    assert {(r.status, r.tries, r.depends_queue, r.depends_id) for r in rows} == {
        (INIT, 0, "q", "first")
    }
    assert len({r.created_ms for r in rows}) == 1 and rows[0].created_ms == rows[0].updated_ms
    assert [json.loads(bytes(r.payload)) for r in rows] == list(range(150))


def test_duplicate_id_is_a_clear_error_and_keeps_postgres_tx_usable(make_outbox, registry):
    registry.register("q", lambda p: p)
    outbox = make_outbox()
    with outbox.engine.begin() as conn:
        put(conn, "q", 1, id="x", registry=registry)
        with pytest.raises(DuplicateJobError, match="unique per queue"):
            put(conn, "q", 2, id="x", registry=registry)
        put(conn, "q", 3, id="y", registry=registry)  # the transaction still works
    assert [r.id for r in job_rows(outbox.engine)] == ["x", "y"]


def test_validation_errors_name_the_fix(make_outbox, registry):
    registry.register("even", lambda p: p, valid_payload=lambda p: p % 2 == 0)
    registry.register("any", lambda p: p)
    outbox = make_outbox()
    with outbox.engine.begin() as conn:
        with pytest.raises(UnknownQueueError, match="register"):
            put(conn, "nobody", 1, registry=registry)
        with pytest.raises(InvalidPayloadError, match="valid_payload rejected 3"):
            put(conn, "even", 3, registry=registry)
        with pytest.raises(InvalidPayloadError, match="cannot be encoded"):
            put(conn, "any", math.nan, registry=registry)
        with pytest.raises(DependencyNotFoundError, match=r"depends_on=\('even', 'missing'\)"):
            put(conn, "even", 2, depends_on=("even", "missing"), registry=registry)
        with pytest.raises(OutboxError, match=r"\(queue, id\)"):
            put(conn, "even", 2, depends_on=("even",), registry=registry)
    with pytest.raises(OutboxError, match="not an Engine"):
        put(outbox.engine, "even", 2, registry=registry)
    assert job_rows(outbox.engine) == []


def test_missing_table_is_a_clear_error(tmp_path, registry):
    registry.register("q", lambda p: p)
    engine = create_engine(f"sqlite:///{tmp_path / 'empty.db'}")
    with pytest.raises(SchemaMissingError, match="create_schema"), engine.begin() as conn:
        put(conn, "q", 1, registry=registry)
    engine.dispose()


def test_avro_payloads_round_trip(make_outbox, registry):
    got = []
    registry.register("mail", got.append, codec="avro", schema=AVRO_SCHEMA)
    outbox = make_outbox()
    with outbox.engine.begin() as conn:
        put(conn, "mail", {"to": "ada", "n": 1}, registry=registry)
        with pytest.raises(InvalidPayloadError, match="cannot be encoded"):
            put(conn, "mail", {"to": "ada"}, registry=registry)
    raw = bytes(job_rows(outbox.engine)[0].payload)
    assert raw[:2] == b"\xc3\x01"  # Avro single-object encoding
    assert get_codec("avro", AVRO_SCHEMA).decode(raw) == {"to": "ada", "n": 1}
    VirtualQueue(outbox).consume_one("mail")
    assert got == [{"to": "ada", "n": 1}]


def test_depends_on_from_the_queue_option(make_outbox, registry):
    registry.register("orders", lambda p: p)
    registry.register(
        "invoices", lambda p: p, depends_on=lambda p: ("orders", p["order"]) if p else None
    )
    outbox = make_outbox()
    with outbox.engine.begin() as conn:
        put(conn, "orders", {"n": 1}, id="o1", registry=registry)
        put(conn, "invoices", {"order": "o1"}, registry=registry)
        put(conn, "invoices", None, registry=registry)
        with pytest.raises(DependencyNotFoundError):
            put(conn, "invoices", {"order": "o2"}, registry=registry)
    deps = [(r.depends_queue, r.depends_id) for r in job_rows(outbox.engine)]
    assert deps == [(None, None), ("orders", "o1"), (None, None)]


def test_default_ids_are_uuid7_in_put_order_of_milliseconds(make_outbox, registry) -> None:
    # Time-ordered ids keep the rows of a put together in the (queue, id) index.
    import uuid

    from streamcore.outbox.put import new_ids

    registry.define_queue("q")
    outbox = make_outbox()
    with outbox.engine.begin() as conn:
        ids = put_many(conn, "q", list(range(50)), registry=registry)
    assert len(set(ids)) == 50
    for job_id in ids:
        parsed = uuid.UUID(job_id)
        assert (parsed.version, parsed.variant, parsed.hex) == (7, uuid.RFC_4122, job_id)
    assert new_ids(1, 1_000)[0] < new_ids(1, 1_001)[0]  # the first 48 bits are the milliseconds
    assert new_ids(3, 0x0123456789AB)[2].startswith("0123456789ab7")
    assert len(set(new_ids(10_000, 5))) == 10_000
