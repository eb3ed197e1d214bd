"""`processor dump PID`: ask a running `streamcore run` for its processor dump (SIGUSR1) and print
it: each unit's state, the record it is on, a retry in progress, idle time, lag and thread stack
(`streamcore.computation.dump`; the runbook: docs/operating.md, "Processing is stuck")."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from streamcore.cli.context import Context, UsageError, global_options

__all__ = ["register"]

_POLL = 0.05


def run_dump(ctx: Context) -> int:
    from streamcore.computation.dump import dump_file

    pid = ctx.args.pid
    path = dump_file(ctx.config.home, pid)
    before = path.stat().st_mtime_ns if path.exists() else None
    try:
        os.kill(pid, signal.SIGUSR1)
    except ProcessLookupError:
        raise UsageError(f"no process {pid}: give the pid of a running `streamcore run`") from None
    except PermissionError:
        raise UsageError(f"not allowed to signal process {pid}: run as its user") from None
    deadline = time.monotonic() + ctx.args.timeout
    while not path.exists() or path.stat().st_mtime_ns == before:
        if time.monotonic() > deadline:
            raise UsageError(
                f"process {pid} wrote no dump to {path} within {ctx.args.timeout:g} s: is it a "
                "`streamcore run` with the same --home? (its stderr has the dump if it wrote one "
                "elsewhere)"
            )
        time.sleep(_POLL)
    ctx.out(path.read_text().rstrip("\n"))
    return 0


def register(sub: Any) -> None:
    parent = global_options(verbose=False)
    p = sub.add_parser(
        "processor",
        parents=[parent],
        help="look into a running stream processor",
        description=__doc__,
    )
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    d = actions.add_parser(
        "dump",
        parents=[parent],
        help="each unit's record, retry, lag and thread stack (SIGUSR1 to `streamcore run`)",
    )
    d.add_argument("pid", type=int, help="pid of the `streamcore run` process")
    d.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the dump")
    d.set_defaults(func=run_dump)
