"""A child Python process killed at a chosen line of its output: the SIGKILL fault tests' driver
(test_state_faults, test_windowed_faults)."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

SILENCE = 120.0  # s without a line from the child before the test fails (never stalls)


def run_until_killed(root: Path, source: str, args: list[str], kill_at: tuple[str, int]) -> None:
    """Write `source` to `root/child.py`, run it with `args` and SIGKILL it at its `n`-th output
    line reading `kind` (`kill_at = (kind, n)`). A child silent for `SILENCE` s, or ending first,
    fails the test with the end of its stderr."""
    script = root / "child.py"
    script.write_text(textwrap.dedent(source))
    proc = subprocess.Popen(
        [sys.executable, str(script), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    # Both pipes are read by threads: waiting on the pipe (select) while reading it through
    # Python's buffered reader misses the lines the reader has already buffered, and a child
    # whose stderr pipe fills up blocks.
    lines: queue.Queue[str | None] = queue.Queue()
    errors: list[str] = []

    def read_out() -> None:
        for line in proc.stdout:  # type: ignore[union-attr]
            lines.put(line)
        lines.put(None)

    readers = [
        threading.Thread(target=read_out, daemon=True),
        threading.Thread(target=lambda: errors.extend(proc.stderr), daemon=True),  # type: ignore[arg-type]
    ]
    for reader in readers:
        reader.start()
    kind, n = kill_at
    seen = 0
    try:
        while seen < n:
            try:
                line = lines.get(timeout=SILENCE)
            except queue.Empty:
                raise AssertionError(
                    f"the child printed nothing for {SILENCE:g} s ({kill_at}, {seen} seen); "
                    f"its stderr ends with:\n{_stop(proc, readers, errors)}"
                ) from None
            if line is None:
                raise AssertionError(f"the child ended early: {_stop(proc, readers, errors)}")
            seen += line.strip() == kind
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _stop(proc: subprocess.Popen[str], readers: list[threading.Thread], errors: list[str]) -> str:
    """Kill the child, let the readers finish, and give the end of its stderr."""
    proc.kill()
    proc.wait()
    for reader in readers:
        reader.join(timeout=30)
    return "".join(errors[-40:])
