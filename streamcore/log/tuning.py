"""`GroupTuning`: the timings of the consumer groups and tailers of the local and memory logs, set
in the `[groups]` section of the configuration (each key overridable by STREAMCORE_GROUPS_<KEY>,
and by `streamcore run --group KEY=VALUE`). Kafka's groups take the same timings from their own
consumer properties (`session.timeout.ms`, ...); docs/operating.md has the table.

Values are durations: a string with a unit (`"3s"`, `"500ms"`, `"5m"`) or a number of seconds.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from streamcore.errors import ConfigError

__all__ = ["GroupTuning", "parse_group_tuning"]


@dataclass(frozen=True)
class GroupTuning:
    """`heartbeat_interval`, `session_timeout`, `max_poll_interval`: a member's liveness (as
    Kafka's settings of those names). `poll_interval_min` / `poll_interval_max`: how often a
    tailer waiting in `read(timeout)` looks for new records (starting at the minimum, doubling
    to the maximum while nothing comes). `rebalance_timeout`: how long a member retries a change
    of the group state that other members keep changing first, before failing;
    `rebalance_backoff` / `rebalance_backoff_max`: its random exponential backoff between
    tries. `rebalance_wait`: how long a member whose reads are busy (a slow batch) keeps
    partitions the group wants elsewhere before its heartbeat gives them up for it, uncommitted
    (Nuclio's `MaxWaitHandlerDuringRebalance`). Seconds."""

    heartbeat_interval: float = 3.0
    session_timeout: float = 10.0
    max_poll_interval: float = 300.0
    poll_interval_min: float = 0.001
    poll_interval_max: float = 0.005
    rebalance_timeout: float = 30.0
    rebalance_backoff: float = 0.002
    rebalance_backoff_max: float = 0.25
    rebalance_wait: float = 300.0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
                raise ConfigError(f"groups.{f.name} must be a duration > 0, got {value!r}")
        pairs = [
            ("heartbeat_interval", "session_timeout", "make the session a few heartbeats long"),
            ("poll_interval_min", "poll_interval_max", "the minimum is where polling starts"),
            ("rebalance_backoff", "rebalance_backoff_max", "the first pause is the smallest"),
        ]
        for low, high, why in pairs:
            if getattr(self, low) > getattr(self, high) or (
                low == "heartbeat_interval" and getattr(self, low) == getattr(self, high)
            ):
                raise ConfigError(
                    f"groups.{low} ({getattr(self, low)} s) must be below groups.{high} "
                    f"({getattr(self, high)} s): {why}"
                )


def _seconds(value: Any, key: str) -> float:
    if isinstance(value, bool):
        raise ConfigError(f"groups.{key} must be a duration, got {value!r}")
    if isinstance(value, int | float):
        return float(value)
    from streamcore.config import parse_duration_ms

    text = str(value).strip()
    try:
        return float(text)
    except ValueError:
        return parse_duration_ms(text, f"groups.{key}") / 1000.0


def parse_group_tuning(
    section: Mapping[str, Any], lookup: Callable[[str, Any], Any]
) -> GroupTuning:
    """The `[groups]` table `section` (unknown keys refused, naming the known ones), each key
    read through `lookup(key, default)` (the environment first)."""
    known = [f.name for f in fields(GroupTuning)]
    unknown = sorted(set(section) - set(known))
    if unknown:
        raise ConfigError(f"unknown key(s) {unknown} in [groups]; the keys are {', '.join(known)}")
    defaults = GroupTuning()
    values = {key: _seconds(lookup(key, getattr(defaults, key)), key) for key in known}
    return GroupTuning(**values)
