"""Text for people: aligned tables and human-readable numbers, durations, sizes and times.

The CLI, the DAGs' summaries, the jobs' logs and the benches print with these, so a person reads
one format everywhere; none of them depends on another's module for it.
"""

from __future__ import annotations

from streamcore.text.table import (
    TextColumn,
    format_time,
    human_bytes,
    human_duration,
    iso_time,
    rate,
    render_table,
    short_duration,
)

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
