"""Aligned text tables and human-readable numbers, times, sizes (the CLI, DAG summaries, benches).

`render_table` right-aligns numeric columns (detected from the values, or forced with
`TextColumn(align="right")`), left-aligns the rest, and puts a rule under the header.
`render_rows` aligns label/value pairs, without header (the jobs' run summaries).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from streamcore.errors import InvalidArgumentError

__all__ = [
    "TextColumn",
    "format_time",
    "human_bytes",
    "human_duration",
    "iso_time",
    "rate",
    "render_table",
    "short_duration",
]

_BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


@dataclass(frozen=True)
class TextColumn:
    """A column of a text table: its title and alignment."""

    title: str
    align: str | None = None  # "left", "right" or None = right for numbers, left otherwise


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.1f}" if abs(value) >= 100 else f"{value:.2f}"
    return str(value)


def render_table(
    columns: Sequence[str | TextColumn], rows: Iterable[Sequence[Any]], *, indent: str = ""
) -> str:
    """An aligned text table with a header and a rule; returns the text without a final newline."""
    cols = [c if isinstance(c, TextColumn) else TextColumn(c) for c in columns]
    data = [list(r) for r in rows]
    for row in data:
        if len(row) != len(cols):
            raise InvalidArgumentError(f"row {row!r} has {len(row)} cells for {len(cols)} columns")
    aligns = []
    for i, col in enumerate(cols):
        if col.align is not None:
            aligns.append(col.align)
            continue
        values = [r[i] for r in data if r[i] is not None]
        aligns.append("right" if values and all(_is_number(v) for v in values) else "left")
    cells = [[_cell(v) for v in r] for r in data]
    widths = [max([len(col.title)] + [len(r[i]) for r in cells]) for i, col in enumerate(cols)]

    def line(values: Sequence[str]) -> str:
        parts = [
            v.rjust(w) if a == "right" else v.ljust(w)
            for v, w, a in zip(values, widths, aligns, strict=True)
        ]
        return (indent + "  ".join(parts)).rstrip()

    out = [line([c.title for c in cols]), indent + "  ".join("-" * w for w in widths)]
    out.extend(line(r) for r in cells)
    return "\n".join(out)


def render_rows(rows: Iterable[tuple[str, str]]) -> str:
    """Label/value pairs as two aligned columns: each label padded to the longest, two spaces,
    its value; no header, no final newline."""
    pairs = list(rows)
    width = max((len(label) for label, _ in pairs), default=0)
    return "\n".join(f"{label.ljust(width)}  {value}" for label, value in pairs)


def human_bytes(size: int | float | None) -> str:
    """`1536` → `1.5 KiB`."""
    if size is None:
        return "-"
    value = float(size)
    for unit in _BYTE_UNITS[:-1]:
        if abs(value) < 1024:
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} {_BYTE_UNITS[-1]}"


def human_duration(ms: int | float | None) -> str:
    """`63000` → `1m 3s`; below a second in ms (`350ms`); at most three units (`2d 3h 4m`)."""
    if ms is None:
        return "-"
    ms = int(ms)
    if ms < 1000:
        return f"{ms}ms"
    seconds = ms // 1000
    parts = []
    for unit, size in (("d", 86_400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size:
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
    return " ".join(parts[:3])


def short_duration(ms: int) -> str:
    """A retention in the largest exact unit, as written in the config: `4d`, `12h`, `90s`."""
    if ms <= 0:
        return "forever"
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


def format_time(ms: int | None) -> str:
    """Epoch milliseconds → `2018-10-11 11:18:34.955` (UTC), `-` for none."""
    if not ms:
        return "-"
    seconds, millis = divmod(int(ms), 1000)  # integers: a float can lose the last millisecond
    return f"{datetime.fromtimestamp(seconds, tz=UTC):%Y-%m-%d %H:%M:%S}.{millis:03d}"


def iso_time(ms: int | None) -> str | None:
    """Epoch milliseconds → ISO 8601 UTC (`2018-10-11T11:18:34.955Z`), None for none."""
    if not ms:
        return None
    seconds, millis = divmod(int(ms), 1000)
    return f"{datetime.fromtimestamp(seconds, tz=UTC):%Y-%m-%dT%H:%M:%S}.{millis:03d}Z"


def rate(count: float, seconds: float) -> float:
    """Per second; 0 when no time passed."""
    return count / seconds if seconds > 0 else 0.0
