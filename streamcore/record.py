"""`Record`: the envelope that computations exchange, `{watermark, key, data, flags}`.

Its Avro schema is `include/schemas/Record.avsc` (the one Nuxeo publishes, plus the optional
`traceContext` of Nuxeo 11.1+), so records written by either system decode in the
other. `flags` is a set of `Flag`s stored as one byte, bit i = flag with ordinal i.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from streamcore.watermark import Watermark


class Flag(enum.IntFlag):
    """Record flags; the bit positions are Nuxeo's ordinals and must never move."""

    DEFAULT = 1 << 0
    COMMIT = 1 << 1
    POISON_PILL = 1 << 2
    EXTERNAL_VALUE = 1 << 3
    INTERNAL1 = 1 << 4
    INTERNAL2 = 1 << 5
    USER1 = 1 << 6
    USER2 = 1 << 7


# Marks a Record that deletes its key from a key-compacted log (as does an empty `data`);
# docs/log.md, "Key compaction".
TOMBSTONE = Flag.INTERNAL1


@dataclass(slots=True)
class Record:
    """A keyed payload with a watermark. `data` is opaque bytes (usually Avro single-object)."""

    key: str
    data: bytes = b""
    watermark: int = 0
    flags: Flag = Flag.DEFAULT
    trace_context: bytes | None = None

    @classmethod
    def of(cls, key: str, data: bytes | None = None, *, flags: Flag = Flag.DEFAULT) -> Record:
        """A record stamped with the current time as watermark (like Nuxeo's `Record.of`)."""
        return cls(key, data or b"", Watermark.of_now().value, flags)

    @property
    def timestamp(self) -> int:
        """Milliseconds since the epoch, from the watermark."""
        return self.watermark >> 17

    def has(self, flag: Flag) -> bool:
        return bool(self.flags & flag)

    def __str__(self) -> str:
        preview = self.data[:127].decode("utf-8", "replace")
        preview = "".join(c if c.isprintable() else "." for c in preview)
        return (
            f"Record(key={self.key!r}, watermark={Watermark(self.watermark)}, "
            f"flags={self.flags!r}, data[{len(self.data)}]={preview!r})"
        )
