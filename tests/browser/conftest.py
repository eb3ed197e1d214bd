"""The browser tests' shared pieces: Debian's chromium (never a browser Playwright downloads),
the artifacts folder of screenshots, printed at the end of the run."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The Airflow harness lives beside the integration tests.
sys.path.insert(0, str(ROOT / "tests" / "integration"))

CHROMIUM = Path(os.environ.get("STREAMCORE_CHROMIUM", "/usr/bin/chromium"))


@pytest.fixture(scope="session")
def chromium() -> Path:
    """The browser binary; missing, it fails the test with the fix (a skip would hide it)."""
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(
            f"no browser at {CHROMIUM}: run `scripts/browser.sh` (installs Debian's chromium; "
            "`make test` runs it first), or set STREAMCORE_CHROMIUM to a Chromium binary",
            pytrace=False,
        )
    done = subprocess.run([str(CHROMIUM), "--version"], capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        pytest.fail(f"{CHROMIUM} --version failed: {done.stderr.strip()}", pytrace=False)
    return CHROMIUM


def pytest_configure(config: pytest.Config) -> None:
    """The run's artifacts folder is named once, by the controlling process: pytest-xdist
    workers inherit the variable, and the controller, which prints the summary, knows it."""
    if not hasattr(config, "workerinput") and not os.environ.get("STREAMCORE_UI_ARTIFACTS"):
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        os.environ["STREAMCORE_UI_ARTIFACTS"] = str(ROOT / ".cache" / "ui-artifacts" / stamp)


@pytest.fixture(scope="session")
def artifacts() -> Path:
    """Where screenshots go: STREAMCORE_UI_ARTIFACTS, else .cache/ui-artifacts/<UTC time>."""
    folder = Path(os.environ["STREAMCORE_UI_ARTIFACTS"])
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    folder = Path(os.environ.get("STREAMCORE_UI_ARTIFACTS", ""))
    shots = len(list(folder.glob("*.png"))) if folder.is_dir() else 0
    if shots:
        terminalreporter.write_line(f"browser test artifacts: {folder} ({shots} screenshots)")
