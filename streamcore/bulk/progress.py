"""How far a bulk command has come, from its status alone: processed/total, percent, the rate
since its processing started and the time left. `streamcore bulk status` shows it, and the bulk
job logs the same line after each bucket (from the status the store returns), so a person reads
one format in a shell and in the Airflow task log."""

from __future__ import annotations

from typing import Any

from streamcore.bulk.model import BulkStatus, now_ms
from streamcore.text import human_duration

__all__ = ["progress", "progress_line"]


def progress(status: BulkStatus, now: int | None = None) -> dict[str, Any]:
    """processed/total, percent, rate (documents per second since the processing started) and
    the estimated time left, as far as the status tells them."""
    done = (status.processed or 0) + (status.skipped or 0)
    total = status.total
    percent = round(100.0 * done / total, 1) if total else None
    rate = None
    if status.processing_start_ms is not None:
        end = status.processing_end_ms if _terminal(status) else None
        elapsed = (end or now or now_ms()) - status.processing_start_ms
        rate = round(1000.0 * (status.processed or 0) / elapsed, 1) if elapsed > 0 else None
    eta_ms = None
    if rate and total and not _terminal(status):
        eta_ms = int(1000 * max(total - done, 0) / rate)
    return {
        "processed": status.processed or 0,
        "skipped": status.skipped or 0,
        "total": total,
        "percent": percent,
        "rate_per_s": rate,
        "eta_ms": eta_ms,
    }


def _terminal(status: BulkStatus) -> bool:
    return status.state is not None and status.state.terminal


def progress_line(status: BulkStatus) -> str:
    """`30,000/100,000, 30%, 12,345.0 docs/s, ETA 6 s` (what the status tells)."""
    p = progress(status)
    total = "?" if p["total"] is None else f"{p['total']:,}"
    line = f"{p['processed']:,}/{total}"
    if p["skipped"]:
        line += f" (+{p['skipped']:,} skipped)"
    if p["percent"] is not None:
        line += f", {p['percent']:g}%"
    if p["rate_per_s"] is not None:
        line += f", {p['rate_per_s']:,.1f} docs/s"
    if p["eta_ms"] is not None:
        line += f", ETA {human_duration(p['eta_ms'])}"
    return line
