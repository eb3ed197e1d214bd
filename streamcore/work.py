"""`WorkManager`: Nuxeo's Stream WorkManager on the log. Works (a handler name, an id, JSON
params) are scheduled into the log `work/<queue>` and run by a pool of workers per queue
(docs/work.md).

    works = WorkManager([WorkQueue("thumbnails", pool_size=4)])
    works.register("thumbnail", make_thumbnail)          # handler(params)
    works.schedule(manager, "thumbnails", Work("thumbnail", "doc-42", {"doc": "42"}))
    topology, settings = works.topology()                # `streamcore run module:factory`

- **Partitions = pool size x over-provisioning** (default 3; one partition for a pool of 1), as
  Nuxeo sizes its work logs: adding processes spreads a queue's partitions over more members,
  each running `pool_size` workers (the processor's concurrency).
- **A work id runs once.** A work is appended keyed by its id, so every schedule of one id lands
  in one partition, read by one task; the task's state store `done` (RocksDB, with its changelog:
  it survives restarts and moves to the next owner) records each id that completed, and a
  schedule of an id already done is skipped. A worker killed while running a work runs it again
  after the restart (at-least-once, as Nuxeo): handlers must tolerate a second run of the work
  they were in. Each work is checkpointed as it completes (the pool reads one work at a time),
  so a kill re-runs only the work it interrupted. The `done` store keeps every id ever
  completed.
- **Failures** follow the queue's `ComputationPolicy` (retries with backoff, then dead letter,
  skip or stop); a work whose handler name has no handler fails the same way.
- **Counts** (`stats`): `scheduled` (waiting: appended and not processed) and `completed`
  (processed, skipped duplicates included) are exact, from the log's offsets and the pool's
  committed positions; `running` is an estimate, at most the pool size.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from streamcore.codecs import get_codec
from streamcore.computation.policy import ComputationPolicy
from streamcore.computation.processor import Processor, ProcessorContext
from streamcore.computation.settings import Settings
from streamcore.computation.topology import Topology
from streamcore.errors import ComputationError, InvalidArgumentError
from streamcore.log import LogAppender, LogManager
from streamcore.log.shared_append import append_shared
from streamcore.names import Name
from streamcore.record import Record

__all__ = [
    "DEFAULT_OVERPROVISIONING",
    "NAMESPACE",
    "Work",
    "WorkHandlerMissingError",
    "WorkManager",
    "WorkQueue",
    "WorkStats",
]

DEFAULT_OVERPROVISIONING = 3
NAMESPACE = "work"
DONE = "done"

Handler = Callable[[Mapping[str, Any]], object]


@dataclass(frozen=True)
class Work:
    """One work: the `name` of its handler, its `id` (a second schedule of an id that completed
    is skipped) and its `params` (JSON)."""

    name: str
    id: str
    params: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.name or not self.id:
            raise InvalidArgumentError(
                f"a work needs a handler name and an id, got name={self.name!r} id={self.id!r}"
            )


@dataclass(frozen=True)
class WorkQueue:
    """A queue: its log `work/<name>`, its pool of workers and the policy of its failures."""

    name: str
    pool_size: int = 1
    overprovisioning: int = DEFAULT_OVERPROVISIONING
    policy: ComputationPolicy = field(default_factory=ComputationPolicy)

    def __post_init__(self) -> None:
        if self.pool_size < 1 or self.overprovisioning < 1:
            raise InvalidArgumentError(
                f"work queue {self.name!r}: pool_size and overprovisioning must be >= 1, got "
                f"{self.pool_size} and {self.overprovisioning}"
            )
        Name.of(f"{NAMESPACE}/{self.name}")  # a log name: refused here, naming it

    @property
    def stream(self) -> str:
        return f"{NAMESPACE}/{self.name}"

    @property
    def pool(self) -> str:
        """The processor (and consumer group) of the queue's workers."""
        return f"{NAMESPACE}/{self.name}-pool"

    @property
    def partitions(self) -> int:
        return 1 if self.pool_size == 1 else self.pool_size * self.overprovisioning


