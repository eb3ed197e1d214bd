"""`ComputationPolicy`: what a computation does when processing a record fails.

A failed record is retried `max_retries` times, waiting `delay` seconds before the first retry and
doubling up to `max_delay` (the default, 20 retries from 1 s to 60 s, tolerates about 15 minutes
of trouble, like Nuxeo's); `max_retries` is at most `MAX_RETRIES` (10 000: about a week at 60 s,
Kafka's default retention) and 0 means no retry. When the retries are exhausted,
the first that applies of:

1. `dlq` is set: the record goes to that dead-letter stream with the failure metadata
   (`streamcore.computation.dlq`), and processing continues;
2. `continue_on_failure`: the record is skipped (counted, logged) and processing continues;
3. `skip_first_failures > 0` and fewer than that many records were skipped this way by the
   computation since its processor started: skipped (Nuxeo's recovery procedure for a poison
   record: set it to 1, restart, then remove it);
4. otherwise the computation's concurrency unit terminates without checkpointing the failed
   record, so nothing is lost; the other computations keep running.

After a dead-letter or a skip a checkpoint is taken (as Nuxeo does after a skip), so the failed
record is committed with everything processed before it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import ClassVar, Literal

from streamcore.errors import TopologyError
from streamcore.names import Name

__all__ = ["MAX_RETRIES", "ComputationPolicy", "Fallback"]

MAX_RETRIES = 10_000
# Doublings past this make any delay exceed any max_delay; capping keeps 2**n a small float.
_MAX_DOUBLINGS = 1000

Fallback = Literal["dead_letter", "skip", "skip_first", "terminate"]


@dataclass(frozen=True, slots=True)
class ComputationPolicy:
    """How a computation retries a failed record and what it does once the retries are exhausted
    (the module docstring has the rules); `NONE` retries nothing and terminates the unit."""

    max_retries: int = 20
    delay: float = 1.0
    max_delay: float = 60.0
    continue_on_failure: bool = False
    skip_first_failures: int = 0
    dlq: str | None = None
    batch_capacity: int = 1
    batch_threshold: float = 1.0
    NONE: ClassVar[ComputationPolicy]

    def __post_init__(self) -> None:
        problems = []
        retries = self.max_retries
        if type(retries) is not int or not 0 <= retries <= MAX_RETRIES:
            problems.append(
                f"max_retries must be an integer from 0 to {MAX_RETRIES}, got {retries!r} (set "
                "max_delay for longer waits, and a dlq or continue_on_failure to go on)"
            )
        if not (math.isfinite(self.delay) and math.isfinite(self.max_delay)):
            problems.append(
                f"delay and max_delay must be finite seconds, got delay={self.delay} "
                f"max_delay={self.max_delay}"
            )
        elif self.delay < 0 or self.max_delay < self.delay:
            problems.append(
                f"need 0 <= delay <= max_delay, got delay={self.delay} max_delay={self.max_delay}"
            )
        if self.skip_first_failures < 0:
            problems.append(f"skip_first_failures must be >= 0, got {self.skip_first_failures}")
        if self.batch_capacity < 1:
            problems.append(f"batch_capacity must be >= 1, got {self.batch_capacity}")
        if self.batch_threshold <= 0:
            problems.append(f"batch_threshold must be > 0 seconds, got {self.batch_threshold}")
        if self.dlq is not None:
            try:
                Name.of(self.dlq)
            except ValueError as exc:
                problems.append(f"dlq {self.dlq!r} is not a valid stream name ({exc})")
        if problems:
            raise TopologyError("invalid ComputationPolicy: " + "; ".join(problems))

    def retry_delay(self, attempt: int) -> float:
        """Seconds to wait before retry number `attempt` (1-based): delay doubling to max_delay."""
        doublings = min(max(attempt - 1, 0), _MAX_DOUBLINGS)
        return min(self.max_delay, self.delay * 2.0**doublings)

    @property
    def fallback(self) -> Fallback:
        """What happens to a record once its retries are exhausted (see the module doc)."""
        if self.dlq is not None:
            return "dead_letter"
        if self.continue_on_failure:
            return "skip"
        if self.skip_first_failures > 0:
            return "skip_first"
        return "terminate"

    def with_(self, **changes: object) -> ComputationPolicy:
        """A copy with some fields changed."""
        return replace(self, **changes)  # type: ignore[arg-type]


ComputationPolicy.NONE = ComputationPolicy(max_retries=0, delay=0.0, max_delay=0.0)
