"""Commands, statuses and states of the bulk framework, and Nuxeo's status merge (docs/bulk.md).

Field names are Python's (`command_id`, `submit_ms`); `to_datum()` / `from_datum()` convert to
and from the Avro datums of `include/schemas/BulkCommand.avsc` and `BulkStatus.avsc` (Nuxeo's
names: `commandId`, `submitTime`). Times are epoch milliseconds (UTC).
"""

from __future__ import annotations

import enum
import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from streamcore.bulk.errors import BulkDatumError, BulkParamsError, StatusMismatchError

__all__ = [
    "COMMAND_ID_PATTERN",
    "BulkCommand",
    "BulkStatus",
    "State",
    "check_command_id",
    "iso_ms",
    "now_ms",
]


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MILLISECOND = timedelta(milliseconds=1)
# A delta's result key starting with this adds its (integer) value to the stored entry of the
# key without it, instead of replacing it: how a bucket reports a count that sums up.
ADD_PREFIX = "+"


# A command id names the job's folder (STREAMCORE_HOME/bulk/<id>) and its Delta app id
# (bulk/<id>): letters, digits, `_` and `-` only, so no id holds a separator or `..`. UUIDs fit.
# The same pattern is the JSON schema of the bulk DAG's `command_id` Param.
COMMAND_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$"
_COMMAND_ID = re.compile(COMMAND_ID_PATTERN)


def check_command_id(value: object) -> str:
    """`value` if it is a valid command id, else `BulkParamsError` saying what one is."""
    if isinstance(value, str) and _COMMAND_ID.fullmatch(value):
        return value
    raise BulkParamsError(
        f"command id {value!r}: a command id is a UUID or a slug (letters, digits, _ and -, "
        "starting with a letter or digit, at most 128 characters); list the commands with "
        "`streamcore bulk list`",
        "command_id",
    )


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def iso_ms(ms: int) -> str:
    """Epoch milliseconds as ISO 8601 UTC, for messages and the CLI."""
    return (EPOCH + ms * _MILLISECOND).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class State(enum.StrEnum):
    """The life of a command: SCHEDULED → SCROLLING_RUNNING → RUNNING → COMPLETED | ABORTED."""

    UNKNOWN = "UNKNOWN"
    SCHEDULED = "SCHEDULED"
    SCROLLING_RUNNING = "SCROLLING_RUNNING"
    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    ABORTED = "ABORTED"

    @property
    def terminal(self) -> bool:
        """True once nothing will change the command any more."""
        return self in (State.COMPLETED, State.ABORTED)


def _millis(value: Any) -> int | None:
    """Epoch milliseconds of a datum's timestamp: fastavro reads timestamp-millis as datetimes."""
    if value is None or isinstance(value, int):
        return value
    if isinstance(value, datetime):
        return (value - EPOCH) // _MILLISECOND
    raise BulkDatumError(f"a timestamp must be epoch milliseconds or a datetime, not {value!r}")


@dataclass(frozen=True, kw_only=True)
class BulkCommand:
    """What to run: `action` over the documents of table `repository` matching `query` (a
    checked Spark SQL predicate), scrolled into buckets of `bucket_size` ids processed by
    batches of `batch_size`, at most `query_limit` documents (0: all)."""

    id: str
    action: str
    query: str
    params: dict[str, Any] = field(default_factory=dict)
    username: str
    repository: str = "repository"
    bucket_size: int
    batch_size: int
    query_limit: int = 0
    created_ms: int = field(default_factory=now_ms)

    def __post_init__(self) -> None:
        check_command_id(self.id)

    def to_datum(self) -> dict[str, Any]:
        """The BulkCommand.avsc datum; params as a JSON string, as Nuxeo encodes them."""
        return {
            "id": self.id,
            "action": self.action,
            "query": self.query,
            "params": json.dumps(self.params, separators=(",", ":"), sort_keys=True),
            "username": self.username,
            "repository": self.repository,
            "bucketSize": self.bucket_size,
            "batchSize": self.batch_size,
            "queryLimit": self.query_limit,
            "created": self.created_ms,
        }

    @classmethod
    def from_datum(cls, datum: Mapping[str, Any]) -> BulkCommand:
        return cls(
            id=datum["id"],
            action=datum["action"],
            query=datum["query"],
            params=json.loads(datum["params"]) if datum.get("params") else {},
            username=datum["username"],
            repository=datum.get("repository") or "repository",
            bucket_size=datum["bucketSize"],
            batch_size=datum["batchSize"],
            query_limit=datum.get("queryLimit") or 0,
            created_ms=_millis(datum["created"]) or 0,
        )


