"""What a `StreamProcessor` did, per computation: the counters of its units added up, its state
and lag, and the failure that terminated it. `streamcore run` prints these rows as its summary
table and the backfill job reports them after a drain."""

from __future__ import annotations

from typing import Any

from streamcore.computation.stream_processor import StreamProcessor

__all__ = ["summary_rows"]


def summary_rows(processor: StreamProcessor) -> list[dict[str, Any]]:
    """One row per computation: units, state(s), processed, produced, retried, failed, skipped,
    dead_lettered, checkpoints, lag (None without an input stream) and the first failure."""
    rows = []
    for name in processor.topology.computation_names():
        units = processor.unit_stats(name)
        lag = processor.lag(name).lag if processor.topology.input_streams(name) else None
        states = sorted({u.state for u in units})
        rows.append(
            {
                "computation": name,
                "units": len(units),
                "state": "/".join(states),
                "processed": sum(u.processed for u in units),
                "produced": sum(u.produced for u in units),
                "retried": sum(u.retried for u in units),
                "failed": sum(u.failed for u in units),
                "skipped": sum(u.skipped for u in units),
                "dead_lettered": sum(u.dead_lettered for u in units),
                "checkpoints": sum(u.checkpoints for u in units),
                "lag": lag,
                "failure": next((u.failure for u in units if u.failure), None),
            }
        )
    return rows
