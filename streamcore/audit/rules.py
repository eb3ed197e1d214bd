"""The audit job's rules on whole entries, declared once for both sides: `publish` and
`audit_record` check them here, and jobs/audit.py adds each to its expectation suite as the
Great Expectations expectation of `EntryRule.expectation`, whose Spark condition quarantines the
rows that break it. With the rules of the schema's field attributes (`checks`), which the job's
suite is generated from too, they are every row-level rule the job enforces: an entry that
publish accepts is one the job lands. A rule known only to the job would let one entry stop
all landing (the job's failure threshold is 0 by default).

Each kind of rule says what breaks it in Python (`broken`) and in Great Expectations' terms
(`expectation`), from the same fields, side by side.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from streamcore.audit.errors import InvalidAuditEntryError
from streamcore.config import StreamcoreConfig, load_config
from streamcore.errors import ConfigError

__all__ = [
    "KNOWN_EVENT_TYPES",
    "MAX_FUTURE_SKEW",
    "EntryRule",
    "EntryRules",
    "KnownValue",
    "NotAfter",
    "RequiredWith",
    "configured_rules",
    "publish_rules",
]


# Nuxeo's audited events, and those of streamcore's bulk actions and recovery; an application
# adds its own with `[audit] event_types` (StreamcoreConfig.audit_event_types).
KNOWN_EVENT_TYPES = (
    "documentCreated",
    "documentCreatedByCopy",
    "documentDuplicated",
    "documentModified",
    "documentMoved",
    "documentRemoved",
    "documentTrashed",
    "documentUntrashed",
    "documentRestored",
    "documentLocked",
    "documentUnlocked",
    "documentCheckedIn",
    "documentCheckedOut",
    "documentSecurityUpdated",
    "documentProxyPublished",
    "sectionContentPublished",
    "documentPublicationApproved",
    "documentPublicationRejected",
    "lifecycle_transition_event",
    "addedToCollection",
    "removedFromCollection",
    "documentTagUpdated",
    "download",
    "loginSuccess",
    "loginFailed",
    "logout",
    "bulkActionStarted",
    "bulkActionCompleted",
    "recoveryRedrive",
    "recoverySkip",
    "recoveryReset",
    "recoveryOutboxRetry",
    "recoveryOutboxPurge",
)
MAX_FUTURE_SKEW = 600.0
"""Seconds an event date may lie ahead of the clock: the audit job's default
`--max-future-skew`, and what `publish` allows."""

Get = Callable[[str], Any]
"""A field's value as the entry keeps it, except `event_date`: epoch milliseconds."""


@dataclass(frozen=True)
class KnownValue:
    """`column` is null or one of `values`."""

    column: str
    values: frozenset[str]
    notes: str
    fix: str

    @property
    def name(self) -> str:
        return f"expect_column_values_to_be_in_set({self.column})"

    def expectation(self, now_ms: int) -> tuple[str, dict[str, Any]]:
        return "expect_column_values_to_be_in_set", {
            "column": self.column,
            "value_set": sorted(self.values),
        }

    def broken(self, get: Get, now_ms: int) -> bool:
        value = get(self.column)
        return value is not None and value not in self.values

    def problem(self, get: Get, now_ms: int) -> str:
        value = get(self.column)
        return f"{self.column} {value!r} is not one the audit job knows ({self.notes}); {self.fix}"


@dataclass(frozen=True)
class RequiredWith:
    """`column` is set whenever `when` is."""

    column: str
    when: str
    notes: str

    @property
    def name(self) -> str:
        return f"expect_column_values_to_not_be_null({self.column}) where {self.when} IS NOT NULL"

    def expectation(self, now_ms: int) -> tuple[str, dict[str, Any]]:
        return "expect_column_values_to_not_be_null", {
            "column": self.column,
            "row_condition": f"{self.when} IS NOT NULL",
            "condition_parser": "spark",
        }

    def broken(self, get: Get, now_ms: int) -> bool:
        return get(self.when) is not None and get(self.column) is None

    def problem(self, get: Get, now_ms: int) -> str:
        return (
            f"{self.column} is missing while {self.when} is {get(self.when)!r} ({self.notes}); "
            f"give {self.column}, or leave {self.when} out if the event is about no document"
        )


