"""A child Python process killed at a chosen line of its output: the SIGKILL fault tests' driver
(test_state_faults, test_windowed_faults)."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import textwrap
from pathlib import Path


def run_until_killed(root: Path, source: str, args: list[str], kill_at: tuple[str, int]) -> None:
    """Write `source` to `root/child.py`, run it with `args` and SIGKILL it at its `n`-th output
    line reading `kind` (`kill_at = (kind, n)`). A child silent for 120 s, or ending first,
    fails the test (it never stalls it)."""
    script = root / "child.py"
    script.write_text(textwrap.dedent(source))
    proc = subprocess.Popen(
        [sys.executable, str(script), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    kind, n = kill_at
    seen = 0
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(proc.stdout, selectors.EVENT_READ)
            while seen < n:
                assert selector.select(timeout=120), (
                    f"the child printed nothing for 120 s ({kill_at})"
                )
                line = proc.stdout.readline()
                assert line, f"the child ended early: {proc.stderr.read()}"
                seen += line.strip() == kind
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
