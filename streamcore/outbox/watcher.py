"""The max-execute-time watcher: logs where a job that runs too long is stuck.

Python cannot stop a thread, so the watcher does what helps an operator: once per job run past
the queue's `max_execute_time`, it logs a warning with the current stack of the thread running
it (and counts it in `overdue`). The job keeps running; past its hung timeout (or if its worker
dies) the hung detector hands it to another worker, where it may run a second time.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
import traceback
from dataclasses import dataclass

__all__ = ["ExecutionWatcher"]


logger = logging.getLogger(__name__)


@dataclass
class _Running:
    queue: str
    job_id: str
    started: float
    limit: float
    reported: bool = False


class ExecutionWatcher(threading.Thread):
    """The thread that checks, every `interval` seconds, which running jobs are past their
    queue's `max_execute_time`, and logs where each is stuck."""

    def __init__(self, interval: float = 1.0) -> None:
        super().__init__(name="outbox-watcher", daemon=True)
        self.interval = interval
        self.overdue = 0
        self._running: dict[int, _Running] = {}
        self._stop_event = threading.Event()

    def begin(self, queue: str, job_id: str, limit: float) -> None:
        """The calling thread starts running job `job_id` (one job per thread at a time).

        No lock: a dict item assignment or pop is atomic, and `check` copies the items first."""
        self._running[threading.get_ident()] = _Running(queue, job_id, time.monotonic(), limit)

    def end(self) -> None:
        """The calling thread finished its job."""
        self._running.pop(threading.get_ident(), None)

    def check(self) -> int:
        """Log the stack of every newly overdue job; returns how many were reported."""
        now = time.monotonic()
        late = [
            (ident, run)
            for ident, run in list(self._running.items())
            if not run.reported and now - run.started > run.limit
        ]
        for _, run in late:
            run.reported = True
        if not late:
            return 0
        frames = sys._current_frames()
        for ident, run in late:
            frame = frames.get(ident)
            stack = "".join(traceback.format_stack(frame)) if frame else "(thread gone)\n"
            logger.warning(
                "outbox: job %s of queue %s runs for %.1f s, over its max execute time of %g s; "
                "its thread is at:\n%s",
                run.job_id,
                run.queue,
                now - run.started,
                run.limit,
                stack.rstrip(),
            )
        self.overdue += len(late)
        return len(late)

    def run(self) -> None:
        while not self._stop_event.wait(self.interval):
            self.check()

    def stop(self) -> None:
        self._stop_event.set()
