"""The logging context of outbox jobs (yoltq's captured `*logging-context*`): fields such as a
request or trace id, set around the code that puts jobs, travel with each job and are set again
while its consumer runs, in whatever worker and process that is (docs/outbox.md, "Hooks").

    with logging_context(request_id="r-42"):
        put(conn, "mail", payload)          # the job carries {"request_id": "r-42"}
    # ... later, in a worker: current_log_context() == {"request_id": "r-42"} in the consumer

`LogContextFilter` adds the current context to log records as `record.log_context` (a dict) and
`record.log_context_text` (`k=v k=v`), for a format such as `%(message)s %(log_context_text)s`.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from types import MappingProxyType

__all__ = [
    "LogContextFilter",
    "current_log_context",
    "decode_context",
    "encode_context",
    "logging_context",
    "restored_context",
]

_EMPTY: Mapping[str, str] = MappingProxyType({})
_CONTEXT: ContextVar[Mapping[str, str]] = ContextVar("streamcore_log_context", default=_EMPTY)


def current_log_context() -> dict[str, str]:
    """The fields of the current logging context (a copy)."""
    return dict(_CONTEXT.get())


@contextlib.contextmanager
def logging_context(**fields: object) -> Iterator[dict[str, str]]:
    """Add `fields` (as strings) to the logging context inside the block."""
    merged = {**_CONTEXT.get(), **{k: str(v) for k, v in fields.items()}}
    token = _CONTEXT.set(merged)
    try:
        yield dict(merged)
    finally:
        _CONTEXT.reset(token)


def encode_context() -> str | None:
    """The current context as the job row stores it (None when empty: nothing to carry)."""
    fields = _CONTEXT.get()
    return json.dumps(fields, sort_keys=True, separators=(",", ":")) if fields else None


def decode_context(text: str | None) -> dict[str, str]:
    """A stored context back as fields; an unreadable one as none (a job must run anyway)."""
    if not text:
        return {}
    try:
        fields = json.loads(text)
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in fields.items()} if isinstance(fields, dict) else {}


@contextlib.contextmanager
def restored_context(text: str | None) -> Iterator[None]:
    """The block runs in the context a job was put with (the worker's own is set aside)."""
    token = _CONTEXT.set(decode_context(text))
    try:
        yield
    finally:
        _CONTEXT.reset(token)


class LogContextFilter(logging.Filter):
    """Adds the logging context to every record it sees (attach it to a handler)."""

    def filter(self, record: logging.LogRecord) -> bool:
        fields = _CONTEXT.get()
        record.log_context = dict(fields)
        record.log_context_text = " ".join(f"{k}={v}" for k, v in fields.items())
        return True
