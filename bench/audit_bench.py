"""Audit batching (issue 12), in one run.

Section `publish`: entries/s from `streamcore.audit.publish` to the log `audit/entries`, on SQLite
and on PostgreSQL, with the relay's batching (25 entries per append or 500 ms) against one append
per entry (the outbox's plain relay: it claims 10 jobs at a time and appends them one by one). The
Spark job's section comes with the job (issue 12, section 2).

Shape of every publish row: one publisher thread publishes `--entries` entries (default 20,000),
`--per-transaction` per committed transaction (default 10; each entry checked against
AuditEntry.avsc and put in the outbox), while the relay of an `Outbox` of `--workers` workers
(default 1, as docs/audit.md advises: the audit queue is ordered, so one worker claims at a time
and more only wake up for nothing) appends them to a fresh local log (default settings, `fsync =
none`) in the same process. The rate is entries over the seconds from the first publish until the
last entry is in the log; `per append` is entries over appends; `entries/CPU-s` divides by the CPU
time of the process.

    python bench/audit_bench.py [--entries 20000] [--per-transaction 10] [--workers 1] [--json]

PostgreSQL is the server of `scripts/postgres.sh` (started if not running, and stopped again if
this run started it). Target: publish -> log >= 5,000 entries/s on SQLite (batched).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from outbox_bench import with_postgres

from streamcore.audit import STREAM, publish, relay
from streamcore.cli.table import Column, render_table
from streamcore.config import StreamcoreConfig
from streamcore.log.api import LogManager
from streamcore.log.local.manager import LocalLogManager
from streamcore.outbox import Outbox, Registry
from streamcore.outbox.schema import TABLE

TARGET_SQLITE_RATE = 5000.0
BATCHED = "25 / 500 ms"
PER_ENTRY = "1 per append"


class CountingAppender:
    """Delegates to a real appender and counts its appends."""

    def __init__(self, appender: Any, counts: list[int]) -> None:
        self._appender = appender
        self._counts = counts

    def __getattr__(self, name: str) -> Any:
        return getattr(self._appender, name)

    def append(self, key: str, message: Any) -> Any:
        self._counts.append(1)
        return self._appender.append(key, message)

    def append_batch(self, items: Any, **options: Any) -> Any:
        self._counts.append(len(items))
        return self._appender.append_batch(items, **options)


class CountingManager:
    """A log manager whose appenders count their appends (`counts`, one item per append)."""

    def __init__(self, manager: LogManager) -> None:
        self.manager = manager
        self.counts: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.manager, name)

    def appender(self, name: str, codec: Any = None) -> CountingAppender:
        return CountingAppender(self.manager.appender(name, codec), self.counts)


def entries(count: int) -> list[dict[str, Any]]:
    """Entries of a document repository: 1,000 documents, one event a millisecond."""
    documents = [str(uuid.uuid4()) for _ in range(1000)]
    start = datetime.now(UTC) - timedelta(hours=1)
    return [
        {
            "event_id": uuid.uuid4().hex,
            "event_type": ("documentCreated", "documentModified", "download")[n % 3],
            "category": "eventDocumentCategory",
            "doc_id": documents[n % 1000],
            "doc_path": f"/default-domain/workspaces/ws-{n % 10}/doc-{n % 1000}",
            "doc_type": "File",
            "principal": f"user-{n % 50}",
            "event_date": start + timedelta(milliseconds=n),
            "lifecycle_state": "project",
            "repository": "default",
            "extended": {"size": str(n * 17 % 100_000)},
        }
        for n in range(count)
    ]


def publish_row(
    database: str,
    url: str,
    batching: str,
    work: list[dict[str, Any]],
    per_transaction: int,
    workers: int,
) -> dict[str, Any]:
    label = f"{database}, {batching}"
    with tempfile.TemporaryDirectory(prefix="audit-bench-log-") as home:
        manager = CountingManager(
            LocalLogManager(Path(home) / "log", config=StreamcoreConfig(home=Path(home)))
        )
        registry = Registry()
        relay(manager, batch_capacity=25 if batching == BATCHED else None, registry=registry)
        outbox = Outbox(url, registry=registry, workers=workers)
        outbox.create_schema()
        with outbox.engine.begin() as conn:
            conn.execute(sa.text(f"DELETE FROM {TABLE}"))
        published = 0

        def publisher() -> None:
            nonlocal published
            for start in range(0, len(work), per_transaction):
                with outbox.engine.begin() as conn:
                    for item in work[start : start + per_transaction]:
                        publish(conn, item, registry=registry)
                published = min(start + per_transaction, len(work))

        with outbox:
            cpu = time.process_time()
            started = time.monotonic()
            thread = threading.Thread(target=publisher, name="bench-publish")
            thread.start()
            in_log, last_report = 0, started
            while in_log < len(work):
                time.sleep(0.02)
                in_log = manager.end_offsets(STREAM)[0]
                now = time.monotonic()
                if now - last_report >= 1.0:
                    last_report = now
                    print(
                        f"{label}: {published:,} published, {in_log:,} in the log, "
                        f"{in_log / (now - started):,.0f} entries/s",
                        file=sys.stderr,
                        flush=True,
                    )
            seconds = time.monotonic() - started
            cpu = time.process_time() - cpu
            thread.join()
        outbox.close()
        manager.close()
    return {
        "database": database,
        "batching": batching,
        "entries": len(work),
        "seconds": round(seconds, 2),
        "entries_per_s": round(len(work) / seconds, 1),
        "appends": len(manager.counts),
        "entries_per_append": round(len(work) / len(manager.counts), 1),
        "cpu_s": round(cpu, 2),
        "entries_per_cpu_s": round(len(work) / cpu, 1) if cpu else None,
    }


def publish_section(args: argparse.Namespace) -> dict[str, Any]:
    """publish -> log, both relays on both databases; ratios against one append per entry."""
    work = entries(args.entries)

    def rows_on(database: str, url: str) -> list[dict[str, Any]]:
        return [
            publish_row(database, url, batching, work, args.per_transaction, args.workers)
            for batching in (BATCHED, PER_ENTRY)
        ]

    with tempfile.TemporaryDirectory(prefix="audit-bench-db-") as tmp:
        rows = rows_on("sqlite", f"sqlite:///{tmp}/outbox.db")
    rows += with_postgres(lambda url: rows_on("postgres", url))
    baseline = {r["database"]: r for r in rows if r["batching"] == PER_ENTRY}
    for row in rows:
        row["vs_per_entry"] = round(
            row["entries_per_s"] / baseline[row["database"]]["entries_per_s"], 2
        )
    sqlite = next(r for r in rows if r["database"] == "sqlite" and r["batching"] == BATCHED)
    return {
        "shape": {
            "entries": args.entries,
            "per_transaction": args.per_transaction,
            "publishers": 1,
            "outbox_workers": args.workers,
        },
        "rows": rows,
        "targets": {
            "sqlite_entries_per_s": TARGET_SQLITE_RATE,
            "sqlite_met": sqlite["entries_per_s"] >= TARGET_SQLITE_RATE,
        },
    }


def print_publish(section: dict[str, Any]) -> None:
    shape = section["shape"]
    print(
        f"publish -> log: {shape['entries']:,} entries per row, {shape['per_transaction']} per "
        f"transaction, 1 publisher, relay on an Outbox of {shape['outbox_workers']} workers"
    )
    columns = [
        Column("database", "left"),
        Column("relay", "left"),
        Column("seconds", "right"),
        Column("entries/s", "right"),
        Column("vs 1 per append", "right"),
        Column("per append", "right"),
        Column("CPU s", "right"),
        Column("entries/CPU-s", "right"),
    ]
    table = [
        [
            r["database"],
            r["batching"],
            f"{r['seconds']:.1f}",
            f"{r['entries_per_s']:,.0f}",
            f"{r['vs_per_entry']:.2f}x",
            f"{r['entries_per_append']:.1f}",
            f"{r['cpu_s']:.1f}",
            f"{r['entries_per_cpu_s']:,.0f}" if r["entries_per_cpu_s"] else "-",
        ]
        for r in section["rows"]
    ]
    print(render_table(columns, table))
    targets = section["targets"]
    print(
        f"target: sqlite >= {targets['sqlite_entries_per_s']:,.0f} entries/s with batching: "
        f"{'met' if targets['sqlite_met'] else 'NOT met'}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=20_000, help="entries per row")
    parser.add_argument(
        "--per-transaction", type=int, default=10, help="entries per publishing transaction"
    )
    parser.add_argument("--workers", type=int, default=1, help="outbox workers of the relay")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    summary = {
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "cpus": os.cpu_count(),
        "publish": publish_section(args),
    }
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    load = ", ".join(f"{x:.1f}" for x in summary["load_average"])
    print(f"audit: load average {load} on {summary['cpus']} CPUs")
    print_publish(summary["publish"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
