"""`Phases`: wall-clock seconds per named step of a job, for its JSON summary and profiling."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["Phases"]

logger = logging.getLogger(__name__)


class Phases:
    """`with phases("merge"): ...` adds the block's duration to `seconds["merge"]`."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        started = time.monotonic()
        try:
            yield
        finally:
            spent = time.monotonic() - started
            self.seconds[name] = round(self.seconds.get(name, 0.0) + spent, 3)
            logger.info("phase %s: %.2f s", name, spent)
