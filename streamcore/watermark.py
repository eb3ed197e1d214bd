"""`Watermark`: a 64-bit value `timestamp_ms << 17 | (sequence & 0xFFFF) << 1 | completed`.

Bit-compatible with Nuxeo's `org.nuxeo.lib.stream.computation.Watermark`, so watermarks written by
either system order the same way. The sequence disambiguates events within one millisecond.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime

from streamcore.errors import InvalidArgumentError

__all__ = ["LOWEST", "Watermark"]


@dataclass(frozen=True, slots=True, order=True)
class Watermark:
    """An event time with a sequence number and a completed flag, packed in one int so watermarks
    compare as numbers."""

    value: int

    @classmethod
    def of(cls, timestamp_ms: int, sequence: int = 0, completed: bool = False) -> Watermark:
        if timestamp_ms < 0:
            raise InvalidArgumentError(f"watermark timestamp must be >= 0, got {timestamp_ms}")
        return cls((timestamp_ms << 17) | ((sequence & 0xFFFF) << 1) | int(completed))

    @classmethod
    def of_now(cls, sequence: int = 0) -> Watermark:
        return cls.of(time.time_ns() // 1_000_000, sequence)

    @classmethod
    def completed_of(cls, watermark: Watermark) -> Watermark:
        return cls(watermark.value | 1)

    @property
    def timestamp(self) -> int:
        """Milliseconds since the epoch."""
        return self.value >> 17

    @property
    def sequence(self) -> int:
        return (self.value >> 1) & 0xFFFF

    @property
    def completed(self) -> bool:
        return bool(self.value & 1)

    def is_done(self, timestamp_ms: int) -> bool:
        """True when this watermark is completed and at or past `timestamp_ms` (Nuxeo semantics)."""
        return self.completed and self.timestamp >= timestamp_ms

    def __str__(self) -> str:
        seconds, millis = divmod(self.timestamp, 1000)  # integers: a float loses the last ms
        when = datetime.fromtimestamp(seconds, tz=UTC)
        return f"{when:%Y-%m-%d %H:%M:%S}.{millis:03d}:{self.sequence}"


LOWEST = Watermark(0)
