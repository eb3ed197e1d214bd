"""The text of a recovery run, for a person: the DAG streamcore_recovery's summary task logs it
and keeps it in the run record. A label/value head (the action, dry run or applied, the engine,
the counts), then the table of the action (error classes, redrive targets, the partitions a
position move changes, outbox jobs), then the audit entry or "none (nothing changed)"."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from streamcore.recovery.actions import DEAD_LETTER_ACTIONS
from streamcore.text import render_rows, render_table

__all__ = ["render_report"]


def render_report(request: Mapping[str, Any], engine: str, out: Mapping[str, Any]) -> str:
    """The before / after text of a run: what it did (the request's action, dry run or applied,
    on `engine`), a table of what it moved, redrove or found, and its audit entry."""
    action = request["action"]
    head = [
        ("action", f"{action} ({'dry run' if request['dry_run'] else 'applied'})"),
        ("engine", engine if action in DEAD_LETTER_ACTIONS else "task"),
    ]
    if action == "list":
        head += [("selected", f"{out.get('selected', 0):,}"), ("listing", str(out.get("output")))]
        table = render_table(
            ["error class", "records"],
            [(r["error_type"], f"{r['records']:,}") for r in out.get("by_error", [])],
        )
    elif action == "redrive":
        head += [
            (k, f"{out.get(k, 0):,}")
            for k in ("selected", "redriven", "completed", "already", "foreign")
        ]
        table = render_table(
            ["target", "records"],
            [(t, f"{n:,}") for t, n in sorted(out.get("targets", {}).items())],
        )
    elif action in ("skip", "reset"):
        summary = out["summary"]
        head += [
            ("stream / group", f"{summary['stream']} / {summary['group']}"),
            ("re-read", f"{summary['reread']:,}"),
            ("skipped", f"{summary['skipped']:,}"),
            ("live members", ", ".join(summary["live_members"]) or "none"),
        ]
        table = render_table(
            ["partition", "before", "after", "end", "re-read", "skipped"],
            [
                (r["partition"], r["before"], r["after"], r["end"], r["reread"], r["skipped"])
                for r in out["rows"]
            ],
        )
    else:
        head += [(k, str(v)) for k, v in out["summary"].items()]
        table = render_table(
            ["job", "tries", "error"],
            [(r["id"], r["tries"], r["error"]) for r in out.get("rows", [])],
        )
    audit = out.get("audit_event_id")
    head.append(("audit entry", audit or "none (nothing changed)"))
    return render_rows(head) + "\n\n" + table
