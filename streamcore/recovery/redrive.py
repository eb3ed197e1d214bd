"""Redrive: send dead letters back to their original stream (or another one), once.

    result = redrive(manager, ledger, DeadLetterFilter(streams=("app/dlq-enrich",)),
                     codec=codec, principal="alice", reason="price feed fixed")

Each selected dead letter's original record (`DeadLetter.original_record`: same key, data,
watermark, flags and trace context) is appended to the stream it failed on, or to `target`. The
ledger (`ledger.py`) makes it happen once: a rerun of the same selection, or a wider one, skips
what was redriven, a redrive that crashed between its append and its ledger update is completed
by the next run without a second append, and a redrive of streams another run is redriving is
refused (the ledger's claim). The audit entry is written in the transaction that marks the
letters done: a crash before it leaves them `pending`, and the rerun completes and audits them.
A record that could not be decoded at all is sent back as the raw bytes it was. Records of a
dead-letter stream that are not dead letters are left alone and counted.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from streamcore.log import LogManager, LogPartition
from streamcore.log.config import TOOLS_GROUP
from streamcore.names import Name
from streamcore.recovery.deadletters import (
    DeadLetterEntry,
    DeadLetterFilter,
    Progress,
    read_range,
    scan_dead_letters,
)
from streamcore.recovery.errors import RecoveryError, SelectionError
from streamcore.recovery.ledger import DONE, PENDING, LedgerRow, RedriveLedger

__all__ = ["RedriveResult", "redrive"]


Landed = tuple[str, int, int, int | None, int | None]
"""(dead-letter stream, partition, offset, target partition, target offset) of a redriven letter."""
Trail = Callable[[sa.Connection, "RedriveResult"], str]


@dataclass
class RedriveResult:
    """What a redrive did (or, on a dry run, would do). `redriven`: appended now;
    `completed`: found appended by an earlier run that stopped before its ledger update;
    `already`: redriven by an earlier run; `foreign`: records that are not dead letters.
    `audit_event_id`: the entry its trail wrote; `landed`: the letters a redrive run with
    `finish=False` left for its caller to mark done."""

    dry_run: bool
    selected: int = 0
    redriven: int = 0
    completed: int = 0
    already: int = 0
    foreign: int = 0
    targets: Counter[str] = field(default_factory=Counter)
    audit_event_id: str | None = None
    landed: list[Landed] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "selected": self.selected,
            "redriven": self.redriven,
            "completed": self.completed,
            "already": self.already,
            "foreign": self.foreign,
            "targets": dict(self.targets),
        }


def redrive(
    manager: LogManager,
    ledger: RedriveLedger | None,
    selection: DeadLetterFilter,
    *,
    codec: Any,
    principal: str,
    reason: str,
    target: str | None = None,
    dry_run: bool = False,
    progress: Progress | None = None,
    trail: Trail | None = None,
    finish: bool = True,
) -> RedriveResult:
    """Redrive the dead letters `selection` matches (see the module doc). Every selected letter
    is checked (its stream, the target) before the first append. `progress`: as for
    `scan_dead_letters`. `ledger` None: no ledger database yet, so nothing was redriven before
    (a dry run on a fresh home, which then creates none). `trail(conn, result)`: the audit
    entry, written in the transaction that marks the letters done; it returns the entry's id.
    `finish=False` leaves them `pending` in `result.landed` for the caller to finish (with the
    rest of a larger redrive), under the claim it holds."""
    entries = list(scan_dead_letters(manager, selection, codec=codec, progress=progress))
    result = RedriveResult(dry_run=dry_run)
    letters = [e for e in entries if e.letter is not None]
    result.foreign = len(entries) - len(letters)
    result.selected = len(letters)
    checked: dict[str, Name] = {}
    targets = {_position(e): _target(manager, e, target, checked) for e in letters}
    if dry_run:
        todo, _, _ = _sort_out(manager, ledger, letters, codec, result)
        result.redriven = len(todo)
        result.targets.update(targets[_position(e)].urn for e in todo)
        return result
    if ledger is None:
        raise RecoveryError("a redrive that changes something needs the ledger")
    with ledger.claim({e.dlq for e in letters}):
        todo, replacing, landed = _sort_out(manager, ledger, letters, codec, result)
        result.targets.update(targets[_position(e)].urn for e in todo)
        if todo:
            now = int(time.time() * 1000)
            goes_to = {targets[_position(e)] for e in todo}
            ends = {name: tuple(manager.end_offsets(name)) for name in goes_to}
            ledger.begin(
                [
                    LedgerRow(
                        e.dlq,
                        e.partition,
                        e.offset,
                        targets[_position(e)].urn,
                        PENDING,
                        ends[targets[_position(e)]],
                        None,
                        None,
                        now,
                        principal,
                        reason,
                    )
                    for e in todo
                ],
                replacing,
            )
            landed += _append(manager, todo, targets, codec)
            result.redriven = len(todo)
        if not finish:
            result.landed = landed
        elif landed:
            written = None if trail is None else lambda conn: trail(conn, result)
            result.audit_event_id = ledger.finish(landed, written)
    return result


def _sort_out(
    manager: LogManager,
    ledger: RedriveLedger | None,
    letters: Sequence[DeadLetterEntry],
    codec: Any,
    result: RedriveResult,
) -> tuple[list[DeadLetterEntry], list[tuple[str, int, int]], list[Landed]]:
    """(letters to append, those among them whose stale `pending` row a new one replaces, the
    pending letters found appended), counting `already` and `completed` in `result`."""
    todo: list[DeadLetterEntry] = []
    replacing: list[tuple[str, int, int]] = []
    landed: list[Landed] = []
    by_dlq: dict[str, list[DeadLetterEntry]] = defaultdict(list)
    for entry in letters:
        by_dlq[entry.dlq].append(entry)
    for dlq, group in by_dlq.items():
        known = {} if ledger is None else ledger.rows(dlq, [(e.partition, e.offset) for e in group])
        pending: list[tuple[DeadLetterEntry, LedgerRow]] = []
        for entry in group:
            row = known.get((entry.partition, entry.offset))
            if row is None:
                todo.append(entry)
            elif row.state == DONE:
                result.already += 1
            else:
                pending.append((entry, row))
        found = _find_landed(manager, pending, codec)
        result.completed += len(found)
        landed += found
        done = {(d, p, o) for d, p, o, _, _ in found}
        again = [e for e, _ in pending if (e.dlq, e.partition, e.offset) not in done]
        todo += again
        replacing += [_position(e) for e in again]
    return todo, replacing, landed


def _position(entry: DeadLetterEntry) -> tuple[str, int, int]:
    return (entry.dlq, entry.partition, entry.offset)


def _target(
    manager: LogManager, entry: DeadLetterEntry, target: str | None, checked: dict[str, Name]
) -> Name:
    """Where `entry` goes; `checked` holds the targets known to exist."""
    letter = entry.letter
    assert letter is not None
    if target is None and not letter.stream:
        raise SelectionError(
            f"{entry.dlq} {entry.partition}:{entry.offset} came from no input stream (a timer "
            "or process_failure output of computation "
            f"{letter.computation}); redrive it to a named stream with --to"
        )
    wanted = target or letter.stream
    if wanted in checked:
        return checked[wanted]
    name = Name.of(wanted)
    if not manager.exists(name):
        raise SelectionError(
            f"cannot redrive {entry.dlq} {entry.partition}:{entry.offset} to {name.urn}: the "
            "stream does not exist; create it, or redrive to an existing stream with --to"
        )
    checked[wanted] = name
    return name


def _append(
    manager: LogManager,
    todo: Sequence[DeadLetterEntry],
    targets: dict[tuple[str, int, int], Name],
    codec: Any,
) -> list[Landed]:
    """Append each entry's original record to its target; where each landed."""
    landed: list[Landed] = []
    by_target: dict[tuple[Name, bool], list[DeadLetterEntry]] = defaultdict(list)
    for entry in todo:
        assert entry.letter is not None
        by_target[(targets[_position(entry)], entry.letter.undecodable)].append(entry)
    for (name, raw), entries in by_target.items():
        # An undecodable record goes back as the bytes it was, without a Record around them.
        with manager.appender(name, None if raw else codec) as appender:
            items = [(e.letter.record.key, _message(e, raw)) for e in entries]  # type: ignore[union-attr]
            offsets = appender.append_batch(items)
        for entry, offset in zip(entries, offsets, strict=True):
            landed.append(
                (
                    entry.dlq,
                    entry.partition,
                    entry.offset,
                    offset.partition.partition,
                    offset.offset,
                )
            )
    return landed


