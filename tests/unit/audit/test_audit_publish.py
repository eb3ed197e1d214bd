"""`publish` in the caller's transaction, on SQLite and PostgreSQL, relayed to the local and the
memory log: rolled back with the transaction, appended once after a commit, refused before
anything is written when the entry is bad."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from audit_support import DATABASES, LOGS, entry, event_ids, read_log
from sqlalchemy.orm import Session

from streamcore.audit import QUEUE, AuditError, InvalidAuditEntryError, publish, relay
from streamcore.outbox import DONE, DuplicateJobError, Outbox, Registry, VirtualQueue
from streamcore.outbox.schema import jobs

pytestmark = pytest.mark.parametrize("outbox_url", DATABASES, indirect=True)
on_logs = pytest.mark.parametrize("log_manager", LOGS, indirect=True)

documents = sa.Table(
    "documents",
    sa.MetaData(),
    sa.Column("id", sa.String(40), primary_key=True),
    sa.Column("title", sa.String(200)),
)


def outbox_jobs(outbox: Outbox) -> dict[str, str]:
    with outbox.engine.connect() as conn:
        rows = conn.execute(sa.select(jobs.c.id, jobs.c.status).where(jobs.c.queue == QUEUE))
        return {row.id: row.status for row in rows}


def business_rows(outbox: Outbox) -> list[str]:
    with outbox.engine.connect() as conn:
        return sorted(conn.execute(sa.select(documents.c.id)).scalars())


@pytest.fixture
def outbox(make_outbox, registry, log_manager) -> Outbox:
    relay(log_manager, registry=registry)
    made = make_outbox()
    documents.create(made.engine, checkfirst=True)
    return made


@on_logs
def test_a_rolled_back_entry_never_reaches_the_log(outbox, registry, log_manager) -> None:
    with (
        pytest.raises(RuntimeError, match="business write failed"),
        outbox.engine.begin() as conn,
    ):
        conn.execute(documents.insert().values(id="doc-1", title="draft"))
        publish(conn, entry(1), registry=registry)
        raise RuntimeError("business write failed")
    assert business_rows(outbox) == []
    assert outbox_jobs(outbox) == {}
    with outbox.engine.begin() as conn:  # a later commit goes through alone
        conn.execute(documents.insert().values(id="doc-2", title="kept"))
        publish(conn, entry(2), registry=registry)
    with outbox:
        records = read_log(log_manager, 1)
    assert event_ids(records) == ["e-00002"]
    assert business_rows(outbox) == ["doc-2"]


@on_logs
def test_a_committed_entry_is_appended_once(outbox, registry, log_manager) -> None:
    with outbox.engine.begin() as conn:
        conn.execute(documents.insert().values(id="doc-1", title="created"))
        assert publish(conn, entry(1), registry=registry) == "e-00001"
    with outbox:
        assert event_ids(read_log(log_manager, 1)) == ["e-00001"]
        outbox.stop()
    assert event_ids(read_log(log_manager, 2, timeout=0.5)) == ["e-00001"]  # once
    assert outbox_jobs(outbox) == {"e-00001": DONE}
    assert log_manager.appends == [1]


@on_logs
def test_publish_takes_an_orm_session(outbox, registry, log_manager) -> None:
    with Session(outbox.engine) as session, session.begin():
        session.execute(documents.insert().values(id="doc-1", title="created"))
        publish(session, entry(1), registry=registry)
    [offset] = VirtualQueue(outbox).consume_one(QUEUE)
    assert str(offset) == "audit-entries-00:+0"
    assert event_ids(read_log(log_manager, 1)) == ["e-00001"]


@on_logs
def test_a_bad_entry_is_refused_and_writes_nothing(outbox, registry, log_manager) -> None:
    with outbox.engine.begin() as conn:
        conn.execute(documents.insert().values(id="doc-1", title="created"))
        with pytest.raises(InvalidAuditEntryError, match="event_date is missing"):
            publish(conn, entry(1, event_date=None), registry=registry)
        with pytest.raises(InvalidAuditEntryError, match="unknown field 'user'"):
            publish(conn, {**entry(2), "user": "ada"}, registry=registry)
        publish(conn, entry(3), registry=registry)  # the transaction is still usable
    assert business_rows(outbox) == ["doc-1"]
    assert outbox_jobs(outbox) == {"e-00003": "init"}
    VirtualQueue(outbox).consume_all(QUEUE)
    assert event_ids(read_log(log_manager, 1)) == ["e-00003"]


@on_logs
def test_an_event_id_in_the_outbox_cannot_be_published_again(outbox, registry) -> None:
    with outbox.engine.begin() as conn:
        publish(conn, entry(1), registry=registry)
    with (
        outbox.engine.begin() as conn,
        pytest.raises(DuplicateJobError, match="'e-00001' exists already"),
    ):
        publish(conn, entry(1, comment="again"), registry=registry)
    assert outbox_jobs(outbox) == {"e-00001": "init"}


def test_publishing_needs_no_set_up_but_refuses_a_foreign_audit_queue(
    make_outbox, registry
) -> None:
    outbox = make_outbox()  # a process that only publishes: no relay registered
    with outbox.engine.begin() as conn:
        publish(conn, entry(1), registry=registry)
    assert outbox_jobs(outbox) == {"e-00001": "init"}
    assert registry.get(QUEUE).ordered
    foreign = Registry()
    foreign.define_queue(QUEUE)  # JSON payloads: not what publish puts
    with outbox.engine.begin() as conn, pytest.raises(AuditError, match="not the Record codec"):
        publish(conn, entry(2), registry=foreign)
