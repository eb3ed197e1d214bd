"""`StoreLock`: one owner at a time for a persistent store's directory, across processes.

A task's store on disk belongs to the one processor that runs the task. When a rebalance moves the
task, the new owner may start before the old one has closed its stores (or while a crashed one
is being restarted), so opening waits, for a bounded time, for the lock to be free, then fails
with `StoreLockedError` naming the directory and the holder's pid: never a wait without end (the
peers' "store lock held forever by the previous owner"), never a raw error of the engine's
library.

The lock is an exclusive `flock` on `<dir>/LOCK.streamcore`, so the kernel releases it when the
holder's process ends, however it ends (SIGKILL included): a stale lock cannot outlive its
process, and no pid check or lease is needed. The file holds the holder's pid, host and start
time, only for the error message of the process that waits.
"""

from __future__ import annotations

import datetime
import fcntl
import os
import socket
import time
from pathlib import Path
from types import TracebackType

from streamcore.errors import StoreLockedError

__all__ = ["LOCK_FILE", "StoreLock"]

LOCK_FILE = "LOCK.streamcore"


class StoreLock:
    """The exclusive lock of store directory `path` (created if missing), taken by the
    constructor: it waits up to `timeout` seconds, trying again every `poll` seconds, then raises
    `StoreLockedError`. `release()` (or leaving a `with` block) lets go; idempotent."""

    def __init__(self, path: Path, timeout: float = 30.0, poll: float = 0.1) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.file = self.path / LOCK_FILE
        fd = os.open(self.file, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            self._acquire(fd, timeout, poll)
            holder = f"{os.getpid()} {socket.gethostname()} {_now()}\n".encode()
            os.ftruncate(fd, 0)
            os.pwrite(fd, holder, 0)
        except BaseException:
            os.close(fd)
            raise
        self._fd: int | None = fd

    def _acquire(self, fd: int, timeout: float, poll: float) -> None:
        deadline = time.monotonic() + max(timeout, 0.0)
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise StoreLockedError(self.path, _holder(fd), timeout) from None
                time.sleep(min(max(poll, 0.001), left))

    @property
    def held(self) -> bool:
        """True until `release()`."""
        return self._fd is not None

    def release(self) -> None:
        """Let go of the lock (the file stays: removing it would race a waiter that opened it)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the only descriptor of the open file releases the flock

    def __enter__(self) -> StoreLock:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def __repr__(self) -> str:
        return f"StoreLock({str(self.path)!r}, held={self.held})"


def _holder(fd: int) -> str:
    """What the holder wrote: its pid, host and start time."""
    try:
        text = os.pread(fd, 256, 0).decode("utf-8", errors="replace").strip()
    except OSError:
        text = ""
    return text or "another process (that has not written its pid yet)"


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
