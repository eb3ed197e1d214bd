"""Where a repair points, as a person writes it: a record (`P:O`), a time (ISO 8601), and where a
group is reset to (`RESET_TO`: the end, the start, an offset, a date, a watermark).

    parse_offset("0:42", None, "--offsets")                 # (0, 42)
    parse_date_ms("2026-11-24T08:00:00Z", "--since")        # epoch ms
    parse_reset_target("date", "2026-11-24", option="reset_value")  # (ResetTarget, None)

`streamcore position`, `streamcore recovery`, jobs/recovery.py and the DAG streamcore_recovery
all parse with these, so one text means one position everywhere. A text that does not parse
raises `SelectionError` naming `option` (the command-line option or Param it came from); a face
turns it into its own refusal (the CLI's usage error, Airflow's failure).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

from streamcore.recovery.errors import SelectionError

__all__ = [
    "RESET_TO",
    "ResetTarget",
    "parse_date_ms",
    "parse_offset",
    "parse_reset_target",
]

RESET_TO = ("end", "start", "offset", "date", "watermark")
"""The kinds of reset target, as `parse_reset_target` takes them (the recovery DAG's choices)."""

_OFFSET = re.compile(r"^\s*(?:(\d+)\s*:\s*\+?)?(\d+)\s*$")


@dataclass(frozen=True, slots=True)
class ResetTarget:
    """Where a reset goes, exactly one of: `offset` (with `partition`), `timestamp_ms` (the
    first record appended at or after it), `watermark` (the first record whose watermark is at
    least it), `start` (the oldest retained record), `end` (past the last record)."""

    offset: int | None = None
    timestamp_ms: int | None = None
    watermark: int | None = None
    start: bool = False
    end: bool = False

    def __post_init__(self) -> None:
        given = [
            self.offset is not None,
            self.timestamp_ms is not None,
            self.watermark is not None,
            self.start,
            self.end,
        ]
        if sum(given) != 1:
            raise SelectionError(
                "a reset goes to exactly one of: an offset, a timestamp, a watermark, the start, "
                "the end"
            )

    @property
    def label(self) -> str:
        if self.offset is not None:
            return f"to-offset {self.offset}"
        if self.timestamp_ms is not None:
            return f"to-timestamp {self.timestamp_ms}"
        if self.watermark is not None:
            return f"to-watermark {self.watermark}"
        return "to-start" if self.start else "to-end"


def parse_offset(value: str, partition: int | None, option: str) -> tuple[int, int]:
    """`P:O` (also `P:+O`), or `O` with `partition` given → (partition, offset)."""
    match = _OFFSET.match(value)
    if not match:
        raise SelectionError(
            f"{option} {value!r}: expected PARTITION:OFFSET such as 0:42 (or OFFSET with -p)"
        )
    part, offset = match.groups()
    if part is None:
        if partition is None:
            raise SelectionError(f"{option} {value}: give PARTITION:OFFSET, or -p PARTITION")
        return partition, int(offset)
    if partition is not None and int(part) != partition:
        raise SelectionError(f"{option} {value} names partition {part} but -p is {partition}")
    return int(part), int(offset)


def parse_date_ms(value: str, option: str) -> int:
    """ISO 8601 date or date-time → epoch ms; no zone means UTC."""
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise SelectionError(
            f"{option} {value!r}: not an ISO 8601 date, e.g. 2024-05-01T10:00:00Z or 2024-05-01"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)


def parse_reset_target(
    kind: str, value: str | int | None = None, *, partition: int | None = None, option: str
) -> tuple[ResetTarget, list[int] | None]:
    """The target of a reset to `kind` (one of `RESET_TO`) with its `value` (offset: `P:O`, or
    `O` with `partition`; date: ISO 8601; watermark: an integer), and the partitions it moves
    (None: all; an offset or a `partition` names one)."""
    partitions = None if partition is None else [partition]
    if kind not in RESET_TO:
        raise SelectionError(f"reset to {kind!r}: choose one of {', '.join(RESET_TO)}")
    if kind in ("start", "end"):
        return ResetTarget(start=kind == "start", end=kind == "end"), partitions
    if value is None:
        raise SelectionError(f"reset_to {kind} needs {option}")
    if kind == "offset":
        part, offset = parse_offset(str(value), partition, option)
        return ResetTarget(offset=offset), [part]
    if kind == "date":
        return ResetTarget(timestamp_ms=parse_date_ms(str(value), option)), partitions
    if isinstance(value, str) and not value.lstrip("-").isdigit():
        raise SelectionError(f"{option} {value!r}: a watermark is an integer")
    return ResetTarget(watermark=int(value)), partitions
