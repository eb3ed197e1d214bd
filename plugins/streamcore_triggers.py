"""The event trigger of the DAGs that run on records (docs/airflow.md, "Assets and event-driven
runs"): `StreamRecordsTrigger` waits in Airflow's triggerer, holding no worker slot, until a
stream's end offsets move past what a consumer group has committed, then fires; the asset
watcher it serves starts the DAG run that lands those records.

It lives in plugins/ because the triggerer imports a trigger by its class path, and the
plugins folder is on every Airflow process's `sys.path` (the DAG folder is not on the
triggerer's). The log is asked through `streamcore.arrivals` (end offsets and committed
positions, the same calls on the local log and on Kafka), in a thread: the log API blocks.

    Asset(..., watchers=[AssetWatcher("audit-records", StreamRecordsTrigger(
        stream="audit/entries", group="audit/delta", poll_interval=2.0))])
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

CLASSPATH = "streamcore_triggers.StreamRecordsTrigger"


class StreamRecordsTrigger(BaseEventTrigger):
    """Fires when `stream` holds records past `group`'s committed positions and past the ends
    it fired for before (`streamcore.arrivals.Arrivals`), polling every `poll_interval`
    seconds; `home` is the STREAMCORE_HOME whose configuration routes the stream (None: the
    triggerer's). The event's payload says what arrived: records, ends, committed positions."""

    def __init__(
        self, *, stream: str, group: str, poll_interval: float = 2.0, home: str | None = None
    ) -> None:
        super().__init__()
        self.stream, self.group, self.home = stream, group, home
        self.poll_interval = float(poll_interval)
        self.arrivals: Any = None  # the stream's `Arrivals` once run() has opened its log

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return CLASSPATH, {
            "stream": self.stream,
            "group": self.group,
            "poll_interval": self.poll_interval,
            "home": self.home,
        }

    def _open(self) -> Any:
        from streamcore.arrivals import Arrivals
        from streamcore.config import load_config
        from streamcore.log import open_log_manager

        config = load_config(home=self.home) if self.home else load_config()
        return Arrivals(self.stream, self.group, open_log_manager(config))

    async def run(self) -> AsyncIterator[TriggerEvent]:
        arrivals = self.arrivals = await asyncio.to_thread(self._open)
        self.log.info(
            "watching %s for group %s every %g s", self.stream, self.group, self.poll_interval
        )
        try:
            while True:
                try:
                    found = await asyncio.to_thread(arrivals.poll)
                except Exception as exc:  # a broker down, say: keep watching, say why
                    self.log.warning("poll %d of %s failed: %s", arrivals.polls, self.stream, exc)
                    found = None
                # One line per poll at debug level: how many the trigger made (tests count them).
                self.log.debug("poll %d of %s: %s", arrivals.polls, self.stream, found)
                if found is not None:
                    self.log.info("poll %d: %s", arrivals.polls, found)
                    yield TriggerEvent({**found, "polls": arrivals.polls})
                await asyncio.sleep(self.poll_interval)
        finally:
            await asyncio.to_thread(arrivals.manager.close)
