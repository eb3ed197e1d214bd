"""`collector_paused()`: Python's cyclic garbage collector paused around a burst of objects that
live until the burst ends (a read batch, a processing step).

A collection in the middle of such a burst frees none of it but promotes it to an older
generation, and what reaches the oldest brings the next full collection (a walk of the whole
heap) closer. Reference counting still frees what is dropped at once; only cycles wait. The
collector counts the objects made and not freed while paused, so at the end the young collection
they call for runs then: the code around the burst may allocate nothing before the next pause,
and cycles would pile up. The oldest generation is left to the collector. Nested pauses are free:
only the outermost, which found the collector on, turns it back on.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["collector_paused"]


@contextmanager
def collector_paused() -> Iterator[None]:
    paused = gc.isenabled()
    if paused:
        gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()
            count0, count1, _count2 = gc.get_count()
            threshold0, threshold1, _threshold2 = gc.get_threshold()
            if threshold0 and count0 > threshold0:
                gc.collect(1 if count1 >= threshold1 else 0)