def _message(entry: DeadLetterEntry, raw: bool) -> Any:
    letter = entry.letter
    assert letter is not None
    return letter.record.data if raw else letter.original_record


def _find_landed(
    manager: LogManager, pending: Sequence[tuple[DeadLetterEntry, LedgerRow]], codec: Any
) -> list[Landed]:
    """The pending redrives whose record is in their target after the recorded end offsets:
    appended by a run that stopped before marking them done. A landed record answers for one
    pending row only (two dead letters may hold equal records)."""
    landed: list[Landed] = []
    claimed: set[tuple[str, int, int]] = set()
    for entry, row in pending:
        letter = entry.letter
        assert letter is not None
        raw = letter.undecodable
        wanted = _message(entry, raw)
        name = Name.of(row.target)
        ends = manager.end_offsets(name)
        found = None
        for p, start in enumerate(row.target_ends):
            partition = LogPartition.of(name, p)
            with manager.tailer(TOOLS_GROUP, [partition], None if raw else codec) as tailer:
                for rec in read_range(tailer, partition, start, ends[p]):
                    spot = (name.urn, p, rec.offset)
                    if (
                        spot not in claimed
                        and rec.key == letter.record.key
                        and rec.message == wanted
                    ):
                        found = spot
                        break
            if found is not None:
                break
        if found is not None:
            claimed.add(found)
            landed.append((entry.dlq, entry.partition, entry.offset, found[1], found[2]))
    return landed
