"""`UnitStats`: the counters of one concurrency unit. The unit's thread updates plain ints (no
lock: one writer, and readers only need a recent value); the metrics collector reads them at
scrape time. `SkipBudget` is the shared `skip_first_failures` allowance of a computation."""

from __future__ import annotations

import bisect
import threading
import time

__all__ = ["BUCKETS", "SkipBudget", "UnitStats"]

# Seconds per record: the range between a trivial map (~1 us) and a slow remote call (10 s).
BUCKETS = (
    1e-6,
    5e-6,
    1e-5,
    5e-5,
    1e-4,
    5e-4,
    1e-3,
    5e-3,
    0.01,
    0.05,
    0.1,
    0.5,
    1.0,
    5.0,
    10.0,
)

RUNNING, STOPPED, TERMINATED = "running", "stopped", "terminated"


class UnitStats:
    """The counters and state of one concurrency unit, written by its thread and read by the
    metrics collector."""

    __slots__ = (
        "bucket_counts",
        "checkpoint_failures",
        "checkpoints",
        "computation",
        "dead_lettered",
        "failed",
        "failure",
        "failure_time",
        "last_activity",
        "late",
        "processed",
        "produced",
        "retried",
        "skipped",
        "state",
        "time_count",
        "time_sum",
        "timers",
        "unit",
    )

    def __init__(self, computation: str, unit: int) -> None:
        self.computation = computation
        self.unit = unit
        self.processed = 0  # records handed to the computation (whatever the outcome)
        self.failed = 0  # records or timers whose retries were exhausted
        self.retried = 0  # retry attempts
        self.skipped = 0
        self.dead_lettered = 0
        self.late = 0  # records a windowed aggregation sent to its late stream
        self.timers = 0
        self.produced = 0  # records appended to output and dead-letter streams
        self.checkpoints = 0
        self.checkpoint_failures = 0
        self.bucket_counts = [0] * (len(BUCKETS) + 1)
        self.time_sum = 0.0
        self.time_count = 0
        self.state = RUNNING
        self.failure: str | None = None
        self.failure_time: float | None = None  # epoch seconds of the termination
        self.last_activity = time.monotonic()

    def observe_batch(self, seconds: float, records: int) -> None:
        """Count `records` processed in `seconds` in the per-record time histogram (the batch's
        mean: timing each record would cost more than many computations do)."""
        self.bucket_counts[bisect.bisect_left(BUCKETS, seconds / records)] += records
        self.time_sum += seconds
        self.time_count += records


class SkipBudget:
    """How many more failed records `skip_first_failures` lets the computation skip."""

    def __init__(self, allowance: int) -> None:
        self._left = allowance
        self._lock = threading.Lock()

    def take(self) -> bool:
        with self._lock:
            if self._left <= 0:
                return False
            self._left -= 1
            return True
