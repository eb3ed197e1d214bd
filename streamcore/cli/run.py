"""`run` and `metrics`: run a topology from a Python factory; print computation metrics.

`streamcore run package.module:factory` imports the module (the current directory is on the
path), calls `factory()`, which returns a `Topology` or `(Topology, Settings)`, and runs it with a
`StreamProcessor` on the configured logs until SIGTERM / Ctrl-C (checkpoint, exit 0), until every
unit ended (poison pills), or with `--drain` until every input is caught up. A summary table (or
`--json`) follows. Exit code 1 when a computation was terminated by a failure, or `--drain` did
not drain within `--timeout`. SIGUSR1 writes a processor dump to stderr and to
`<home>/dumps/processor-<pid>.txt` (`streamcore processor dump PID` asks for one and prints it).
"""

from __future__ import annotations

import argparse
import dataclasses
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from streamcore.cli.context import Context, UsageError, global_options
from streamcore.errors import ConfigError, TopologyError
from streamcore.text import Progress, human_duration, render_table

__all__ = ["register"]

_TICK = 0.2


def _load(args: argparse.Namespace) -> tuple[Any, Any]:
    """The topology `args.topology` names; a name that does not load is a usage error."""
    from streamcore.computation.loader import TopologySpecError, load_topology

    try:
        return load_topology(args.topology, args.app_dir)
    except TopologySpecError as exc:
        raise UsageError(str(exc)) from None


def _apply_concurrency(settings: Any, values: list[str]) -> None:
    for value in values:
        name, sep, number = value.rpartition("=")
        try:
            count = int(number)
        except ValueError:
            raise UsageError(f"--concurrency {value!r}: use N or COMPUTATION=N") from None
        settings.set_concurrency(name if sep else "default", count)


def _apply_named(flag: str, setter: Callable[[str, str], Any], values: list[str]) -> None:
    """`--FLAG VALUE` or `--FLAG COMPUTATION=VALUE` through a `Settings` setter; a value it
    refuses is a usage error naming the flag."""
    for value in values:
        name, sep, setting = value.rpartition("=")
        try:
            setter(name if sep else "default", setting)
        except TopologyError as exc:
            raise UsageError(f"{flag} {value!r}: {exc}") from None


def _apply_groups(ctx: Context, values: list[str]) -> None:
    """`--group KEY=VALUE`: `[groups]` keys for this run, checked before anything starts."""
    if not values:
        return
    section = dict(ctx.config.table.get("groups", {}))
    for value in values:
        key, sep, setting = value.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--group {value!r}: use KEY=VALUE, e.g. session_timeout=20s")
        section[key.strip()] = setting.strip()
    ctx.config = dataclasses.replace(ctx.config, table={**ctx.config.table, "groups": section})
    try:
        ctx.config.groups  # noqa: B018 (parsed now: a wrong key or value stops the run here)
    except ConfigError as exc:
        raise UsageError(f"--group: {exc}") from None


def _topologies(ctx: Context) -> list[tuple[str, Any, Any]]:
    """(label, topology, settings) of what this run runs: `MODULE:FACTORY`, or the declared
    processors named by --processor, or every declared one."""
    from streamcore.computation.declared import declared_processors
    from streamcore.computation.loader import TopologySpecError

    args = ctx.args
    if args.topology and args.processor:
        raise UsageError("give MODULE:FACTORY or --processor NAME, not both")
    if args.topology:
        topology, settings = _load(args)
        return [(args.topology, topology, settings)]
    declared = declared_processors(ctx.config)
    names = args.processor or sorted(declared)
    if not names:
        raise UsageError(
            "give a topology (MODULE:FACTORY), or declare processors in [processors.NAME] of "
            "the configuration (docs/operating.md)"
        )
    unknown = [n for n in names if n not in declared]
    if unknown:
        raise UsageError(
            f"--processor {', '.join(unknown)}: not declared; the configuration declares "
            f"{', '.join(sorted(declared)) or 'none'}"
        )
    out = []
    for name in names:
        try:
            topology, settings = declared[name].load(args.app_dir)
        except TopologySpecError as exc:
            raise UsageError(f"processors.{name}: {exc}") from None
        out.append((name, topology, settings))
    return out


