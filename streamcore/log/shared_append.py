"""`append_shared`: one record appended so that other processes can append to the same log too,
for logs every process writes now and then (PubSub topics, work queues). The local log writes a
partition from one process at a time, its first append locking it until the manager closes
(`WriterLocks`); such an append takes the partition for itself only, waiting while another
process holds it, and releases it after. On other backends it is one plain append."""

from __future__ import annotations

import threading
import time
from typing import Any

from streamcore.errors import LogLockedError
from streamcore.log.api import LogAppender, LogManager
from streamcore.log.capabilities import writer_locks_of
from streamcore.log.values import LogOffset
from streamcore.names import Name

__all__ = ["append_shared"]

_PAUSE_FIRST, _PAUSE_MAX = 0.001, 0.05
# One shared append at a time in this process: a release closes the partition's writer, which a
# second thread's append could be using.
_LOCK = threading.Lock()


def append_shared(
    manager: LogManager,
    appender: LogAppender[Any],
    name: str | Name,
    key: str,
    message: Any,
    timeout: float = 10.0,
) -> LogOffset:
    """Append `message` under `key` with `appender` (of log `name` in `manager`); on a log with
    writer locks, wait up to `timeout` for the partition, then raise `LogLockedError` naming
    the log, and release it after the append."""
    locks = writer_locks_of(manager, name)
    if locks is None:
        return appender.append(key, message)
    deadline = time.monotonic() + timeout
    pause = _PAUSE_FIRST
    while True:
        try:
            with _LOCK:
                offset = appender.append(key, message)
                locks.release_writer(name, offset.partition.partition)
            return offset
        except LogLockedError:
            if time.monotonic() > deadline:
                raise LogLockedError(
                    f"log {Name.of(name)} stayed locked by another appending process for "
                    f"{timeout:g} s; is a process holding it without appending (an appender of "
                    "its own that never releases)?"
                ) from None
            time.sleep(pause)
            pause = min(_PAUSE_MAX, pause * 2)
