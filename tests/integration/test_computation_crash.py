"""A real `streamcore run` process on the local backend: SIGKILLed mid-batch and restarted it
loses nothing and re-delivers at most the uncommitted window; SIGTERM checkpoints and exits 0.

The app writes one ledger line per record it processes (line-buffered, so a SIGKILL loses none)
and asks for a checkpoint per record; with `read_batch=50` a checkpoint is taken at the end of
each batch, so at most 50 processed records are uncommitted at any time."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from streamcore.cli.main import main
from streamcore.codecs import get_codec
from streamcore.log import open_log_manager
from streamcore.record import Record

pytestmark = pytest.mark.slow

N = 1500
WINDOW = 50
APP = textwrap.dedent(
    f"""
    import os, time
    from streamcore.computation import Computation, Settings, Topology

    class Copy(Computation):
        def __init__(self):
            super().__init__("copy", 1, 1)
            self.ledger = None

        def init(self, context):
            self.ledger = open(os.environ["CRASH_LEDGER"], "a", buffering=1)

        def process_record(self, context, input_stream, record):
            self.ledger.write(record.key + "\\n")
            time.sleep(0.002)
            context.produce_record("o1", record)
            context.ask_for_checkpoint()

    def topology():
        topology = Topology.builder().add_computation(Copy, ["i1:crash/in", "o1:crash/out"])
        settings = Settings(default_partitions=2, read_batch={WINDOW}, drain_quiet=0.3)
        return topology.build(), settings
    """
)


def ledger_lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def start(tmp_path: Path, *extra: str) -> subprocess.Popen[str]:
    env = dict(os.environ, CRASH_LEDGER=str(tmp_path / "ledger.txt"))
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "streamcore.cli.main",
            "run",
            "crashapp:topology",
            *extra,
            "--app-dir",
            str(tmp_path),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for_lines(path: Path, count: int, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60
    while len(ledger_lines(path)) < count:
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the app processed too little"
        time.sleep(0.01)


@pytest.fixture
def app(tmp_path: Path) -> Path:
    (tmp_path / "crashapp.py").write_text(APP)
    with open_log_manager() as manager:
        manager.create("crash/in", 2)
        appender = manager.appender("crash/in", get_codec("avro"))
        for start_at in range(0, N, 100):
            appender.append_batch(
                [(f"k{i}", Record.of(f"k{i}", b"v%d" % i)) for i in range(start_at, start_at + 100)]
            )
    return tmp_path


def committed() -> int:
    with open_log_manager() as manager:
        return manager.lag("crash/in", "copy").pos


def test_sigkill_mid_batch_then_restart_loses_nothing(app: Path) -> None:
    ledger = app / "ledger.txt"
    process = start(app)
    wait_for_lines(ledger, 400, process)
    process.send_signal(signal.SIGKILL)
    process.wait(10)
    processed_before = len(ledger_lines(ledger))
    uncommitted = processed_before - committed()
    assert 0 <= uncommitted <= WINDOW

    process = start(app, "--drain", "--timeout", "120")
    out, err = process.communicate(timeout=180)
    assert process.returncode == 0, err
    keys = ledger_lines(ledger)
    redelivered = len(keys) - N
    assert redelivered == uncommitted  # exactly the uncommitted window is processed again
    assert set(keys) == {f"k{i}" for i in range(N)}
    with open_log_manager() as manager:
        with manager.tailer("test/check", "crash/out", get_codec("avro")) as tailer:
            out_keys = [rec.message.key for rec in tailer]
        assert manager.lag("crash/in", "copy").lag == 0
    assert set(out_keys) == {f"k{i}" for i in range(N)}  # nothing lost
    assert len(out_keys) - N <= WINDOW  # duplicates only from an append not yet committed
    assert "copy" in out and "drained" in out


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_sigterm_checkpoints_and_exits_0(app: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ledger = app / "ledger.txt"
    port = free_port()
    process = start(app, "--metrics-port", str(port))
    wait_for_lines(ledger, 200, process)
    assert main(["metrics", "--port", str(port)]) == 0
    scraped = capsys.readouterr().out
    assert 'streamcore_computation_running_units{computation="copy"} 1.0' in scraped
    assert 'streamcore_computation_processed_total{computation="copy"}' in scraped
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    assert len(ledger_lines(ledger)) == committed()  # everything processed was committed
    assert "copy" in out and "processed" in out
