"""The audit job's rules on whole entries (`streamcore.audit.rules`), checked at publish: driven
by the rule list itself, every rule refuses an entry that breaks it, naming the rule and the fix,
before anything is written, and accepts one at its edge. The same rules in the job:
tests/integration/test_audit_job.py (`test_every_rule_the_job_enforces_is_refused_at_publish`)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from audit_support import DATABASES, entry

from streamcore.audit import QUEUE, AuditEntry, InvalidAuditEntryError, audit_record, publish
from streamcore.audit.rules import (
    KNOWN_EVENT_TYPES,
    KnownValue,
    NotAfter,
    RequiredWith,
    configured_rules,
    publish_rules,
)
from streamcore.config import load_config
from streamcore.errors import ConfigError
from streamcore.outbox.schema import jobs

Change = Callable[[Any], dict[str, Any]]
# Per kind of rule: the fields that break a rule of that kind, and fields at its edge that keep
# it. A new kind of rule without its cases fails every test here.
BREAKS: dict[type, Change] = {
    KnownValue: lambda rule: {rule.column: "appUnlisted"},
    RequiredWith: lambda rule: {rule.column: None},  # entry() sets every field
    NotAfter: lambda rule: {rule.column: datetime.now(UTC) + timedelta(seconds=rule.skew + 60)},
}
KEEPS: dict[type, Change] = {
    KnownValue: lambda rule: {rule.column: sorted(rule.values)[-1]},
    RequiredWith: lambda rule: {rule.column: None, rule.when: None},
    NotAfter: lambda rule: {rule.column: datetime.now(UTC) + timedelta(seconds=rule.skew - 10)},
}
RULES = publish_rules().rules


def _case(cases: dict[type, Change], rule: Any) -> dict[str, Any]:
    if type(rule) not in cases:
        pytest.fail(f"no case for {type(rule).__name__} ({rule.name}): add it to this module")
    return entry(1, **cases[type(rule)](rule))


@pytest.mark.parametrize("outbox_url", DATABASES, indirect=True)
@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.name)
def test_every_rule_is_refused_at_publish_naming_the_rule_and_the_fix(
    rule: Any, make_outbox, registry
) -> None:
    outbox = make_outbox()
    bad = _case(BREAKS, rule)
    for given in (bad, AuditEntry.from_dict(bad)):  # a mapping, and a dataclass made from it
        with pytest.raises(InvalidAuditEntryError) as refused, outbox.engine.begin() as conn:
            publish(conn, given, registry=registry)
        message = str(refused.value)
        assert refused.value.field == rule.column
        assert message.startswith("audit entry 'e-00001': ")
        assert f"The audit job would refuse the entry by its rule {rule.name}" in message
        assert any(fix in message for fix in ("; use ", "; give ")), message
        with pytest.raises(InvalidAuditEntryError):
            audit_record(given)  # what computations append is checked the same way
    with outbox.engine.connect() as conn:
        assert conn.execute(sa.select(jobs.c.id).where(jobs.c.queue == QUEUE)).all() == []

    with outbox.engine.begin() as conn:
        assert publish(conn, _case(KEEPS, rule), registry=registry) == "e-00001"


def test_the_rules_cover_what_the_issue_found() -> None:
    """Issue 25: an event type outside the job's list and a document event without a path were
    published, then refused by the job; and the job refuses event dates in its future."""
    assert {(type(rule), rule.column) for rule in RULES} == {
        (KnownValue, "event_type"),
        (RequiredWith, "doc_path"),
        (NotAfter, "event_date"),
    }


def test_an_applications_event_types_come_from_the_configuration(monkeypatch) -> None:
    monkeypatch.setenv("STREAMCORE_AUDIT_EVENT_TYPES", "appReportExported, appReportShared")
    rules = configured_rules(load_config())
    assert rules.event_types == (*KNOWN_EVENT_TYPES, "appReportExported", "appReportShared")
    [known] = [rule for rule in rules.rules if isinstance(rule, KnownValue)]
    assert {"appReportExported", "download"} <= known.values

    monkeypatch.setenv("STREAMCORE_AUDIT_EVENT_TYPES", "appReportExported, report exported")
    with pytest.raises(ConfigError, match=r"'report exported', which no audit entry can carry"):
        configured_rules(load_config())