@dataclass(frozen=True)
class NotAfter:
    """`column` (a timestamp) is at most `skew` seconds after the clock."""

    column: str
    skew: float
    notes: str

    @property
    def name(self) -> str:
        return f"expect_column_values_to_be_between({self.column})"

    def bound_ms(self, now_ms: int) -> int:
        # Whole seconds, as GX keeps the bound; a later clock never gives an earlier bound, so
        # what passes at publish passes the job, which runs later.
        return (now_ms + int(self.skew * 1000)) // 1000 * 1000

    def expectation(self, now_ms: int) -> tuple[str, dict[str, Any]]:
        # A datetime, as GX keeps it: a string bound would be parsed into one by GX and no
        # longer match this expectation, whose metrics the row-check pass gives GX.
        bound = datetime.fromtimestamp(self.bound_ms(now_ms) / 1000, UTC)
        return "expect_column_values_to_be_between", {"column": self.column, "max_value": bound}

    def broken(self, get: Get, now_ms: int) -> bool:
        value: int = get(self.column)  # milliseconds since 1970
        return value > self.bound_ms(now_ms)

    def problem(self, get: Get, now_ms: int) -> str:
        ahead = (get(self.column) - now_ms) / 1000
        return (
            f"{self.column} is {ahead:,.0f} s after this machine's clock, more than the "
            f"{self.skew:g} s the audit job allows ({self.notes}); give the time the event "
            "happened, in milliseconds since 1970 UTC if it is a number (or set this machine's "
            "clock)"
        )


EntryRule = KnownValue | RequiredWith | NotAfter
"""A rule: its `name` (the job's, as quarantine rows and the Data Docs show it), its
`expectation(now_ms)` (Great Expectations type and kwargs), `broken(get, now_ms)`, and the
`problem(get, now_ms)` an entry that breaks it has, with the fix."""


@dataclass(frozen=True)
class EntryRules:
    """The rules of one configuration, in the order they are checked and listed."""

    rules: tuple[EntryRule, ...]
    event_types: tuple[str, ...]

    def check(self, get: Get, label: str) -> None:
        """InvalidAuditEntryError naming the first rule the entry breaks and the fix."""
        now_ms = time.time_ns() // 1_000_000
        for rule in self.rules:
            if rule.broken(get, now_ms):
                raise InvalidAuditEntryError(
                    f"{label}: {rule.problem(get, now_ms)}. The audit job would refuse the "
                    f"entry by its rule {rule.name}",
                    rule.column,
                )


def entry_rules(
    event_types: Iterable[str] = (), *, max_future_skew: float = MAX_FUTURE_SKEW
) -> EntryRules:
    """The rules, with `event_types` accepted besides `KNOWN_EVENT_TYPES`."""
    types = tuple(dict.fromkeys((*KNOWN_EVENT_TYPES, *event_types)))
    rules: tuple[EntryRule, ...] = (
        KnownValue(
            "event_type",
            frozenset(types),
            "Nuxeo's audited events, streamcore's bulk and recovery actions, and [audit] "
            "event_types",
            "use a known type, or add yours to [audit] event_types in include/streamcore.toml "
            "(STREAMCORE_AUDIT_EVENT_TYPES), which the audit job reads too",
        ),
        RequiredWith("doc_path", "doc_id", "an event about a document says where it was"),
        NotAfter("event_date", max_future_skew, "no event date in the future"),
    )
    return EntryRules(rules, types)


def configured_rules(
    config: StreamcoreConfig, *, max_future_skew: float = MAX_FUTURE_SKEW
) -> EntryRules:
    """The rules with the event types of `config` (`[audit] event_types`), each checked
    against the schema's rules for `event_type` (ConfigError naming it)."""
    from streamcore.audit.entry import rules as field_rules

    [type_rule] = [rule for rule in field_rules() if rule.name == "event_type"]
    for event_type in config.audit_event_types:
        if not _fits(event_type, type_rule.pattern, type_rule.max_length):
            raise ConfigError(
                f"[audit] event_types has {event_type!r}, which no audit entry can carry: an "
                f"event_type matches {type_rule.pattern.pattern if type_rule.pattern else ''} "
                f"and has at most {type_rule.max_length} characters; fix or remove it"
            )
    return entry_rules(config.audit_event_types, max_future_skew=max_future_skew)


def _fits(value: str, pattern: re.Pattern[str] | None, max_length: int | None) -> bool:
    return (max_length is None or len(value) <= max_length) and (
        pattern is None or pattern.search(value) is not None
    )


@functools.cache
def publish_rules() -> EntryRules:
    """The rules `publish` checks: those of `load_config()`, read once per process."""
    return configured_rules(load_config())
