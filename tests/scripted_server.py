"""A local server that one of our scripts (`scripts/<name>.sh start|status|stop`) runs for the
test session: started on first use if it is not running, stopped at the end only if this session
started it, and a failure to start fails every test that needs it (never a skip: CI must not pass
without the server). Used by the Kafka and PostgreSQL plugins."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


class ScriptedServer:
    def __init__(
        self,
        script: str,
        what: str,
        marker: str,
        start_timeout: float,
        address: Callable[[ScriptedServer], str],
        running: Callable[[subprocess.CompletedProcess[str]], bool] = lambda s: s.returncode == 0,
    ) -> None:
        self.script = ROOT / "scripts" / script
        self.what = what
        self.marker = marker
        self.start_timeout = start_timeout
        self._address = address
        self._running = running
        self._lock = threading.Lock()
        self.address: str | None = None
        self.started = False
        self._error: str | None = None

    def run(self, command: str, timeout: float) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.script), command], capture_output=True, text=True, timeout=timeout, cwd=ROOT
        )

    def _fail(self, message: str) -> None:
        self._error = message
        pytest.fail(message, pytrace=False)

    def ensure(self) -> str:
        """The address of the running server, started if needed (once per session)."""
        with self._lock:
            if self.address is not None:
                return self.address
            if self._error is not None:
                pytest.fail(self._error, pytrace=False)
            if not self._running(self.run("status", 60)):
                script = f"scripts/{self.script.name} start"
                try:
                    result = self.run("start", self.start_timeout)
                except subprocess.TimeoutExpired:
                    self._fail(f"{script} did not finish within {self.start_timeout:g} s")
                if result.returncode != 0:
                    self._fail(
                        f"the local {self.what} could not start ({script}, exit "
                        f"{result.returncode}); the tests marked {self.marker} need it.\n"
                        f"{result.stdout}{result.stderr}"
                    )
                self.started = "already running" not in result.stdout
            self.address = self._address(self)
            return self.address

    def stop_if_started(self, timeout: float) -> None:
        if self.started:
            self.run("stop", timeout)
