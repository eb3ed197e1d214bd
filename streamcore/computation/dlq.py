"""The dead-letter format: what a computation's policy appends to its `dlq` stream.

A dead-letter record **is the failed record**: same key, data, watermark and flags, so it lands
in the partition of its key and replays as it was (`original_record`). The failure metadata is a
UTF-8 JSON object stored in the Record's `trace_context` field (the original trace context, if
any, is kept inside it, base64-encoded, and restored by `original_record`):

    {"dlq": 1, "computation": "enrich", "stream": "app/parsed", "partition": 0, "offset": 42,
     "error_type": "ValueError", "error": "bad price", "attempts": 4,
     "first_failed_at": 1763799999000, "failed_at": 1763800000000, "trace_context": null}

`first_failed_at` is the first attempt's failure, `failed_at` the last one's (records written
before `first_failed_at` existed read it as `failed_at`).

A record whose bytes could not be decoded at all is dead-lettered with the log key and the raw
bytes as `data` (`"undecodable": true`): the bytes are kept, nothing is lost.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass

from streamcore.computation.errors import NotDeadLetterError
from streamcore.record import Record

__all__ = ["DeadLetter", "dead_letter_record"]

_FORMAT = 1


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A dead-letter record decoded: the original record and why it failed."""

    record: Record
    computation: str
    stream: str
    partition: int
    offset: int
    error_type: str
    error: str
    attempts: int
    failed_at: int
    undecodable: bool = False
    first_failed_at: int = 0

    @classmethod
    def of(cls, record: Record) -> DeadLetter:
        """Decode a record read from a dead-letter stream."""
        try:
            meta = json.loads(record.trace_context or b"")
            if meta.get("dlq") != _FORMAT:
                raise _not_dead_letter(record, f"unknown dead-letter format {meta.get('dlq')!r}")
            trace = meta.get("trace_context")
            original = Record(
                record.key,
                record.data,
                record.watermark,
                record.flags,
                base64.b64decode(trace) if trace else None,
            )
            return cls(
                original,
                meta["computation"],
                meta["stream"],
                int(meta["partition"]),
                int(meta["offset"]),
                meta["error_type"],
                meta["error"],
                int(meta["attempts"]),
                int(meta["failed_at"]),
                bool(meta.get("undecodable", False)),
                int(meta.get("first_failed_at", meta["failed_at"])),
            )
        except NotDeadLetterError:
            raise
        except (ValueError, KeyError, TypeError) as exc:
            raise _not_dead_letter(record, str(exc)) from None

    @property
    def original_record(self) -> Record:
        """The record as the computation received it, ready to be appended again (replay)."""
        return self.record


def dead_letter_record(
    record: Record,
    *,
    computation: str,
    stream: str,
    partition: int,
    offset: int,
    failure: BaseException,
    attempts: int,
    failed_at: int,
    first_failed_at: int | None = None,
    undecodable: bool = False,
) -> Record:
    """The record to append to a dead-letter stream for `record` (see the module doc);
    `first_failed_at` defaults to `failed_at` (one attempt)."""
    meta = {
        "dlq": _FORMAT,
        "computation": computation,
        "stream": stream,
        "partition": partition,
        "offset": offset,
        "error_type": type(failure).__name__,
        "error": str(failure)[:4000],
        "attempts": attempts,
        "first_failed_at": failed_at if first_failed_at is None else first_failed_at,
        "failed_at": failed_at,
        "trace_context": (
            base64.b64encode(record.trace_context).decode() if record.trace_context else None
        ),
    }
    if undecodable:
        meta["undecodable"] = True
    return Record(
        record.key,
        record.data,
        record.watermark,
        record.flags,
        json.dumps(meta, separators=(",", ":")).encode(),
    )


def _not_dead_letter(record: Record, reason: str) -> NotDeadLetterError:
    return NotDeadLetterError(
        f"record {record.key!r} is not a streamcore dead-letter record ({reason}); read "
        "dead-letter streams only with DeadLetter.of"
    )
