"""The audit relay process SIGKILLed in the middle of a batch, on SQLite and PostgreSQL, relaying
to the local log: after a restart every published entry is in `audit/entries` at least once, in
publish order of first appearance, and none is lost. Killed after the append and before the
jobs' `done`, the batch is appended again (the duplicates the Delta MERGE on the event id
removes); killed before the append, it is appended once.

A memory log dies with the process that holds it, so the in-process analogue (a relay frozen
between append and acknowledgement) is in tests/unit/audit/test_audit_relay.py, on both logs."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
from audit_support import DATABASES, entry, event_ids, read_log, wait_until

from streamcore.audit import QUEUE, publish, relay
from streamcore.config import StreamcoreConfig
from streamcore.log.local.manager import LocalLogManager
from streamcore.outbox import DONE, INIT, PROCESSING, Outbox
from streamcore.outbox.schema import jobs

pytestmark = [pytest.mark.slow, pytest.mark.parametrize("outbox_url", DATABASES, indirect=True)]

TESTS = Path(__file__).resolve().parents[1]

# The relay process: the audit relay on a local log whose appends go through a SpyManager, so a
# chosen append can stop right before or right after the write for the test to kill it there.
RELAY = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path

    sys.path.insert(0, sys.argv[1])
    from audit_support import SpyManager

    from streamcore.audit import relay
    from streamcore.config import StreamcoreConfig
    from streamcore.log.local.manager import LocalLogManager
    from streamcore.outbox import Outbox, Registry

    url, home, marker, stop_at, delay = sys.argv[2:7]
    home, marker = Path(home), Path(marker)

    def signal_and_wait(number):
        if stop_at != "none" and number == 2:
            marker.write_text(stop_at)
            time.sleep(300)  # killed long before this ends
        if number == 1:
            marker.with_suffix(".started").write_text("relaying")
        time.sleep(float(delay))

    spy = SpyManager(LocalLogManager(home / "log", config=StreamcoreConfig(home=home)))
    if stop_at == "before_append":
        spy.before = signal_and_wait
    else:
        spy.after = signal_and_wait
    registry = Registry()
    relay(spy, registry=registry, hung_timeout=1.0)
    with Outbox(url, registry=registry, poll_interval=0.1):
        time.sleep(300)
    """
)


def start_relay(url: str, home: Path, marker: Path, stop_at: str, delay: float):
    return subprocess.Popen(
        [sys.executable, "-c", RELAY, str(TESTS), url, str(home), str(marker), stop_at, str(delay)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def kill(child: subprocess.Popen) -> None:
    os.kill(child.pid, signal.SIGKILL)
    child.wait(10)
    assert child.returncode == -signal.SIGKILL


def wait_for(child: subprocess.Popen, path: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert child.poll() is None, f"relay exited early:\n{child.stdout.read()}"
        assert time.monotonic() < deadline, f"the relay never wrote {path.name}"
        time.sleep(0.02)


def statuses(outbox: Outbox) -> list[str]:
    with outbox.engine.connect() as conn:
        query = sa.select(jobs.c.status).where(jobs.c.queue == QUEUE).order_by(jobs.c.seq)
        return list(conn.execute(query).scalars())


def publish_entries(outbox: Outbox, registry, count: int) -> list[str]:
    ids = []
    for start in range(0, count, 10):
        with outbox.engine.begin() as conn:
            ids += [publish(conn, entry(n), registry=registry) for n in range(start, start + 10)]
    return ids


def drain(outbox: Outbox, registry, home: Path, expected: int) -> list[str]:
    """Restart the relay in this process (1 s hung timeout) until every job is done; returns
    the event ids in the log, in log order."""
    manager = LocalLogManager(home / "log", config=StreamcoreConfig(home=home))
    try:
        relay(manager, registry=registry, hung_timeout=1.0)
        with outbox:
            wait_until(lambda: set(statuses(outbox)) == {DONE}, 60, "every job done")
        return event_ids(read_log(manager, expected))
    finally:
        manager.close()


@pytest.mark.parametrize("stop_at", ["before_append", "after_append"])
def test_a_relay_killed_in_a_batch_loses_no_entry(
    make_outbox, registry, outbox_url, tmp_path: Path, stop_at: str
) -> None:
    outbox = make_outbox()
    ids = publish_entries(outbox, registry, 70)
    marker = tmp_path / "stopped"
    child = start_relay(outbox_url, tmp_path, marker, stop_at, 0.0)
    try:
        wait_for(child, marker)
        kill(child)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    appended = 50 if stop_at == "after_append" else 25
    reader = LocalLogManager(tmp_path / "log", config=StreamcoreConfig(home=tmp_path))
    assert event_ids(read_log(reader, appended, timeout=5)) == ids[:appended]
    reader.close()
    # The first batch's done went with the second claim; the second batch dies in processing.
    assert statuses(outbox) == [DONE] * 25 + [PROCESSING] * 25 + [INIT] * 20

    logged = drain(outbox, registry, tmp_path, 70 + appended - 25)
    if stop_at == "after_append":
        assert logged == ids[:50] + ids[25:]  # the killed batch twice: at-least-once
    else:
        assert logged == ids


def test_relays_killed_at_random_moments_lose_no_entry(
    make_outbox, registry, outbox_url, tmp_path: Path
) -> None:
    """Three relay processes, each SIGKILLed at a random moment while it appends batches (50 ms
    per append), then a fourth that drains the rest."""
    outbox = make_outbox()
    ids = publish_entries(outbox, registry, 400)
    rng = random.Random(12)
    for trial in range(3):
        marker = tmp_path / f"trial-{trial}"
        child = start_relay(outbox_url, tmp_path, marker, "none", 0.05)
        try:
            wait_for(child, marker.with_suffix(".started"))
            time.sleep(rng.uniform(0.0, 0.4))
            kill(child)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
    assert DONE in statuses(outbox) and INIT in statuses(outbox)  # killed mid-stream
    logged = drain(outbox, registry, tmp_path, 400)
    first_seen = list(dict.fromkeys(logged))
    assert first_seen == ids  # none lost, first appearances in publish order
