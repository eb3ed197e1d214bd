"""Late records of the DSL's stateful steps (windowed aggregations, windowed joins): never dropped
silently. A step forwards a late record's value wrapped as `Late`; `route_late` puts a branch
after the step that sends those, unwrapped, to the late stream and lets the others go on; the
step's `LateLog` counts each in `streamcore_computation_late_total` and logs at WARNING at most
every 10 s."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from streamcore.computation.processor import ProcessorContext

if TYPE_CHECKING:
    from collections.abc import Callable

    from streamcore.computation.computation import ComputationContext
    from streamcore.computation.dsl import Stream

__all__ = ["Late", "LateLog", "route_late"]

logger = logging.getLogger(__name__)

LOG_EVERY = 10.0  # s between two warnings about the late records of one step


@dataclass(frozen=True, slots=True)
class Late:
    """A late record's value on its way to the late stream (the branch `route_late` adds)."""

    value: Any


def _is_late(key: str, value: Any) -> bool:
    return type(value) is Late


def _on_time(key: str, value: Any) -> bool:
    return True


def _unwrap(value: Late) -> Any:
    return value.value


def route_late(step: Stream, late_stream: str) -> Stream:
    """After the DSL stream `step`: its `Late` values, unwrapped, to `late_stream`; the returned
    stream carries the others."""
    late_arm, on_time = step.branch(_is_late, _on_time)
    late_arm.map_values(_unwrap).to(late_stream)
    return on_time


class LateLog:
    """Sends a step's late records (`send`), counts them and warns about them, rate-limited."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.count = 0
        self._logged = 0
        self._logged_at = -LOG_EVERY

    def send(
        self,
        forward: Callable[[str, Any], None],
        context: ProcessorContext | ComputationContext,
        key: str,
        value: Any,
        why: str,
    ) -> None:
        """`forward` `value` as late (to the branch of `route_late`), count it in `context`,
        warn when the last warning is older than `LOG_EVERY`; `why` says what made it late."""
        forward(key, Late(value))
        context.count_late_record()
        self.count += 1
        clock = time.monotonic()
        if clock - self._logged_at >= LOG_EVERY:
            logger.warning(
                "%s: %d late record(s) sent to the late stream since the last warning, the last "
                "one %s",
                self.where,
                self.count - self._logged,
                why,
            )
            self._logged_at, self._logged = clock, self.count
