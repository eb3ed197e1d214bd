"""A processor dump, Nuxeo's thread dump for streams: per unit of a running `StreamProcessor`, its
thread's stack, the record it is on (stream, partition, offset, key), the retry it is waiting
in, how long since it last did something, and its computation's lag. What the "processing is
stuck" runbook reads first (docs/operating.md).

Nothing is recorded on the processing path for it: the record is the one the unit's context
holds for its computation, and a retry in progress is read from the unit thread's frames (the
runner's `_recover`, with its attempt count), so a dump costs nothing until it is asked for.
`streamcore run` writes one on SIGUSR1 (`install_dump_signal`): to its stderr and to a file
under `<home>/dumps/`, which `streamcore processor dump PID` prints.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from streamcore.text import render_table

if TYPE_CHECKING:
    from streamcore.computation.stream_processor import StreamProcessor

__all__ = ["UnitDump", "dump_file", "install_dump_signal", "render_dump", "unit_dumps"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class UnitDump:
    """One unit at the time of the dump."""

    computation: str
    unit: int
    state: str
    thread: str | None
    alive: bool
    record: str | None  # "<partition>:+<offset> key=<key>" of the record it is on
    retrying: str | None  # "attempt N of M" while it waits to retry a record
    idle_s: float  # seconds since it last processed, checkpointed or fired a timer
    processed: int
    lag: int  # of its computation's group, over every input
    stack: list[str]

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def _retry(frame: FrameType | None) -> str | None:
    """The runner's retry loop on this stack, if any: its attempt and the policy's maximum."""
    while frame is not None:
        if frame.f_code.co_name == "_recover" and "attempts" in frame.f_locals:
            policy = frame.f_locals.get("policy")
            most = getattr(policy, "max_retries", "?")
            return f"attempt {frame.f_locals['attempts']} of {most}"
        frame = frame.f_back
    return None


def unit_dumps(processor: StreamProcessor) -> list[UnitDump]:
    """Every unit of `processor`, now."""
    frames = sys._current_frames()
    now = time.monotonic()
    lags: dict[str, int] = {}
    out = []
    for name, runner, thread in processor.unit_threads():
        if name not in lags:
            try:
                lags[name] = processor.lag(name).lag
            except Exception as exc:  # the log out of reach: the dump goes on without it
                logger.warning("dump: the lag of %s is unknown (%s)", name, exc)
                lags[name] = -1
        frame = frames.get(thread.ident) if thread is not None and thread.ident else None
        record = getattr(runner.context, "_record", None)
        where = None
        if record is not None:
            where = f"{record.partition}:+{record.offset} key={record.key!r}"
        stack = traceback.format_stack(frame) if frame is not None else []
        stats = runner.stats
        out.append(
            UnitDump(
                computation=name,
                unit=runner.unit,
                state=stats.state,
                thread=None if thread is None else thread.name,
                alive=thread is not None and thread.is_alive(),
                record=where,
                retrying=_retry(frame),
                idle_s=round(now - stats.last_activity, 3),
                processed=stats.processed,
                lag=lags[name],
                stack=[line.rstrip("\n") for line in stack],
            )
        )
    return out


def render_dump(units: list[UnitDump], pid: int | None = None) -> str:
    """The dump as text: a table of the units, then each unit's stack."""
    when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    head = f"streamcore processor dump, pid {pid or os.getpid()}, {when}"
    columns = ["computation", "unit", "state", "idle s", "processed", "lag", "record", "retrying"]
    rows = [
        [
            u.computation,
            u.unit,
            u.state,
            f"{u.idle_s:.1f}",
            u.processed,
            u.lag,
            u.record or "-",
            u.retrying or "-",
        ]
        for u in units
    ]
    parts = [head, render_table(columns, rows)]
    for u in units:
        alive = "alive" if u.alive else "ended"
        parts.append(f"--- {u.computation} unit {u.unit}, thread {u.thread} ({alive})")
        parts.extend(u.stack or ["(no stack: the thread is not running)"])
    return "\n".join(parts) + "\n"


def dump_file(home: Path, pid: int) -> Path:
    """Where the dump of process `pid` is written (the newest replaces the previous)."""
    return home / "dumps" / f"processor-{pid}.txt"


def install_dump_signal(
    processors: list[StreamProcessor], home: Path, signum: int = signal.SIGUSR1
) -> Callable[[], None]:
    """Write a dump of `processors` to stderr and to `dump_file(home, pid)` on `signum`; returns
    the function that puts the previous handler back. The dump is made on a thread of its own:
    a signal handler runs between two bytecodes of the main thread, which must not wait for the
    log."""

    def write() -> None:
        try:
            text = render_dump([u for p in processors for u in unit_dumps(p)])
            sys.stderr.write(text)
            path = dump_file(home, os.getpid())
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_suffix(".tmp")
            partial.write_text(text)
            partial.replace(path)  # a reader never sees half a dump
        except Exception:
            logger.exception("the processor dump failed")

    def handle(_signum: int, _frame: Any) -> None:
        threading.Thread(target=write, name="streamcore-dump", daemon=True).start()

    previous = signal.signal(signum, handle)

    def restore() -> None:
        signal.signal(signum, previous)

    return restore
