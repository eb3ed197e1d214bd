"""Checks of the values in `[log.configs.<name>]` tables, shared by the backends' option parsers
(`<backend>/backend.py`): each names the key and says what to write instead."""

from __future__ import annotations

from typing import Any

from streamcore.config import parse_duration_ms
from streamcore.errors import ConfigError

__all__ = ["duration_option", "int_option", "seconds_option", "str_option"]


def int_option(value: Any, key: str, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{key} must be an integer, got {value!r}")
    if value < low or (high is not None and value > high):
        bounds = f"{low}..{high}" if high is not None else f"at least {low}"
        raise ConfigError(f"{key} is {value}; use {bounds}")
    return value


def str_option(value: Any, key: str, *, empty: bool = False) -> str:
    if not isinstance(value, str) or (not empty and not value.strip()):
        raise ConfigError(f"{key} must be a non-empty string, got {value!r}")
    return value


def duration_option(value: Any, key: str) -> int:
    """Milliseconds of a duration such as "4d" or "12h" (or an int of ms)."""
    if isinstance(value, bool):
        raise ConfigError(f"{key} must be a duration such as '4d' or '12h', got {value!r}")
    return parse_duration_ms(value, key)


def seconds_option(value: Any, key: str) -> float:
    """Positive seconds, from a number of seconds or a duration such as "30s"."""
    if isinstance(value, bool):
        raise ConfigError(f"{key} must be seconds or a duration such as '30s', got {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        seconds = parse_duration_ms(value, key) / 1000
    if seconds <= 0:
        raise ConfigError(f"{key} is {value!r}; use a positive duration such as '30s'")
    return seconds
