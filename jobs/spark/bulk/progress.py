"""The bulk job's progress line, for its log (pure Python, no Spark):

    >>> Progress(100_000).line(30_000, 2.43)
    '30,000 / 100,000 documents (30.0%), 12,346 documents/s, ETA 6 s'

`streamcore.cli.progress.Progress` is the CLI's: it keeps its own clock, counts records and
rewrites a terminal line. The job logs one line per bucket with the time it measured itself.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Progress", "duration"]


@dataclass(frozen=True)
class Progress:
    """Progress towards `total` documents."""

    total: int

    def line(self, done: int, elapsed: float) -> str:
        """`done` documents after `elapsed` seconds: counts, percentage, rate and the time left
        at that rate ("ETA unknown" before the first document)."""
        percent = 100.0 * done / self.total if self.total else 100.0
        rate = done / elapsed if elapsed > 0 else 0.0
        left = max(self.total - done, 0)
        if not left:
            eta = "0 s"
        elif rate > 0:
            eta = duration(left / rate)
        else:
            eta = "unknown"
        return (
            f"{done:,} / {self.total:,} documents ({percent:.1f}%), "
            f"{rate:,.0f} documents/s, ETA {eta}"
        )


def duration(seconds: float) -> str:
    """Seconds as `6 s`, `2 min 5 s` or `3 h 20 min` (rounded to the second)."""
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes} min {secs} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"