@dataclass(frozen=True)
class WorkStats:
    """A queue's counts (module doc, "Counts")."""

    queue: str
    scheduled: int  # waiting: appended, not processed yet (exact)
    running: int  # estimated: at most the pool size
    completed: int  # processed, duplicates skipped included (exact)
    pool_size: int

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


class WorkManager:
    """Queues of works, their handlers, and the topology that runs them (module doc)."""

    def __init__(self, queues: Sequence[WorkQueue]) -> None:
        self.queues = {q.name: q for q in queues}
        self.handlers: dict[str, Handler] = {}
        self._appenders: dict[tuple[int, str], LogAppender[Any]] = {}

    def queue(self, name: str) -> WorkQueue:
        found = self.queues.get(name)
        if found is None:
            raise InvalidArgumentError(
                f"no work queue {name!r}; the queues are {', '.join(sorted(self.queues)) or 'none'}"
            )
        return found

    def register(self, name: str, handler: Handler) -> None:
        """Run works named `name` with `handler(params)`."""
        self.handlers[name] = handler

    def schedule(self, manager: LogManager, queue: str, work: Work) -> None:
        """Append `work` to its queue's log (created with the queue's partitions if missing)."""
        spec = self.queue(queue)
        key = (id(manager), spec.stream)
        appender = self._appenders.get(key)
        if appender is None or appender.closed:
            manager.create(spec.stream, spec.partitions)
            appender = self._appenders[key] = manager.appender(spec.stream, get_codec("avro"))
        body = {
            "name": work.name,
            "id": work.id,
            "params": dict(work.params),
            "scheduled_ms": time.time_ns() // 1_000_000,
        }
        append_shared(
            manager, appender, spec.stream, work.id, Record(work.id, json.dumps(body).encode())
        )

    def stats(self, manager: LogManager) -> list[WorkStats]:
        out = []
        for spec in self.queues.values():
            if not manager.exists(spec.stream):
                out.append(WorkStats(spec.name, 0, 0, 0, spec.pool_size))
                continue
            ends = manager.end_offsets(spec.stream)
            starts = manager.start_offsets(spec.stream)
            committed = manager.committed(spec.stream, spec.pool)
            done = [c if c is not None else s for c, s in zip(committed, starts, strict=True)]
            waiting = sum(ends) - sum(done)
            out.append(
                WorkStats(
                    spec.name,
                    waiting,
                    min(waiting, spec.pool_size),
                    sum(done) - sum(starts),
                    spec.pool_size,
                )
            )
        return out

    def topology(self) -> tuple[Topology, Settings]:
        """One processor per queue (`work/<queue>-pool`), concurrency = pool size, with the
        state store of completed ids; for `StreamProcessor` or `streamcore run`."""
        builder = Topology.builder()
        # One work per read: each is checkpointed (its id in `done`, its position committed)
        # as it completes, so a kill re-runs only the work it interrupted.
        settings = Settings(read_batch=1)
        for spec in self.queues.values():
            builder.add_processor(
                spec.pool,
                _runner(self.handlers),
                inputs=[spec.stream],
                codec="json",
                stores=[DONE],
            )
            settings.set_partitions(spec.stream, spec.partitions)
            settings.set_concurrency(spec.pool, spec.pool_size)
            settings.set_policy(spec.pool, spec.policy)
        return builder.build(), settings


class WorkHandlerMissingError(ComputationError):
    """A work names a handler this process did not register: register it in the workers'
    process (`WorkManager.register`), or the queue's policy sends the work aside."""


def _runner(handlers: Mapping[str, Handler]) -> Callable[[], Processor]:
    class WorkRunner(Processor):
        def init(self, context: ProcessorContext) -> None:
            self.context = context

        def process(self, key: str, value: Any) -> None:
            done = self.context.get_state_store(DONE)
            if done.get(value["id"]) is not None:
                return  # this id completed already: a duplicate schedule
            handler = handlers.get(value["name"])
            if handler is None:
                raise WorkHandlerMissingError(
                    f"work {value['id']!r} names handler {value['name']!r}, which this process "
                    f"does not have (it has {', '.join(sorted(handlers)) or 'none'})"
                )
            handler(value.get("params", {}))
            done.put(value["id"], time.time_ns() // 1_000_000)

    return WorkRunner
