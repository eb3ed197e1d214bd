"""Records arriving on a stream for a consumer group: what starts a DAG run in records mode.

A DAG that runs on records (`[audit] runs_on = "records"`, `[importer] runs_on = "records"`) has
no clock: an event trigger in Airflow's triggerer (plugins/streamcore_triggers.py) calls
`Arrivals.poll` every `watch_interval`, and a DAG run starts when it reports something. `poll`
asks the log only for end offsets and committed positions (`LogManager.lag_per_partition`,
the same call on the local log and on Kafka), never reads a record, and reports once per new
end: after it reported ends E, it stays quiet until some partition's end passes both the
group's committed position and E, so a run that is still landing E starts no second run.

    arrivals = Arrivals("audit/entries", "audit/delta", manager)
    found = arrivals.poll()     # None, or {"stream", "group", "records", "ends", "committed"}

The switch and the interval are read per DAG section (`runs_on`, `watch_interval`), the
environment over the file (`STREAMCORE_AUDIT_RUNS_ON=records`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from streamcore.config import StreamcoreConfig, parse_duration_ms
from streamcore.errors import ConfigError
from streamcore.log.api import LogManager
from streamcore.names import Name

__all__ = ["RECORDS", "Arrivals", "RunsOn", "runs_on"]

RECORDS = "records"
DEFAULT_WATCH_INTERVAL = "2s"


@dataclass(frozen=True, slots=True)
class RunsOn:
    """What starts a DAG's runs: `mode` is its default (`schedule`, `manual`) or `records`;
    `watch_interval_s` is how often the trigger looks at the stream in records mode."""

    mode: str
    watch_interval_s: float

    @property
    def records(self) -> bool:
        return self.mode == RECORDS


def _setting(config: StreamcoreConfig, section: str, key: str, default: Any) -> Any:
    # As StreamcoreConfig reads its sections: STREAMCORE_<SECTION>_<KEY> over [section] key.
    env_name = f"STREAMCORE_{section}_{key}".upper()
    if os.environ.get(env_name, "").strip():
        return os.environ[env_name].strip()
    scope = config.table.get(section, {})
    if not isinstance(scope, dict):
        raise ConfigError(f"[{section}] in the config file must be a table, got {scope!r}")
    return scope.get(key, default)


def runs_on(config: StreamcoreConfig, section: str, default: str) -> RunsOn:
    """`[section] runs_on` (`default` or "records") and `[section] watch_interval` (a duration,
    default 2s) of a DAG, e.g. `runs_on(config, "audit", "schedule")`."""
    mode = str(_setting(config, section, "runs_on", default)).strip().lower()
    if mode not in (default, RECORDS):
        raise ConfigError(
            f"{section}.runs_on is {mode!r}; use {default!r} (the DAG's own schedule) or "
            f"{RECORDS!r} (a run starts when records arrive)"
        )
    interval = _setting(config, section, "watch_interval", DEFAULT_WATCH_INTERVAL)
    interval_ms = parse_duration_ms(interval, f"{section}.watch_interval")
    if interval_ms < 100:
        raise ConfigError(f"{section}.watch_interval is {interval!r}; give at least 100ms")
    return RunsOn(mode, interval_ms / 1000)


class Arrivals:
    """Watches `stream` for `group` on `manager` (see the module docstring); `polls` counts the
    calls of `poll`."""

    def __init__(self, stream: str | Name, group: str, manager: LogManager) -> None:
        self.stream, self.group, self.manager = Name.of(stream), group, manager
        self.polls = 0
        self._reported: dict[int, int] = {}

    def poll(self) -> dict[str, Any] | None:
        """What arrived past both the group's positions and the ends reported before, or None
        (also when the stream does not exist yet)."""
        self.polls += 1
        if not self.manager.exists(self.stream):
            return None
        lags = self.manager.lag_per_partition(self.stream, self.group)
        new = {}
        for p, lag in enumerate(lags):
            reported = self._reported.get(p, 0)
            # An end below what was reported: the log was deleted and created again.
            seen = max(lag.pos, reported if reported <= lag.end else 0)
            if lag.end > seen:
                new[p] = lag.end - seen
        if not new:
            return None
        self._reported = {p: lag.end for p, lag in enumerate(lags)}
        return {
            "stream": self.stream.urn,
            "group": self.group,
            "records": sum(new.values()),
            "ends": {str(p): lag.end for p, lag in enumerate(lags)},
            "committed": {str(p): lag.pos for p, lag in enumerate(lags)},
        }
