"""Queues and their consumers: what runs a job, and the options yoltq gives each queue.

A process that only puts jobs registers the queue with `define_queue` (codec, validation,
dependencies); a process that runs them registers a consumer with `register`. `put` refuses a
queue that is not registered: a job nobody can decode or run is a mistake to catch early.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from streamcore.codecs import Codec, JsonCodec, get_codec
from streamcore.outbox.errors import OutboxError, UnknownQueueError

__all__ = [
    "Consumer",
    "QueueSpec",
    "Registry",
    "default_registry",
    "define_queue",
    "register",
    "resolve_codec",
]


DEFAULT_MAX_RETRIES = 10_000
DEFAULT_ERROR_BACKOFF = 5.0
DEFAULT_HUNG_TIMEOUT = 30 * 60.0
DEFAULT_MAX_EXECUTE_TIME = 5 * 60.0

Consumer = Callable[[Any], Any]  # one payload, or a list of them for a batch consumer
DependsOn = Callable[[Any], "tuple[str, str] | None"]


@dataclass(frozen=True)
class QueueSpec:
    """One queue: its consumer and options.

    :param consumer: called with the decoded payload; returning means success, raising means
        the job goes to `error` and is retried after `error_backoff`.
    :param max_retries: tries before a job stays in `error`. Default - 10000; 0 = retry forever.
    :param valid_payload: predicate checked by `put`; a False result raises InvalidPayloadError.
    :param codec: how payloads are stored. Default - JSON; any streamcore codec (e.g.
        `get_codec("avro", schema)`).
    :param error_backoff: seconds between a failure and its retry. Default - 5.
    :param hung_timeout: seconds a job may run, from its own start, before it counts as hung (its
        worker died or froze, or it overran) and is retried, perhaps while it still runs (see
        `lease`). Default - 1800.
    :param max_execute_time: seconds after which the watcher logs the stack of the thread
        running a job. Default - 300.
    :param depends_on: payload -> `(queue, id)` of a job that must be `done` first, or None.
    :param ordered: run jobs strictly in put order, one batch at a time, a failure blocking the
        queue until it is retried (the relay uses it to keep the order per key). Default - False.
    :param batch_capacity: makes the consumer a batch consumer: it is called once with a list of
        up to this many decoded payloads (consecutive claimed jobs, in put order) and succeeds or
        fails for all of them; a failure puts every job of the batch in `error`, and a retry runs
        one job as a batch of one. Workers claim this many jobs at a time for the queue, whatever
        the outbox's `batch_size`. Default - None: the consumer takes one payload.
    :param batch_threshold: seconds a partial batch waits for more jobs: workers claim fewer than
        `batch_capacity` jobs only once the oldest of them was put this long ago (by the clock
        of the process that put it). Default - 0: take what is ready.
    :param allow_cas_failure: a consumer that raises `ConcurrentUpdateError` (or SQLAlchemy's
        `StaleDataError`, its ORM's version check) has done its job: another writer updated the
        row first, and a retry would only lose again (yoltq's `allow-cas-failure?`). Use it when
        the job's effect is "bring the row up to date" and any newer update is as good; not
        when the job carries a change of its own that must land. Default - False.
    """

    name: str
    consumer: Consumer | None = None
    max_retries: int = DEFAULT_MAX_RETRIES
    valid_payload: Callable[[Any], bool] | None = None
    codec: Codec[Any] = field(default_factory=JsonCodec)
    error_backoff: float = DEFAULT_ERROR_BACKOFF
    hung_timeout: float = DEFAULT_HUNG_TIMEOUT
    max_execute_time: float = DEFAULT_MAX_EXECUTE_TIME
    depends_on: DependsOn | None = None
    ordered: bool = False
    batch_capacity: int | None = None
    batch_threshold: float = 0.0
    allow_cas_failure: bool = False

    def __post_init__(self) -> None:
        if not self.name or len(self.name) > 200:
            raise OutboxError(f"queue name {self.name!r} must have 1..200 characters")
        if self.max_retries < 0:
            raise OutboxError(
                f"queue {self.name}: max_retries is {self.max_retries}; use 0 (forever) or more"
            )
        for option in ("error_backoff", "hung_timeout", "max_execute_time"):
            if getattr(self, option) <= 0:
                raise OutboxError(
                    f"queue {self.name}: {option} is {getattr(self, option)}; use seconds > 0"
                )
        if self.batch_capacity is not None and self.batch_capacity < 1:
            raise OutboxError(
                f"queue {self.name}: batch_capacity is {self.batch_capacity}; use 1 or more, or "
                "None for a consumer of one payload"
            )
        if self.batch_threshold < 0 or (self.batch_threshold and self.batch_capacity is None):
            raise OutboxError(
                f"queue {self.name}: batch_threshold is {self.batch_threshold}; use seconds >= 0, "
                "with a batch_capacity (a threshold only applies to batch consumers)"
            )

    def can_retry(self, tries: int) -> bool:
        return self.max_retries == 0 or tries < self.max_retries


def resolve_codec(codec: Codec[Any] | str | None, schema: Any = None) -> Codec[Any]:
    """A codec object from a codec, a codec name (with an Avro schema), or None (JSON)."""
    if codec is None or codec == "json":
        return JsonCodec()
    if isinstance(codec, str):
        return get_codec(codec, schema)
    return codec


class Registry:
    """Queue specs by name. Thread-safe; `default_registry` is the process-wide one."""

    def __init__(self) -> None:
        self._specs: dict[str, QueueSpec] = {}
        self._lock = threading.Lock()

    def register(
        self,
        queue: str,
        consumer: Consumer | None,
        *,
        codec: Codec[Any] | str | None = None,
        schema: Any = None,
        **options: Any,
    ) -> QueueSpec:
        """Register (or replace) the consumer and options of `queue`; see `QueueSpec`."""
        spec = QueueSpec(queue, consumer, codec=resolve_codec(codec, schema), **options)
        with self._lock:
            self._specs[queue] = spec
        return spec

    def define_queue(self, queue: str, **options: Any) -> QueueSpec:
        """Register a queue this process only puts to (no consumer here)."""
        return self.register(queue, None, **options)

    def get(self, queue: str) -> QueueSpec:
        spec = self._specs.get(queue)
        if spec is None:
            raise UnknownQueueError(
                f"queue {queue!r} is not registered; call streamcore.outbox.register({queue!r}, "
                "consumer, ...) (or define_queue in a process that only puts) first"
            )
        return spec

    def find(self, queue: str) -> QueueSpec | None:
        return self._specs.get(queue)

    def consumed(self) -> list[QueueSpec]:
        """Queues with a consumer in this process, by name."""
        return sorted((s for s in self._specs.values() if s.consumer), key=lambda s: s.name)


default_registry = Registry()
register = default_registry.register
define_queue = default_registry.define_queue
