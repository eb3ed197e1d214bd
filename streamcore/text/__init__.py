"""Text for people: aligned tables, human-readable numbers, durations, sizes and times, and the
progress line of long commands.

The CLI, the DAGs' summaries, the jobs' logs and the benches print with these, so a person reads
one format everywhere; none of them depends on another's module for it.
"""

from __future__ import annotations

from streamcore.text.progress import Progress
from streamcore.text.table import (
    TextColumn,
    format_time,
    human_bytes,
    human_duration,
    iso_time,
    rate,
    render_rows,
    render_table,
    short_duration,
)

__all__ = [
    "Progress",
    "TextColumn",
    "format_time",
    "human_bytes",
    "human_duration",
    "iso_time",
    "rate",
    "render_rows",
    "render_table",
    "short_duration",
]
