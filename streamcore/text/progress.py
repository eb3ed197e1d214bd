"""A progress line on stderr for long commands: counts and rates, at most once per interval.
On a terminal the line rewrites itself; otherwise one line per report."""

from __future__ import annotations

import sys
import time

from streamcore.text.table import human_bytes, rate

__all__ = ["Progress"]


class Progress:
    """Records (and bytes) done so far with their rate, as `label: 1,000/5,000 (20%) records in
    2.0s, 500 records/s`; `update` writes at most once per `interval` seconds, `done` always."""

    def __init__(self, label: str, total: int | None = None, interval: float = 1.0) -> None:
        self.label = label
        self.total = total
        self.interval = interval
        self.started = time.monotonic()
        self._last = self.started
        self._tty = sys.stderr.isatty()

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def line(self, count: int, nbytes: int | None = None) -> str:
        elapsed = self.elapsed
        done = f"{count:,}"
        if self.total:
            done += f"/{self.total:,} ({100 * count / self.total:.0f}%)"
        text = (
            f"{self.label}: {done} records in {elapsed:.1f}s, {rate(count, elapsed):,.0f} records/s"
        )
        if nbytes is not None:
            text += f", {human_bytes(rate(nbytes, elapsed))}/s"
        return text

    def update(self, count: int, nbytes: int | None = None) -> None:
        now = time.monotonic()
        if now - self._last < self.interval:
            return
        self._last = now
        self._write(self.line(count, nbytes))

    def done(self, count: int, nbytes: int | None = None) -> None:
        self._write(self.line(count, nbytes))
        if self._tty:
            sys.stderr.write("\n")
            sys.stderr.flush()

    def _write(self, text: str) -> None:
        if self._tty:
            sys.stderr.write("\r\x1b[K" + text)
        else:
            sys.stderr.write(text + "\n")
        sys.stderr.flush()
