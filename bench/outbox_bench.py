"""Outbox throughput: put + consume with no-op consumers, on SQLite and PostgreSQL, against
PgQueuer on the same PostgreSQL server, in one run.

`jobs/CPU-s` divides the jobs by the CPU time the process used in the row: on a machine shared
with other work, it shows what the code costs when the wall-clock rate shows the contention.

Every row but one uses PgQueuer's own benchmark shape: for `--seconds` (default 8), one
enqueuer puts batches of 10 jobs back to back on one connection it holds while 5 dequeue workers
take batches of 10 and run a no-op consumer (the extra row `streamcore sqlite, batch 100` puts and
claims 100 at a time, to show what the batch size is worth). The rate is jobs consumed per second
over the timer (jobs put are reported too). Both libraries use psycopg 3 (PgQueuer's
`PsycopgDriver`: asyncpg is not among our pins), and every row starts from an empty queue.

The rows run `--rounds` times (default 5), in turns, the order of streamcore and PgQueuer on
PostgreSQL swapped every round; each row reports the median and the range of its rounds, and the
ratio to PgQueuer is the median of the ratios measured in the same round.

    python bench/outbox_bench.py [--seconds 8] [--rounds 5] [--large-batch 100] [--json]
                                 [--skip-pgqueuer]

PostgreSQL is the server of `scripts/postgres.sh` (started if not running, and stopped again if
this run started it); PgQueuer comes from the `bench` dependency group (`make bench` installs it).
Targets (issue 31): streamcore >= 1.5x PgQueuer's jobs/s on PostgreSQL; >= 10k jobs/s on SQLite
with batches of 10.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa

from streamcore.config import project_root
from streamcore.outbox import Outbox, Registry, put_many
from streamcore.outbox.schema import TABLE
from streamcore.text import TextColumn, render_table

ROOT = project_root()
POSTGRES = ROOT / "scripts" / "postgres.sh"
WORKERS = 5
BATCH = 10
TARGET_PG_RATIO = 1.5
TARGET_SQLITE_RATE = 10_000.0


class Meter:
    """Counts consumed jobs from any thread and reports progress once a second."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.consumed = 0
        self.put = 0
        self._lock = threading.Lock()
        self.started = time.monotonic()
        self.cpu_started = time.process_time()
        self._last = self.started

    def start(self) -> None:
        self.started = time.monotonic()
        self.cpu_started = time.process_time()

    def add(self, n: int = 1) -> None:
        with self._lock:
            self.consumed += n

    def report(self) -> None:
        now = time.monotonic()
        if now - self._last >= 1.0:
            self._last = now
            elapsed = now - self.started
            sys.stderr.write(
                f"{self.label}: {self.consumed:,} consumed, {self.put:,} put in {elapsed:.0f}s, "
                f"{self.consumed / elapsed:,.0f} jobs/s\n"
            )
            sys.stderr.flush()


def result(label: str, meter: Meter, elapsed: float) -> dict[str, Any]:
    cpu = time.process_time() - meter.cpu_started
    return {
        "system": label,
        "consumed": meter.consumed,
        "put": meter.put,
        "seconds": round(elapsed, 2),
        "jobs_per_s": round(meter.consumed / elapsed, 1),
        "put_per_s": round(meter.put / elapsed, 1),
        "cpu_s": round(cpu, 2),
        "jobs_per_cpu_s": round(meter.consumed / cpu, 1) if cpu else None,
    }


def run_streamcore(label: str, url: str, seconds: float, batch: int = BATCH) -> dict[str, Any]:
    registry = Registry()
    meter = Meter(label)
    registry.register("bench", lambda _payload: meter.add())
    outbox = Outbox(url, registry=registry, workers=WORKERS, batch_size=batch)
    outbox.create_schema()
    with outbox.engine.begin() as conn:
        conn.execute(sa.text(f"DELETE FROM {TABLE}"))
    stop = threading.Event()

    def enqueue() -> None:
        # One connection held, as PgQueuer's enqueuer holds its driver's; a transaction a batch.
        n = 0
        with outbox.engine.connect() as conn:
            while not stop.is_set():
                with conn.begin():
                    put_many(conn, "bench", [n + i for i in range(batch)], registry=registry)
                n += batch
                meter.put = n

    with outbox:
        meter.start()
        producer = threading.Thread(target=enqueue, name="bench-enqueue")
        producer.start()
        deadline = meter.started + seconds
        while time.monotonic() < deadline:
            time.sleep(0.05)
            meter.report()
        elapsed = time.monotonic() - meter.started
        row = result(label, meter, elapsed)
        stop.set()
        producer.join()
    with outbox.engine.begin() as conn:
        conn.execute(sa.text(f"DELETE FROM {TABLE}"))
    outbox.close()
    return row


