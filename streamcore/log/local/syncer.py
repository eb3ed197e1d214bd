"""`BatchSyncer`: the timer behind `fsync=batch`.

Appends in `batch` mode fsync only when a second has passed since the last fsync, so a burst
followed by silence would stay in the page cache indefinitely. One daemon thread per manager
fsyncs, every `BATCH_FSYNC_INTERVAL` seconds, each of its writers that acknowledged appends since
its last fsync: an append is on disk within about a second whether or not more appends follow.
The thread runs only while the manager has live `batch` writers, and `stop()` ends it.
"""

from __future__ import annotations

import logging
import threading
import weakref

from streamcore.log.local.writer import BATCH_FSYNC_INTERVAL, PartitionWriter

__all__ = ["BatchSyncer"]

logger = logging.getLogger(__name__)


class BatchSyncer:
    """The daemon thread that fsyncs a manager's `batch` writers every `interval` seconds."""

    def __init__(self, interval: float = BATCH_FSYNC_INTERVAL) -> None:
        self.interval = interval
        self._writers: weakref.WeakSet[PartitionWriter] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()

    def add(self, writer: PartitionWriter) -> None:
        """Keep `writer` synced until it is closed."""
        with self._lock:
            if self._stopping.is_set():
                return
            self._writers.add(writer)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="streamcore-log-fsync", daemon=True
                )
                self._thread.start()

    def _run(self) -> None:
        while not self._stopping.wait(self.interval):
            with self._lock:
                for writer in [w for w in self._writers if w.closed]:
                    self._writers.discard(writer)
                writers = list(self._writers)
                if not writers:
                    self._thread = None  # the next add() starts another
                    return
            for writer in writers:
                try:
                    writer.sync_pending()
                except OSError as exc:
                    logger.error(
                        "%s: fsync failed (%s): appends after offset %d may not survive a power "
                        "loss; check the disk (dmesg)",
                        writer.label,
                        exc,
                        writer.synced_offset,
                    )

    def stop(self) -> None:
        """Stop the timer (for good) and wait for its last round."""
        with self._lock:
            self._stopping.set()
            thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()