# Python field name → Avro field name, for the fields that are copied as they are.
_STATUS_NAMES = {
    "command_id": "commandId",
    "action": "action",
    "username": "username",
    "delta": "delta",
    "total": "total",
    "processed": "processed",
    "skipped": "skipped",
    "error_count": "errorCount",
    "error_message": "errorMessage",
    "error_code": "errorCode",
    "query_limit_reached": "queryLimitReached",
    "result": "result",
}
_STATUS_TIMES = {
    "submit_ms": "submitTime",
    "scroll_start_ms": "scrollStartTime",
    "scroll_end_ms": "scrollEndTime",
    "processing_start_ms": "processingStartTime",
    "processing_end_ms": "processingEndTime",
    "completed_ms": "completedTime",
}


@dataclass(frozen=True, kw_only=True)
class BulkStatus:
    """Where a command stands. A full status (`delta=False`) is the whole state; a delta carries
    only what changed (None: unchanged) and is folded into the full one by `merge`."""

    command_id: str
    action: str | None = None
    username: str | None = None
    delta: bool = False
    state: State | None = None
    total: int | None = None
    processed: int | None = None
    skipped: int | None = None
    error_count: int | None = None
    error_message: str | None = None
    error_code: int | None = None
    submit_ms: int | None = None
    scroll_start_ms: int | None = None
    scroll_end_ms: int | None = None
    processing_start_ms: int | None = None
    processing_end_ms: int | None = None
    completed_ms: int | None = None
    query_limit_reached: bool | None = None
    result: dict[str, str] | None = None

    def __post_init__(self) -> None:
        if self.state is not None and not isinstance(self.state, State):
            object.__setattr__(self, "state", State(self.state))

    def merge(self, delta: BulkStatus) -> BulkStatus:
        """This status with `delta` folded in, as Nuxeo's `BulkStatus.merge`: the state is
        overwritten unless this one is ABORTED; counts add up; the processing start takes the
        min and its end the max; the first error message and code stay; other set fields
        replace; result entries replace, or add up for keys starting with `+`. Then a status
        with `total > 0` and `processed + skipped >= total` becomes COMPLETED (unless ABORTED),
        with a completion time (now, if none was given)."""
        if delta.command_id != self.command_id:
            raise StatusMismatchError(
                f"cannot merge a status of command {delta.command_id} into one of {self.command_id}"
            )
        changes: dict[str, Any] = {}
        if delta.state is not None and self.state is not State.ABORTED:
            changes["state"] = delta.state
        for name in ("processed", "skipped", "error_count"):
            added = getattr(delta, name)
            if added is not None:
                changes[name] = (getattr(self, name) or 0) + added
        for name, pick in (("processing_start_ms", min), ("processing_end_ms", max)):
            given, current = getattr(delta, name), getattr(self, name)
            if given is not None:
                changes[name] = given if current is None else pick(given, current)
        for name in ("error_message", "error_code"):
            if getattr(self, name) is None and getattr(delta, name) is not None:
                changes[name] = getattr(delta, name)
        for name in (
            "action",
            "username",
            "total",
            "submit_ms",
            "scroll_start_ms",
            "scroll_end_ms",
            "completed_ms",
            "query_limit_reached",
        ):
            if getattr(delta, name) is not None:
                changes[name] = getattr(delta, name)
        if delta.result is not None:
            changes["result"] = _merged_result(self.result or {}, delta.result)
        merged = replace(self, **changes)
        return merged._completed()

    def _completed(self) -> BulkStatus:
        state = self.state
        if (
            state is not State.ABORTED
            and (self.total or 0) > 0
            and (self.processed or 0) + (self.skipped or 0) >= (self.total or 0)
        ):
            state = State.COMPLETED
        if state is State.COMPLETED or state is State.ABORTED:
            return replace(self, state=state, completed_ms=self.completed_ms or now_ms())
        return self

    def to_datum(self) -> dict[str, Any]:
        """The BulkStatus.avsc datum (timestamps in epoch milliseconds, the state's name)."""
        datum = {avro: getattr(self, name) for name, avro in _STATUS_NAMES.items()}
        datum.update({avro: getattr(self, name) for name, avro in _STATUS_TIMES.items()})
        datum["state"] = self.state.value if self.state is not None else None
        return datum

    @classmethod
    def from_datum(cls, datum: Mapping[str, Any]) -> BulkStatus:
        values: dict[str, Any] = {name: datum.get(avro) for name, avro in _STATUS_NAMES.items()}
        values.update({name: _millis(datum.get(avro)) for name, avro in _STATUS_TIMES.items()})
        values["delta"] = bool(values["delta"])
        state = datum.get("state")
        values["state"] = State(state) if state is not None else None
        if values["result"] is not None:
            values["result"] = dict(values["result"])
        return cls(**values)


def _merged_result(current: Mapping[str, str], delta: Mapping[str, str]) -> dict[str, str]:
    merged = dict(current)
    for key, value in delta.items():
        if key.startswith(ADD_PREFIX):
            name = key[len(ADD_PREFIX) :]
            merged[name] = str(int(merged.get(name) or 0) + int(value))
        else:
            merged[key] = value
    return merged
