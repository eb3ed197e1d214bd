"""The processor dump (streamcore.computation.dump; docs/operating.md, "Processing is stuck"): the
record a unit is on, its stack, a retry in progress; and `streamcore processor dump PID` asking
a running `streamcore run` for one over SIGUSR1."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest
from audit_support import wait_until

from streamcore.cli.main import main
from streamcore.codecs import get_codec
from streamcore.computation import (
    ComputationPolicy,
    Processor,
    Settings,
    StreamProcessor,
    Topology,
)
from streamcore.computation.dump import render_dump, unit_dumps
from streamcore.log import open_log_manager
from streamcore.log.memory import MemoryLogManager
from streamcore.record import Record

WAIT = 60.0


class Stuck(Processor):
    release = threading.Event()

    def process(self, key: str, value: Any) -> None:
        if key == "stuck":
            Stuck.release.wait(WAIT)


class Failing(Processor):
    def process(self, key: str, value: Any) -> None:
        raise ValueError("never works")


def processor(computation: type[Processor], settings: Settings) -> StreamProcessor:
    manager = MemoryLogManager()
    manager.create("app/in", 1)
    manager.appender("app/in", get_codec("avro")).append_batch(
        [(k, Record(k, b"1")) for k in ("a", "b", "stuck", "c")]
    )
    topology = Topology.builder().add_processor("app/work", computation, inputs=["app/in"]).build()
    return StreamProcessor(manager, topology, settings)


def test_a_dump_shows_the_record_a_unit_is_stuck_on_and_where() -> None:
    Stuck.release.clear()
    running = processor(Stuck, Settings(drain_quiet=0.1)).start()
    try:
        wait_until(
            lambda: unit_dumps(running)[0].record == "app-in-00:+2 key='stuck'", WAIT, "stuck"
        )
        (unit,) = unit_dumps(running)
        assert (unit.computation, unit.unit, unit.state, unit.alive) == (
            "app/work",
            0,
            "running",
            True,
        )
        # One read batch of four records, checkpointed at its end: nothing committed yet.
        assert unit.retrying is None and unit.lag == 4
        assert any("Stuck.release.wait" in line for line in unit.stack)
        text = render_dump([unit], pid=123)
        assert "processor dump, pid 123" in text and "app-in-00:+2 key='stuck'" in text
        assert "--- app/work unit 0, thread streamcore-app/work-0 (alive)" in text
    finally:
        Stuck.release.set()
    assert running.drain_and_stop(WAIT)


def test_a_dump_shows_a_retry_in_progress() -> None:
    settings = Settings().set_policy("app/work", ComputationPolicy(max_retries=3, delay=60.0))
    running = processor(Failing, settings).start()
    try:
        wait_until(lambda: unit_dumps(running)[0].retrying == "attempt 1 of 3", WAIT, "a retry")
        assert unit_dumps(running)[0].record == "app-in-00:+0 key='a'"
    finally:
        assert running.stop(WAIT)  # the retry's wait ends with the stop


APP = textwrap.dedent(
    """
    import pathlib, threading
    from streamcore.computation import Processor, Topology

    class Stuck(Processor):
        def process(self, key, value):
            pathlib.Path(MARK).write_text("stuck")
            threading.Event().wait(600)

    def topology():
        return Topology.builder().add_processor("app/stuck", Stuck, inputs=["app/in"]).build()
    """
)


def test_processor_dump_asks_a_running_streamcore_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mark = tmp_path / "stuck"
    (tmp_path / "dump_app.py").write_text(f"MARK = {str(mark)!r}\n" + APP)
    with open_log_manager() as manager:  # under the test's STREAMCORE_HOME, as the child's
        manager.create("app/in", 1)
        manager.appender("app/in", get_codec("avro")).append_batch([("k1", Record("k1", b"x"))])
    command = [sys.executable, "-m", "streamcore.cli.main", "run", "dump_app:topology"]
    child = subprocess.Popen(
        [*command, "--app-dir", str(tmp_path)], stderr=subprocess.PIPE, text=True
    )
    try:
        wait_until(lambda: mark.exists() or child.poll() is not None, WAIT, "the stuck record")
        assert child.poll() is None, child.stderr.read() if child.stderr else ""
        capsys.readouterr()
        assert main(["processor", "dump", str(child.pid)]) == 0
        text = capsys.readouterr().out
        assert f"processor dump, pid {child.pid}" in text
        assert "app-in-00:+0 key='k1'" in text and "threading.Event().wait(600)" in text
    finally:
        child.kill()
        child.wait()
    assert main(["processor", "dump", "999999999"]) == 2
    assert "no process 999999999" in capsys.readouterr().err
