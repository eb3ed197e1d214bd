"""`SystemHooks`: what the outbox calls when its own machinery fails and recovers (yoltq's
`on-system-error` / `on-system-recovery`), as opposed to a job's consumer failing, which the job's
retries handle.

A *system error* is a failure of the outbox itself, nearly always its database out of reach: a
worker's claim, the recording of outcomes, or the retry poller's round. Each one calls
`on_system_error(where, error)`; the first success after one or more of them calls
`on_system_recovery(where, seconds_down)` once. The defaults log (ERROR with the traceback, and a
WARNING on recovery with the outage's length); a callable given to `Outbox` replaces the default
(log from it if the line matters to you). Hooks run on the failing thread and must return fast;
one that raises is logged and ignored.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

__all__ = ["SystemErrorHook", "SystemHooks", "SystemRecoveryHook"]

logger = logging.getLogger(__name__)

SystemErrorHook = Callable[[str, BaseException], None]
SystemRecoveryHook = Callable[[str, float], None]


def _log_error(where: str, error: BaseException) -> None:
    logger.error("outbox: %s failed; retrying", where, exc_info=error)


def _log_recovery(where: str, seconds_down: float) -> None:
    logger.warning("outbox: %s works again after %.1f s of system errors", where, seconds_down)


class SystemHooks:
    """The outbox's hooks and the outage they track (one per `Outbox`, shared by its threads)."""

    def __init__(
        self,
        on_system_error: SystemErrorHook | None = None,
        on_system_recovery: SystemRecoveryHook | None = None,
    ) -> None:
        self.on_system_error = on_system_error or _log_error
        self.on_system_recovery = on_system_recovery or _log_recovery
        self.down_since: float | None = None  # monotonic time of the outage's first error
        self.errors = 0  # system errors so far
        self._lock = threading.Lock()

    def failed(self, where: str, error: BaseException) -> None:
        with self._lock:
            self.errors += 1
            if self.down_since is None:
                self.down_since = time.monotonic()
        self._call(self.on_system_error, where, error)

    def succeeded(self, where: str) -> None:
        if self.down_since is None:  # the common case: no lock
            return
        with self._lock:
            since, self.down_since = self.down_since, None
        if since is not None:
            self._call(self.on_system_recovery, where, time.monotonic() - since)

    @staticmethod
    def _call(hook: Callable[..., None], *args: object) -> None:
        try:
            hook(*args)
        except Exception:
            logger.exception("outbox: a system hook raised; ignored")
