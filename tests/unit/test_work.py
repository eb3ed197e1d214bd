"""The WorkManager (streamcore.work; docs/work.md): works scheduled many times run once, failures
follow the queue's policy, counts are exact; on the local log, processes schedule the same ids
and a worker SIGKILLed mid-work loses nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from collections import Counter
from pathlib import Path

import pytest
from audit_support import wait_until

from streamcore.computation import ComputationPolicy, StreamProcessor
from streamcore.config import LogDefaults, StreamcoreConfig
from streamcore.errors import InvalidArgumentError
from streamcore.log.local.manager import LocalLogManager
from streamcore.log.memory import MemoryLogManager
from streamcore.work import Work, WorkManager, WorkQueue

WAIT = 120.0


def test_works_scheduled_many_times_run_once_and_failures_follow_the_policy(
    tmp_path: Path,
) -> None:
    manager = MemoryLogManager()
    policy = ComputationPolicy(max_retries=0, dlq="work/thumbs-dlq")
    works = WorkManager([WorkQueue("thumbs", pool_size=2, policy=policy)])
    runs: Counter[str] = Counter()
    lock = threading.Lock()

    def thumbnail(params) -> None:
        with lock:
            runs[params["doc"]] += 1

    works.register("thumbnail", thumbnail)
    for _ in range(3):
        for n in range(20):
            works.schedule(manager, "thumbs", Work("thumbnail", f"doc-{n}", {"doc": f"{n}"}))
    works.schedule(manager, "thumbs", Work("nobody-handles-this", "x-1"))
    assert manager.size("work/thumbs") == 6  # pool 2 x over-provisioning 3
    (before,) = works.stats(manager)
    assert (before.scheduled, before.completed, before.running) == (61, 0, 2)
    topology, settings = works.topology()
    settings.state_dir = tmp_path / "state"
    processor = StreamProcessor(manager, topology, settings).start()
    assert processor.drain_and_stop(WAIT)
    assert runs == Counter({f"{n}": 1 for n in range(20)})
    (after,) = works.stats(manager)
    assert (after.scheduled, after.completed, after.running) == (0, 61, 0)
    assert sum(manager.end_offsets("work/thumbs-dlq")) == 1  # the work without a handler


def test_wrong_queues_and_works_are_refused() -> None:
    works = WorkManager([WorkQueue("q")])
    with pytest.raises(InvalidArgumentError, match="no work queue 'other'; the queues are q"):
        works.schedule(MemoryLogManager(), "other", Work("w", "1"))
    with pytest.raises(InvalidArgumentError, match="a work needs a handler name and an id"):
        Work("w", "")
    with pytest.raises(InvalidArgumentError, match="pool_size and overprovisioning must be"):
        WorkQueue("q", pool_size=0)


APP = textwrap.dedent(
    """
    import os, sys, threading, time
    from streamcore.computation import StreamProcessor
    from streamcore.config import LogDefaults, StreamcoreConfig
    from streamcore.log.local.manager import LocalLogManager
    from streamcore.work import Work, WorkManager, WorkQueue

    root, role = sys.argv[1], sys.argv[2]
    manager = LocalLogManager(root + "/log", config=StreamcoreConfig(home=root, log=LogDefaults()))
    manager.heartbeat_interval, manager.session_timeout = 0.1, 0.8
    works = WorkManager([WorkQueue("index", pool_size=1)])
    if role == "schedule":
        for n in range(25):
            works.schedule(manager, "index", Work("index", f"doc-{n}", {"n": n}))
        manager.close()
        sys.exit(0)

    def index(params):
        time.sleep(0.02)  # a work takes a while: the kill lands in the middle of one
        with open(root + "/runs.txt", "a") as out:
            out.write(f"doc-{params['n']}\\n")
            out.flush()
            os.fsync(out.fileno())
        print("ran", flush=True)

    works.register("index", index)
    topology, settings = works.topology()
    settings.state_dir = root + "/state"
    settings.checkpoint_interval = 0.0
    processor = StreamProcessor(manager, topology, settings).start()
    if role == "drain":
        ok = processor.drain_and_stop(120)
        sys.exit(0 if ok else 3)
    threading.Event().wait()
    """
)


def test_processes_schedule_the_same_ids_and_a_killed_worker_loses_nothing(
    tmp_path: Path,
) -> None:
    script = tmp_path / "works_app.py"
    script.write_text(APP)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}

    def run(role: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, str(script), str(tmp_path), role],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )

    schedulers = [run("schedule") for _ in range(3)]
    for process in schedulers:
        _, err = process.communicate(timeout=WAIT)
        assert process.returncode == 0, err
    manager = LocalLogManager(
        tmp_path / "log", config=StreamcoreConfig(home=tmp_path, log=LogDefaults())
    )
    assert sum(manager.end_offsets("work/index")) == 75  # 3 processes x the same 25 ids
    worker = run("work")
    ran = 0
    assert worker.stdout is not None
    while ran < 10:  # killed in the middle of its works
        line = worker.stdout.readline()
        assert line, f"the worker ended early: {worker.stderr.read() if worker.stderr else ''}"
        ran += line.strip() == "ran"
    worker.kill()
    worker.wait()
    drain = run("drain")
    _, err = drain.communicate(timeout=WAIT)
    assert drain.returncode == 0, err
    runs = Counter((tmp_path / "runs.txt").read_text().split())
    assert set(runs) == {f"doc-{n}" for n in range(25)}  # nothing lost
    # Each id ran once, but for the work the kill interrupted, which may run again.
    assert sum(runs.values()) <= 26 and max(runs.values()) <= 2
    wait_until(lambda: manager.lag("work/index", "work/index-pool").lag == 0, WAIT, "no lag")
    manager.close()


def test_work_schedule_and_stats_from_the_shell(capsys: pytest.CaptureFixture[str]) -> None:
    from streamcore.cli.main import main

    argv = ["work", "schedule", "mail", "send", "--id", "m-1", "--id", "m-2", "--pool", "2"]
    assert main([*argv, "--params", '{"to": "ada"}']) == 0
    assert "scheduled 2 work(s) 'send' on queue mail" in capsys.readouterr().err
    assert main(["work", "stats", "--json"]) == 0
    (mail,) = [s for s in json.loads(capsys.readouterr().out) if s["queue"] == "mail"]
    assert mail == {"queue": "mail", "scheduled": 2, "running": 2, "completed": 0, "pool_size": 2}
    assert main(["work", "schedule", "mail", "send", "--id", "m-3", "--params", "[1]"]) == 2
    assert "--params must be a JSON object" in capsys.readouterr().err
