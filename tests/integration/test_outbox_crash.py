"""A worker process SIGKILLed in the middle of a job: after the (test-shortened) hung timeout the
job runs again in another process and ends done, on SQLite and PostgreSQL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from streamcore.outbox import DONE, PROCESSING, put
from streamcore.outbox.schema import jobs

pytestmark = pytest.mark.slow

WORKER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from streamcore.outbox import Outbox, Registry

    url, marker = sys.argv[1], Path(sys.argv[2])

    def consumer(payload):
        partial = marker.with_suffix(".tmp")
        partial.write_text(str(payload))
        partial.replace(marker)  # atomic: the test never sees a half-written marker
        time.sleep(120)  # killed long before this ends

    registry = Registry()
    registry.register("crashy", consumer)
    with Outbox(url, registry=registry, poll_interval=0.1):
        time.sleep(120)
    """
)


def job_state(engine: sa.Engine) -> tuple[str, int]:
    with engine.connect() as conn:
        row = conn.execute(sa.select(jobs.c.status, jobs.c.tries)).one()
    return row.status, row.tries


def test_sigkilled_worker_job_runs_again_after_the_hung_timeout(
    make_outbox, registry, outbox_url, tmp_path: Path
):
    ran: list[str] = []
    registry.register("crashy", ran.append, hung_timeout=1.0)
    outbox = make_outbox(poll_interval=0.2)
    with outbox.engine.begin() as conn:
        put(conn, "crashy", "payload-1", id="job-1", registry=registry)
    marker = tmp_path / "started"
    child = subprocess.Popen(
        [sys.executable, "-c", WORKER, outbox_url, str(marker)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert child.poll() is None, f"worker exited early:\n{child.stdout.read()}"
            assert time.monotonic() < deadline, "the worker never started the job"
            time.sleep(0.05)
        os.kill(child.pid, signal.SIGKILL)
        child.wait(10)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == -signal.SIGKILL
    assert marker.read_text() == "payload-1"
    assert job_state(outbox.engine) == (PROCESSING, 1)  # the dead worker's claim
    with outbox:
        deadline = time.monotonic() + 30
        while job_state(outbox.engine)[0] != DONE:
            assert time.monotonic() < deadline, f"job not re-run: {job_state(outbox.engine)}"
            time.sleep(0.05)
    assert ran == ["payload-1"]
    assert job_state(outbox.engine) == (DONE, 2)