def run_run(ctx: Context) -> int:
    from streamcore.computation import StreamProcessor
    from streamcore.computation.declared import declared_logs, ensure_logs
    from streamcore.computation.dump import install_dump_signal
    from streamcore.computation.server import MetricsServer
    from streamcore.computation.summary import summary_rows

    args = ctx.args
    _apply_groups(ctx, args.group or [])
    runs = _topologies(ctx)
    if args.metrics_port is not None and len(runs) > 1:
        raise UsageError(
            f"--metrics-port serves one processor and this run has {len(runs)}; run one "
            "--processor per process to scrape each"
        )
    for _, _, settings in runs:
        _apply_concurrency(settings, args.concurrency or [])
        _apply_named("--start", settings.set_start, args.start or [])
        _apply_named(
            "--worker-allocation", settings.set_worker_allocation, args.worker_allocation or []
        )
    for name in ensure_logs(ctx.manager, declared_logs(ctx.config)):
        ctx.err(f"created declared log {name}")
    stop = threading.Event()
    previous = {
        sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)
    }
    processors = [
        StreamProcessor(ctx.manager, topology, settings, health_delay=args.health_delay)
        for _, topology, settings in runs
    ]
    restore_dump = install_dump_signal(processors, ctx.config.home)
    server = None
    started = time.monotonic()
    drained = False
    ended = True
    try:
        for processor in processors:
            processor.start()
        if args.metrics_port is not None:
            server = MetricsServer(processors[0], args.metrics_port, args.metrics_host)
            ctx.err(f"metrics on {server.url}")
        progress = Progress("run", interval=args.progress)
        deadline = started + args.timeout if args.timeout else None
        while not stop.wait(_TICK):
            progress.update(sum(s.processed for p in processors for s in p.unit_stats()))
            if any(p.is_terminated() for p in processors):
                break
            if args.drain and all(p.is_drained() for p in processors):
                drained = True
                break
            if deadline is not None and time.monotonic() >= deadline:
                break
    finally:
        for processor in processors:
            ended = processor.stop(args.stop_timeout) and ended
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        restore_dump()
        if server is not None:
            server.close()
    rows = [row for processor in processors for row in summary_rows(processor)]
    failed = [name for processor in processors for name in processor.failed_computations()]
    elapsed = time.monotonic() - started
    if ctx.json:
        ctx.emit_json(
            {
                "topology": args.topology,
                "processors": [label for label, _, _ in runs],
                "elapsed_s": round(elapsed, 3),
                "drained": drained if args.drain else None,
                "stopped_cleanly": ended,
                "failed": failed,
                "computations": rows,
            }
        )
    else:
        columns = ["computation", "units", "state", "processed", "produced", "retried"]
        columns += ["failed", "skipped", "dead_lettered", "checkpoints", "lag"]
        ctx.out(render_table(columns, ([r[c] for c in columns] for r in rows)))
        ctx.out(f"ran {human_duration(elapsed * 1000)}" + (", drained" if drained else ""))
        for row in rows:
            if row["failure"]:
                ctx.err(f"computation {row['computation']} terminated: {row['failure']}")
    if failed or (args.drain and not drained):
        return 1
    return 0


