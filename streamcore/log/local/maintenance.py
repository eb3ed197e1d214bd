"""One maintenance operation (a retention purge or a key compaction) per local-log partition at
a time, across processes: both delete or replace sealed segment files, and a purge deleting a
segment that a compaction is about to rename over would bring it back.

The lock is a `flock` on `P-NN/.maintenance`, separate from the writer's `.lock`, so a
compaction runs while another process appends. It is never waited for: a busy partition is
skipped (the writer purges on its next roll, the retention job compacts on its next run).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

__all__ = ["maintenance_lock"]

LOCK_FILE = ".maintenance"


@contextlib.contextmanager
def maintenance_lock(folder: Path) -> Iterator[bool]:
    """Hold the partition's maintenance lock for the block; yields False (and holds nothing)
    if another purge or compaction has it."""
    try:
        fd = os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    except FileNotFoundError:  # the partition was deleted
        yield False
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)
