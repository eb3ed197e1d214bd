"""`streamcore` entry point: parse arguments, run one command, map errors to exit codes.

Exit codes: 0 success; 2 bad arguments (argparse errors, unknown log, invalid name, malformed
values); 1 any other streamcore error (message only; traceback with -v); 130 interrupted.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import traceback
from collections.abc import Callable, Sequence

from streamcore.cli import (
    admin,
    avrofile,
    bulk,
    copy,
    demo,
    lag,
    outbox,
    position,
    processor,
    read,
    recovery,
    run,
    tables,
    work,
)
from streamcore.cli.context import Context, UsageError, global_options, load_cli_config
from streamcore.errors import (
    InvalidNameError,
    LogNotFoundError,
    StreamcoreError,
    UndecodableRecordError,
)

__all__ = ["main"]

PROG = "streamcore"
_USAGE_ERRORS = (UsageError, LogNotFoundError, InvalidNameError)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        parents=[global_options(top_level=True)],
        description="Inspect and manage streamcore logs (like Nuxeo's stream.sh). Data lives "
        "under --home / $STREAMCORE_HOME (default data/ in the project). Times are UTC.",
        epilog="Run `streamcore COMMAND --help` for the options of a command.",
    )
    sub = parser.add_subparsers(title="commands", dest="command", metavar="COMMAND", required=True)
    admin.register(sub)
    lag.register(sub)
    read.register(sub)
    position.register(sub)
    copy.register(sub)
    avrofile.register(sub)
    demo.register(sub)
    run.register(sub)
    processor.register(sub)
    work.register(sub)
    outbox.register(sub)
    tables.register(sub)
    bulk.register(sub)
    recovery.register(sub)
    return parser


def _setup_logging(debug: bool) -> Callable[[], None]:
    """Log records of streamcore to the current stderr (WARNING, or DEBUG with -v); returns
    the function that restores the previous logging state (main() may run many times in one
    process, e.g. in tests)."""
    logger = logging.getLogger("streamcore")
    previous_level = logger.level
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("streamcore: %(levelname)s %(name)s: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG if debug else logging.WARNING)

    def restore() -> None:
        logger.removeHandler(handler)
        logger.setLevel(previous_level)

    return restore


def _error(message: str) -> None:
    sys.stderr.write(f"{PROG}: error: {message}\n")
    sys.stderr.flush()


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or a bad argument (2), message printed
        return exc.code if isinstance(exc.code, int) else 2
    debug = bool(getattr(args, "debug", False))
    restore_logging = _setup_logging(debug)
    ctx: Context | None = None
    try:
        ctx = Context(args, load_cli_config(args))
        return int(args.func(ctx) or 0)
    except _USAGE_ERRORS as exc:
        if debug:
            traceback.print_exc()
        _error(f"{exc} (see `{PROG} {args.command} --help`)")
        return 2
    except UndecodableRecordError as exc:
        if debug:
            traceback.print_exc()
        _error(f"{exc}. {_cli_way_past(exc)}")
        return 1
    except StreamcoreError as exc:
        if debug:
            traceback.print_exc()
        _error(str(exc))
        return 1
    except OSError as exc:
        if isinstance(exc, BrokenPipeError):
            # The reader went away (e.g. `streamcore cat ... | head`): stop quietly.
            with contextlib.suppress(OSError, ValueError):
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 0
        if debug:
            traceback.print_exc()
        _error(str(exc))
        return 1
    except KeyboardInterrupt:
        _error("interrupted")
        return 130
    finally:
        if ctx is not None:
            ctx.close()
        restore_logging()


def _cli_way_past(exc: UndecodableRecordError) -> str:
    """The error names the Python way past the record; a shell user needs the commands."""
    at = exc.offset
    log, partition = at.partition.name.urn, at.partition.partition
    return (
        f"From the shell: `{PROG} cat -l {log} -p {partition} --codec raw` shows its bytes, and "
        f"`{PROG} position -l {log} -g GROUP --to-offset {partition}:{at.offset + 1}` moves a "
        "consumer group past it"
    )


if __name__ == "__main__":
    sys.exit(main())