async def _pgqueuer(dsn: str, seconds: float, meter: Meter) -> dict[str, Any]:
    import psycopg
    from pgqueuer import PgQueuer, PsycopgDriver, Queries

    async def connect() -> Any:
        return await psycopg.AsyncConnection.connect(dsn, autocommit=True)

    setup = Queries(PsycopgDriver(await connect()))
    if not await setup.has_table("pgqueuer"):
        await setup.install()
    await setup.clear_queue()
    await setup.clear_statistics_log()

    workers = [PgQueuer(PsycopgDriver(await connect())) for _ in range(WORKERS)]
    for worker in workers:

        @worker.entrypoint("bench")
        async def noop(job: Any) -> None:
            meter.add()

    producer = Queries(PsycopgDriver(await connect()))
    stop = asyncio.Event()

    async def enqueue() -> None:
        n = 0
        while not stop.is_set():
            await producer.enqueue(
                ["bench"] * BATCH, [str(n + i).encode() for i in range(BATCH)], [0] * BATCH
            )
            n += BATCH
            meter.put = n

    async def timer() -> float:
        meter.start()
        deadline = meter.started + seconds
        while time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            meter.report()
        row = result("pgqueuer", meter, time.monotonic() - meter.started)
        stop.set()
        for worker in workers:
            worker.shutdown.set()
        return row

    tasks = [worker.run(batch_size=BATCH) for worker in workers]
    outcome = await asyncio.gather(timer(), enqueue(), *tasks)
    await setup.clear_queue()
    return dict(outcome[0])


def run_pgqueuer(dsn: str, seconds: float) -> dict[str, Any]:
    return asyncio.run(_pgqueuer(dsn, seconds, Meter("pgqueuer")))


def postgres(command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(POSTGRES), command], capture_output=True, text=True, timeout=600)


def with_postgres(work: Callable[[str], list[dict[str, Any]]]) -> list[dict[str, Any]]:
    started = False
    if postgres("status").returncode != 0:
        start = postgres("start")
        if start.returncode != 0:
            raise SystemExit(
                f"outbox_bench: PostgreSQL did not start:\n{start.stdout}{start.stderr}"
            )
        started = True
    try:
        return work(postgres("url").stdout.strip())
    finally:
        if started:
            postgres("stop")


