"""Dead-letter records across the `*/dlq-*` streams: find, filter, count.

    for entry in scan_dead_letters(manager, DeadLetterFilter(computation="enrich")):
        print(entry.dlq, entry.offset, entry.letter.error_type, entry.letter.error)

A dead-letter stream is any stream whose name (after the namespace) starts with `dlq-`, the
convention of the processor's policies (`ComputationPolicy(dlq="app/dlq-enrich")`). Each of its
records is a `DeadLetter` (streamcore/computation/dlq.py): the failed record and its failure
metadata. A record of such a stream that is not one is reported as `foreign`, never dropped.

Scans read each partition up to the end seen when the scan starts, through a static-assignment
tailer of the tools' group, which never commits; an empty read on the way is a slow broker, waited
for (`read_range`).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from streamcore.computation.dlq import DeadLetter
from streamcore.errors import StreamcoreError
from streamcore.log import LogManager, LogOffset, LogPartition, LogTailer
from streamcore.log.config import TOOLS_GROUP
from streamcore.names import Name
from streamcore.recovery.errors import ReadStalledError, SelectionError

__all__ = [
    "DLQ_PREFIX",
    "DeadLetterEntry",
    "DeadLetterFilter",
    "dlq_streams",
    "error_counts",
    "read_range",
    "scan_dead_letters",
    "selection_bounds",
]

DLQ_PREFIX = "dlq-"
# How long a read waits for a partition that holds records below its end but gives none.
STALL_TIMEOUT = 120.0


@dataclass(frozen=True, slots=True)
class DeadLetterEntry:
    """One record of a dead-letter stream: where it is, when it was appended, and the dead
    letter (None with `foreign` set when the record is not one)."""

    dlq: str
    partition: int
    offset: int
    appended_ms: int
    letter: DeadLetter | None
    foreign: str | None = None

    @property
    def error_class(self) -> str:
        return self.letter.error_type if self.letter else "(not a dead letter)"

    def to_dict(self) -> dict[str, Any]:
        row: dict[str, Any] = {
            "dlq": self.dlq,
            "partition": self.partition,
            "offset": self.offset,
            "appended_ms": self.appended_ms,
        }
        if self.letter is None:
            return {**row, "foreign": self.foreign}
        letter = self.letter
        return {
            **row,
            "key": letter.record.key,
            "computation": letter.computation,
            "stream": letter.stream,
            "source_partition": letter.partition,
            "source_offset": letter.offset,
            "attempts": letter.attempts,
            "error_type": letter.error_type,
            "error": letter.error,
            "first_failed_ms": letter.first_failed_at,
            "last_failed_ms": letter.failed_at,
            "undecodable": letter.undecodable,
        }


@dataclass(frozen=True, slots=True)
class DeadLetterFilter:
    """Which dead letters to take.

    Every given criterion must hold:

    - `streams`: these dead-letter streams (default: every `*/dlq-*` stream);
    - `computation`: the computation that failed;
    - `error`: the error class (`ValueError`), or text found in the error message;
    - `since_ms` / `until_ms`: the last failure in `[since_ms, until_ms)`;
    - `offsets`: only these `(partition, offset)` of the one stream of `streams`.
    """

    streams: tuple[str, ...] = ()
    computation: str | None = None
    error: str | None = None
    since_ms: int | None = None
    until_ms: int | None = None
    offsets: frozenset[tuple[int, int]] = frozenset()

    def matches(self, entry: DeadLetterEntry) -> bool:
        if self.offsets and (entry.partition, entry.offset) not in self.offsets:
            return False
        letter = entry.letter
        if letter is None:
            # Foreign records match only a filter that selects by position or by nothing.
            return not (self.computation or self.error or self.since_ms or self.until_ms)
        if self.computation is not None and letter.computation != self.computation:
            return False
        if self.error is not None and not (
            letter.error_type == self.error or self.error in letter.error
        ):
            return False
        if self.since_ms is not None and letter.failed_at < self.since_ms:
            return False
        return self.until_ms is None or letter.failed_at < self.until_ms


def dlq_streams(manager: LogManager) -> list[Name]:
    """Every dead-letter stream the manager reaches, sorted by URN."""
    return sorted(
        (n for n in manager.list_logs() if n.name.startswith(DLQ_PREFIX)), key=lambda n: n.urn
    )


def _streams(manager: LogManager, wanted: Sequence[str]) -> list[Name]:
    found = dlq_streams(manager)
    if not wanted:
        return found
    names = []
    for stream in wanted:
        name = Name.of(stream)
        if not name.name.startswith(DLQ_PREFIX):
            raise SelectionError(
                f"{name.urn} is not a dead-letter stream (their names start with "
                f"{DLQ_PREFIX!r}, e.g. app/dlq-enrich); list them with `streamcore recovery list`"
            )
        if not manager.exists(name):
            known = ", ".join(n.urn for n in found) or "none"
            raise SelectionError(
                f"dead-letter stream {name.urn} does not exist (dead-letter streams: {known})"
            )
        names.append(name)
    return names


def read_range(
    tailer: LogTailer[Any],
    partition: LogPartition,
    start: int,
    end: int,
    batch: int = 1000,
    *,
    stall_timeout: float = STALL_TIMEOUT,
) -> Iterator[Any]:
    """Records of `partition` from `start` up to `end` (exclusive) through `tailer`. An empty
    read is a slow broker, not the end: reading goes on until the tailer passes `end`, and fails
    with `ReadStalledError` once no record came for `stall_timeout` seconds (an early stop would
    pass for a partition that ends there)."""
    if start >= end:
        return
    tailer.seek(LogOffset(partition, start))
    deadline = time.monotonic() + stall_timeout
    while (position := tailer.position(partition)) < end:
        records = tailer.read_batch(batch, timeout=1.0)
        if not records:
            if time.monotonic() >= deadline:
                raise ReadStalledError(
                    f"{partition.name.urn} partition {partition.partition}: no record came in "
                    f"{stall_timeout:g} s while reading offsets {start}..{end - 1} (next: "
                    f"{position}): the broker is slow or unreachable. The read gave up "
                    "before using what it read, so nothing was changed; run again once the "
                    "broker answers"
                )
            continue
        deadline = time.monotonic() + stall_timeout
        for rec in records:
            if rec.offset >= end:
                return
            yield rec


Progress = Callable[[int, int], None]


def scan_dead_letters(
    manager: LogManager,
    selection: DeadLetterFilter | None = None,
    *,
    codec: Any,
    progress: Progress | None = None,
) -> Iterator[DeadLetterEntry]:
    """The dead letters matching `selection`, stream by stream, partition by partition, in
    offset order. `codec`: the Record codec the processor wrote the streams with
    (`get_codec(config.default_codec)` unless a topology set another). The streams and offsets
    of the selection are checked before the first record is read. `progress(read, total)` is
    called after each record read (a scan of a large stream takes a while)."""
    selection = selection or DeadLetterFilter()
    return _scan(manager, selection_bounds(manager, selection), selection, codec, progress)


Bounds = dict[Name, tuple[list[int], list[int]]]


def selection_bounds(manager: LogManager, selection: DeadLetterFilter) -> Bounds:
    """{dead-letter stream: (start offsets, end offsets)} that `selection` reads, after checking
    its streams and offsets (`SelectionError` names what is wrong)."""
    streams = _streams(manager, selection.streams)
    if selection.offsets and len(streams) != 1:
        raise SelectionError(
            "offsets select records of one dead-letter stream: give exactly one stream"
        )
    bounds = {name: (manager.start_offsets(name), manager.end_offsets(name)) for name in streams}
    for name, (starts, ends) in bounds.items():
        _check_offsets(name, starts, ends, selection.offsets)
    return bounds


def _scan(
    manager: LogManager,
    bounds: Bounds,
    selection: DeadLetterFilter,
    codec: Any,
    progress: Progress | None,
) -> Iterator[DeadLetterEntry]:
    total = sum(
        e - s for starts, ends in bounds.values() for s, e in zip(starts, ends, strict=True)
    )
    read = 0
    for name, (starts, ends) in bounds.items():
        for p, (start, end) in enumerate(zip(starts, ends, strict=True)):
            if start >= end:
                continue
            partition = LogPartition.of(name, p)
            with manager.tailer(TOOLS_GROUP, [partition], codec) as tailer:
                for rec in read_range(tailer, partition, start, end):
                    read += 1
                    if progress is not None:
                        progress(read, total)
                    entry = _entry(name, rec)
                    if selection.matches(entry):
                        yield entry


def _check_offsets(
    name: Name, starts: list[int], ends: list[int], offsets: Iterable[tuple[int, int]]
) -> None:
    for p, offset in sorted(offsets):
        if not 0 <= p < len(ends):
            raise SelectionError(f"{name.urn} has partitions 0..{len(ends) - 1}, not {p}")
        if not starts[p] <= offset < ends[p]:
            held = f"offsets {starts[p]}..{ends[p] - 1}" if ends[p] > starts[p] else "no record"
            raise SelectionError(
                f"{name.urn} partition {p} holds {held}, not {offset} (purged by retention, "
                "or not written yet)"
            )


def _entry(name: Name, rec: Any) -> DeadLetterEntry:
    where = (name.urn, rec.partition.partition, rec.offset, rec.timestamp)
    try:
        return DeadLetterEntry(*where, DeadLetter.of(rec.message))
    except (StreamcoreError, AttributeError) as exc:
        return DeadLetterEntry(*where, None, foreign=str(exc))


def error_counts(entries: Iterable[DeadLetterEntry]) -> list[tuple[str, int]]:
    """Entries per error class, most frequent first."""
    return Counter(e.error_class for e in entries).most_common()