def run_metrics(ctx: Context) -> int:
    """Scrape a running `streamcore run --metrics-port`, or compute lag/latency gauges of a
    topology's computations from the logs."""
    args = ctx.args
    if args.url or args.port:
        url = args.url or f"http://127.0.0.1:{args.port}/metrics"
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                text = response.read().decode()
        except (urllib.error.URLError, OSError) as exc:
            raise UsageError(
                f"cannot scrape {url} ({exc}); is `streamcore run --metrics-port` running?"
            ) from None
        sys.stdout.write(text)
        return 0
    if not args.topology:
        raise UsageError("give a topology (module:factory), --port or --url")
    from prometheus_client import CollectorRegistry, generate_latest

    from streamcore.computation import StreamProcessor
    from streamcore.computation.metrics import lag_families

    topology, settings = _load(args)
    processor = StreamProcessor(ctx.manager, topology, settings)
    if ctx.json:
        ctx.emit_json(
            [
                {
                    "computation": name,
                    "stream": stream,
                    "pos": lag.pos,
                    "end": lag.end,
                    "lag": lag.lag,
                    "latency_ms": latency.latency_ms,
                }
                for name, stream, lag, latency in processor.stream_lags()
            ]
        )
        return 0

    class _Lags:
        def collect(self) -> Any:
            return lag_families(processor)

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Lags())
    sys.stdout.write(generate_latest(registry).decode())
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    common = global_options()
    p = sub.add_parser(
        "run",
        parents=[common],
        help="run a topology (module:factory) until stopped or drained",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "topology",
        nargs="?",
        metavar="MODULE:FACTORY",
        help="returns Topology or (Topology, Settings); without it, the declared processors",
    )
    p.add_argument(
        "--processor",
        action="append",
        metavar="NAME",
        help="a processor declared in [processors.NAME] of the configuration (default: all of "
        "them when no MODULE:FACTORY is given); repeatable",
    )
    p.add_argument("--app-dir", default=".", help="folder put on the import path (default: .)")
    p.add_argument("--drain", action="store_true", help="stop once every input is caught up")
    p.add_argument(
        "--concurrency",
        action="append",
        metavar="[NAME=]N",
        help="threads of every computation (N) or of one (NAME=N); repeatable",
    )
    p.add_argument(
        "--start",
        action="append",
        metavar="[NAME=]earliest|latest",
        help="where a new group reads partitions it never committed, for every computation or "
        "one (default earliest); repeatable",
    )
    p.add_argument(
        "--worker-allocation",
        action="append",
        metavar="[NAME=]static|pool",
        help="static: each thread owns partitions (default); pool: the threads share them, per "
        "key in order (stateless computations; docs/operating.md); repeatable",
    )
    p.add_argument(
        "--group",
        action="append",
        metavar="KEY=VALUE",
        help="a [groups] timing of the local and memory logs for this run, e.g. "
        "session_timeout=20s (docs/operating.md); repeatable",
    )
    p.add_argument("--metrics-port", type=int, help="serve /metrics and /health on this port")
    p.add_argument("--metrics-host", default="127.0.0.1", help="address to serve metrics on")
    p.add_argument(
        "--health-delay",
        type=float,
        default=36 * 3600.0,
        metavar="SECONDS",
        help="/health turns 503 this long after a computation terminated (default 36 h)",
    )
    p.add_argument("--timeout", type=float, help="stop after this many seconds")
    p.add_argument(
        "--stop-timeout", type=float, default=30.0, help="seconds to wait for units to stop"
    )
    p.add_argument("--progress", type=float, default=10.0, help="seconds between progress lines")
    p.set_defaults(func=run_run)

    m = sub.add_parser(
        "metrics",
        parents=[common],
        help="print computation metrics (Prometheus text): scraped, or lag from the logs",
        description="With --port/--url: scrape a running `streamcore run --metrics-port`. With "
        "MODULE:FACTORY: lag, latency, end and position of each computation's group per input "
        "stream, read from the logs (the topology need not run).",
    )
    m.add_argument("topology", nargs="?", metavar="MODULE:FACTORY")
    m.add_argument("--app-dir", default=".", help="folder put on the import path (default: .)")
    m.add_argument("--port", type=int, help="scrape http://127.0.0.1:PORT/metrics")
    m.add_argument("--url", help="scrape this URL")
    m.set_defaults(func=run_metrics)