def summarize(rounds: list[dict[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """One row per system: medians and ranges of its rounds; the ratio to PgQueuer is the
    median of the ratios of the same round."""
    rows = []
    for system in rounds[0]:
        runs = [r[system] for r in rounds]
        rates = [run["jobs_per_s"] for run in runs]
        ratios = [
            r[system]["jobs_per_s"] / r["pgqueuer"]["jobs_per_s"] for r in rounds if "pgqueuer" in r
        ]
        per_cpu = [run["jobs_per_cpu_s"] for run in runs if run["jobs_per_cpu_s"]]
        rows.append(
            {
                "system": system,
                "rounds": len(runs),
                "jobs_per_s": round(statistics.median(rates), 1),
                "jobs_per_s_min": min(rates),
                "jobs_per_s_max": max(rates),
                "put_per_s": round(statistics.median(run["put_per_s"] for run in runs), 1),
                "jobs_per_cpu_s": round(statistics.median(per_cpu), 1) if per_cpu else None,
                "vs_pgqueuer": round(statistics.median(ratios), 2) if ratios else None,
                "vs_pgqueuer_min": round(min(ratios), 2) if ratios else None,
                "vs_pgqueuer_max": round(max(ratios), 2) if ratios else None,
                "runs": runs,
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=8.0, help="timer per row (default 8)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of every row (default 5)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument(
        "--skip-pgqueuer", action="store_true", help="no PgQueuer row (it is not installed)"
    )
    parser.add_argument(
        "--large-batch",
        type=int,
        default=100,
        help="one more SQLite row with this put and claim batch size (0: none; default 100)",
    )
    args = parser.parse_args(argv)
    if not args.skip_pgqueuer:
        try:
            import pgqueuer  # noqa: F401
        except ImportError:
            raise SystemExit(
                "outbox_bench: PgQueuer is not installed; `make bench` installs the bench group "
                "(uv pip install --group bench), or pass --skip-pgqueuer"
            ) from None

    load_before = os.getloadavg()

    def one_round(number: int, url: str) -> dict[str, dict[str, Any]]:
        runs: list[dict[str, Any]] = []
        with tempfile.TemporaryDirectory(prefix="outbox-bench-") as tmp:
            runs.append(
                run_streamcore("streamcore sqlite", f"sqlite:///{tmp}/outbox.db", args.seconds)
            )
            if args.large_batch:
                runs.append(
                    run_streamcore(
                        f"streamcore sqlite, batch {args.large_batch}",
                        f"sqlite:///{tmp}/outbox-large.db",
                        args.seconds,
                        args.large_batch,
                    )
                )
        on_postgres: list[Callable[[], dict[str, Any]]] = [
            lambda: run_streamcore("streamcore postgres", url, args.seconds)
        ]
        if not args.skip_pgqueuer:
            dsn = url.replace("postgresql+psycopg://", "postgresql://")
            on_postgres.append(lambda: run_pgqueuer(dsn, args.seconds))
        if number % 2:  # alternate which of the two goes first
            on_postgres.reverse()
        runs += [run() for run in on_postgres]
        return {run["system"]: run for run in runs}

    def every_round(url: str) -> list[dict[str, dict[str, Any]]]:
        return [one_round(n, url) for n in range(args.rounds)]

    rows = summarize(with_postgres(every_round))
    by_system = {r["system"]: r for r in rows}
    pgq = by_system.get("pgqueuer")
    summary = {
        "shape": {
            "dequeue_workers": WORKERS,
            "batch": BATCH,
            "enqueuers": 1,
            "seconds": args.seconds,
            "rounds": args.rounds,
        },
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "cpus": os.cpu_count(),
        "rows": rows,
        "targets": {
            "postgres_vs_pgqueuer": TARGET_PG_RATIO,
            "sqlite_jobs_per_s": TARGET_SQLITE_RATE,
            "postgres_met": bool(pgq)
            and by_system["streamcore postgres"]["vs_pgqueuer"] >= TARGET_PG_RATIO,
            "sqlite_met": by_system["streamcore sqlite"]["jobs_per_s"] >= TARGET_SQLITE_RATE,
        },
    }
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    columns = [
        TextColumn("system", "left"),
        TextColumn("jobs/s", "right"),
        TextColumn("range", "right"),
        TextColumn("put/s", "right"),
        TextColumn("vs PgQueuer", "right"),
        TextColumn("ratio range", "right"),
        TextColumn("jobs/CPU-s", "right"),
    ]
    table = [
        [
            r["system"],
            f"{r['jobs_per_s']:,.0f}",
            f"{r['jobs_per_s_min']:,.0f}-{r['jobs_per_s_max']:,.0f}",
            f"{r['put_per_s']:,.0f}",
            f"{r['vs_pgqueuer']:.2f}x" if r["vs_pgqueuer"] is not None else "-",
            f"{r['vs_pgqueuer_min']:.2f}-{r['vs_pgqueuer_max']:.2f}"
            if r["vs_pgqueuer"] is not None
            else "-",
            f"{r['jobs_per_cpu_s']:,.0f}" if r["jobs_per_cpu_s"] else "-",
        ]
        for r in rows
    ]
    before = ", ".join(f"{x:.1f}" for x in summary["load_average_before"])
    after = ", ".join(f"{x:.1f}" for x in summary["load_average_after"])
    print(
        f"outbox: {WORKERS} workers x batch {BATCH}, 1 enqueuer x batch {BATCH}, "
        f"{args.seconds:g} s per row, {args.rounds} rounds (medians); load average {before} "
        f"before, {after} after, on {summary['cpus']} CPUs"
    )
    print(render_table(columns, table))
    targets = summary["targets"]
    print(
        f"targets: postgres >= {TARGET_PG_RATIO:.1f}x PgQueuer: "
        f"{'met' if targets['postgres_met'] else 'NOT met'}; sqlite >= {TARGET_SQLITE_RATE:,.0f} "
        f"jobs/s in the batch-{BATCH} shape: {'met' if targets['sqlite_met'] else 'NOT met'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
