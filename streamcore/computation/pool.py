"""Pool worker allocation (Nuclio's `workerAllocationMode: pool`): the `concurrency` workers of a
computation share the partitions of one group member, instead of each unit owning its own.

`Settings.set_worker_allocation(name, "pool")` (or `[processors.NAME] worker_allocation`,
`streamcore run --worker-allocation`) makes the process join the computation's group once: a
member thread reads the partitions the group gives it and hands each record to a `KeyQueue`;
any free worker takes the next record of any partition. So one hot partition keeps every worker
busy, where under static allocation (the default) only the unit owning it works.

The guarantees:

- **Per-key order.** Records of one key never run at the same time and run in their log order:
  a record whose key is in flight waits behind it while other keys go on (`KeyQueue`).
- **Contiguous commits.** The position committed for a partition is the end of the contiguous
  prefix of its records that are processed and whose outputs are appended (`PrefixTracker`): a
  slow or failed record holds its partition's commit back, and nothing after it is skipped. A
  crash re-delivers from the first unprocessed record: at-least-once, with duplicates of the
  records processed after it. As under static allocation, positions are committed when a
  processed record asked for a checkpoint (`ask_for_checkpoint`, a dead-letter or a skip).
- **Policies per record.** Each worker is a `ComputationRunner` without a tailer: retries,
  backoff, dead-letter, skip and continue-on-failure apply to each record as under static
  allocation; a record whose policy terminates stops every worker of the computation, and the
  commit stops before that record. A poison pill (or `ask_for_termination`) stops every worker
  too: they are one member; records read and not processed then stay uncommitted.
- **Bounded handover.** When the group takes partitions away (`on_revoked`), their records not
  started are dropped, the member waits up to `[groups] rebalance_wait` for their records in
  flight, commits their processed prefix and then gives them up.
- **Backlog bound.** The member stops reading while `backlog` records are read and not
  committable (waiting, in flight, or processed behind a slower record of their partition).

Pool allocation is for stateless computations at at-least-once: state stores (and so the DSL's
aggregations, windows and joins), stream-time timers (bound to a task) and
`processing_guarantee="exactly_once"` need one owner per partition, and are refused with a
`TopologyError` naming the fix (`check_pool`). Wall-clock timers run on the worker that set them.
Each worker has its own computation instance (from the topology's supplier), as static units do.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from streamcore.computation.exactly_once import AT_LEAST_ONCE
from streamcore.computation.stats import RUNNING
from streamcore.errors import TopologyError
from streamcore.log import LogManager, LogPartition, LogRecord, LogTailer, RebalanceListener

if TYPE_CHECKING:
    from streamcore.computation.runner import ComputationRunner
    from streamcore.computation.settings import Settings
    from streamcore.computation.topology import Topology

__all__ = [
    "POOL",
    "STATIC",
    "WORKER_ALLOCATIONS",
    "KeyQueue",
    "PoolMember",
    "PrefixTracker",
    "check_pool",
]

logger = logging.getLogger(__name__)

STATIC, POOL = "static", "pool"
WORKER_ALLOCATIONS = (STATIC, POOL)
_READ_TIMEOUT = 0.025  # as a static unit's: stop requests and revokes are served quickly
_RUN = 32  # records of one key a worker takes at once (their outputs are appended together)


def check_pool(topology: Topology, settings: Settings, name: str) -> None:
    """Refuse pool allocation for `name` when it needs one owner per partition."""
    why = None
    stores = topology.stores(name)
    if stores:
        why = f"it has state stores ({', '.join(s.name for s in stores)})"
    elif settings.processing_guarantee != AT_LEAST_ONCE:
        why = f'processing_guarantee is "{settings.processing_guarantee}"'
    elif settings.policy(name).batch_capacity > 1:
        why = f"its policy batches records (batch_capacity {settings.policy(name).batch_capacity})"
    if why is not None:
        raise TopologyError(refusal(name, why))


def refusal(name: str, why: str) -> str:
    return (
        f'computation {name!r}: worker_allocation "pool" is for stateless computations at '
        f'at-least-once, and {why}; use worker_allocation "static" (the default) for it '
        "(docs/operating.md, 'Pool worker allocation')"
    )


class _Slot:
    """One partition's records read and not committable yet, in log order."""

    __slots__ = ("committed", "done", "offsets", "position")

    def __init__(self) -> None:
        self.offsets: deque[int] = deque()
        self.done: set[int] = set()
        self.position = -1  # after the contiguous processed prefix (-1: nothing yet)
        self.committed = -1


class PrefixTracker:
    """Per partition, the position after the contiguous prefix of processed records: what a
    commit may cover. Thread-safe: the member adds, the workers mark done."""

    def __init__(self) -> None:
        self._slots: dict[LogPartition, _Slot] = {}
        self._lock = threading.Lock()

    @property
    def pending(self) -> int:
        """Records read and not in a prefix yet (waiting, running, or done behind one)."""
        with self._lock:
            return sum(len(slot.offsets) for slot in self._slots.values())

    def add(self, partition: LogPartition, offset: int) -> _Slot:
        """A record read (in log order); its slot, which `done` takes."""
        with self._lock:
            slot = self._slots.get(partition)
            if slot is None:
                slot = self._slots[partition] = _Slot()
            slot.offsets.append(offset)
            return slot

    def done(self, slot: _Slot, offset: int) -> None:
        """The record at `offset` is processed. A slot dropped meanwhile (its partition was
        revoked) is no longer committed: marking it changes nothing."""
        with self._lock:
            offsets = slot.offsets
            if not offsets or offsets[0] != offset:
                slot.done.add(offset)  # behind a record still running: not in the prefix yet
                return
            offsets.popleft()
            slot.position = offset + 1
            done = slot.done
            while offsets and offsets[0] in done:
                head = offsets.popleft()
                done.discard(head)
                slot.position = head + 1

    def positions(
        self, partitions: Iterable[LogPartition] | None = None
    ) -> dict[LogPartition, int]:
        """The prefix positions not committed yet (of `partitions`, default all)."""
        with self._lock:
            slots = self._slots
            wanted = slots if partitions is None else [p for p in partitions if p in slots]
            return {p: slots[p].position for p in wanted if slots[p].position > slots[p].committed}

    def committed(self, positions: dict[LogPartition, int]) -> None:
        with self._lock:
            for partition, position in positions.items():
                slot = self._slots.get(partition)
                if slot is not None and position > slot.committed:
                    slot.committed = position

    def drop(self, partitions: Iterable[LogPartition]) -> None:
        """Forget partitions given up: later `done` calls on their slots commit nothing."""
        with self._lock:
            for partition in partitions:
                self._slots.pop(partition, None)


class KeyQueue:
    """Records waiting for a worker, by key: a key is handed to one worker at a time, with its
    records in the order they came, so records of one key never run concurrently. Keys are
    served in the order they became ready. Thread-safe."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self._waiting: dict[str, deque[tuple[LogRecord[Any], _Slot]]] = {}
        self._ready: deque[str] = deque()  # keys with waiting records and none in flight
        self._busy: set[str] = set()
        self._running: dict[LogPartition, int] = {}  # records in flight per partition
        self.size = 0  # records waiting

    def put(self, items: Sequence[tuple[LogRecord[Any], _Slot]]) -> None:
        with self.cond:
            waiting, ready, busy = self._waiting, self._ready, self._busy
            for item in items:
                key = item[0].key
                queue = waiting.get(key)
                if queue is None:
                    waiting[key] = deque((item,))
                    if key not in busy:
                        ready.append(key)
                else:
                    queue.append(item)
            self.size += len(items)
            self.cond.notify_all()

    def take(self, timeout: float) -> tuple[str, list[tuple[LogRecord[Any], _Slot]]] | None:
        """The next ready key with up to `_RUN` of its records, now in flight; None after
        `timeout` seconds without one."""
        with self.cond:
            if not self._ready and not self.cond.wait_for(lambda: self._ready, timeout):
                return None
            key = self._ready.popleft()
            queue = self._waiting[key]
            run = [queue.popleft() for _ in range(min(_RUN, len(queue)))]
            if not queue:
                del self._waiting[key]
            self._busy.add(key)
            self.size -= len(run)
            running = self._running
            for rec, _ in run:
                running[rec.partition] = running.get(rec.partition, 0) + 1
            return key, run

    def finish(self, key: str, run: list[tuple[LogRecord[Any], _Slot]]) -> None:
        """The worker is done with `run` (processed or not): the key's next records may go."""
        with self.cond:
            self._busy.discard(key)
            if key in self._waiting:
                self._ready.append(key)
            running = self._running
            for rec, _ in run:
                running[rec.partition] -= 1
            self.cond.notify_all()

    def drop(self, partitions: set[LogPartition]) -> None:
        """Forget the waiting records of `partitions` (given up: their next owner reads them)."""
        with self.cond:
            for key in list(self._waiting):
                queue = self._waiting[key]
                kept = deque(item for item in queue if item[0].partition not in partitions)
                self.size -= len(queue) - len(kept)
                if kept:
                    self._waiting[key] = kept
                else:
                    del self._waiting[key]
            self._ready = deque(k for k in self._ready if k in self._waiting)

    def running(self, partitions: Iterable[LogPartition]) -> int:
        with self.cond:
            return sum(self._running.get(p, 0) for p in partitions)


class PoolMember(RebalanceListener):
    """One computation under pool allocation in this process: a member thread that reads the
    partitions the group gives it, and one worker thread per runner (see the module doc).
    `start` returns the worker threads; each ends only after the member committed and closed
    its tailer, so joining them joins the pool."""

    def __init__(
        self,
        manager: LogManager,
        name: str,
        inputs: list[str],
        runners: Sequence[ComputationRunner],
        stop_events: Sequence[threading.Event],
        *,
        start: str = "earliest",
        read_batch: int = 500,
        checkpoint_interval: float = 0.0,
        checkpoint_retries: int = 3,
        rebalance_wait: float = 300.0,
    ) -> None:
        self.manager = manager
        self.name = name
        self.inputs = inputs
        self.runners = list(runners)
        self._stop_events = list(stop_events)
        self._start = start
        self._read_batch = read_batch
        self._interval = checkpoint_interval
        self._retries = checkpoint_retries
        self.rebalance_wait = rebalance_wait
        self.backlog = 4 * read_batch
        self.tracker = PrefixTracker()
        self.queue = KeyQueue()
        self.tailer: LogTailer[Any] | None = None
        self.member_thread: threading.Thread | None = None
        self._asked = False  # a processed record asked for a checkpoint since the last commit
        self._active = len(self.runners)  # workers still processing
        self._closed = threading.Event()  # the member committed and closed its tailer
        self._commit_failures = 0

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> list[threading.Thread]:
        self.member_thread = threading.Thread(
            target=self._member, name=f"streamcore-{self.name}-member", daemon=True
        )
        self.member_thread.start()
        workers = [
            threading.Thread(
                target=self._work, args=(i,), name=f"streamcore-{self.name}-{i}", daemon=True
            )
            for i in range(len(self.runners))
        ]
        for thread in workers:
            thread.start()
        return workers

    def request_stop(self) -> None:
        """Every worker stops after its current records (thread-safe)."""
        for runner, event in zip(self.runners, self._stop_events, strict=True):
            runner.request_stop()
            event.set()
        with self.queue.cond:
            self.queue.cond.notify_all()

    def _live(self) -> bool:
        return any(runner.running for runner in self.runners)

    # -- the member -----------------------------------------------------------------------------
    def _member(self) -> None:
        tailer = None
        try:
            tailer = self.tailer = self.manager.subscribe(
                self.name, self.inputs, self, None, start=self._start
            )
            last_commit = time.monotonic()
            while self._live():
                idle = False
                if self.tracker.pending >= self.backlog:  # wait for the workers to catch up
                    with self.queue.cond:
                        self.queue.cond.wait(_READ_TIMEOUT)
                else:
                    batch = tailer.read_batch(self._read_batch, _READ_TIMEOUT)
                    if batch:
                        self._dispatch(tailer, batch)
                    idle = not batch
                now = time.monotonic()
                if self._asked and (idle or now - last_commit >= self._interval):
                    self._commit(tailer)
                    last_commit = now
        except Exception as exc:
            for runner in self.runners:
                if runner.running:
                    runner.terminate(exc, "the pool's member (its reader) crashed")
        finally:
            self.request_stop()
            with self.queue.cond:
                self.queue.cond.wait_for(lambda: self._active == 0)
            try:
                if tailer is not None:
                    if self._asked and not tailer.closed:
                        self._commit(tailer)
                    tailer.close()
            except Exception:
                logger.exception("closing the pool of computation %s failed", self.name)
            finally:
                self._closed.set()

    def _dispatch(self, tailer: LogTailer[Any], batch: list[LogRecord[Any]]) -> None:
        assigned = set(tailer.assignments)
        add = self.tracker.add
        self.queue.put(
            [(rec, add(rec.partition, rec.offset)) for rec in batch if rec.partition in assigned]
        )

    def _commit(
        self, tailer: LogTailer[Any], partitions: Iterable[LogPartition] | None = None
    ) -> None:
        """Commit the processed prefix of every partition (or of `partitions`); a commit that
        keeps failing (`checkpoint_retries` times in a row) stops the pool."""
        if partitions is None:
            self._asked = False  # before reading the prefixes: a later ask commits again
        positions = self.tracker.positions(partitions)
        assigned = set(tailer.assignments)
        try:
            for partition, offset in positions.items():
                if partition in assigned:
                    tailer.commit_offset(partition, offset)
        except Exception as exc:
            self._asked = True
            self._commit_failures += 1
            for runner in self.runners[:1]:
                runner.stats.checkpoint_failures += 1
            if self._commit_failures > self._retries:
                raise
            logger.warning(
                "computation %s: commit of the pool's positions failed (%s: %s); retrying",
                self.name,
                type(exc).__name__,
                exc,
            )
            return
        self._commit_failures = 0
        self.tracker.committed(positions)

    # -- rebalance ------------------------------------------------------------------------------
    def on_revoked(self, tailer: LogTailer[Any], partitions: list[LogPartition]) -> None:
        """Drop the waiting records of `partitions`, wait up to `rebalance_wait` for those in
        flight, commit their processed prefix, and let them go (Nuclio's
        `MaxWaitHandlerDuringRebalance`)."""
        revoked = set(partitions)
        queue = self.queue
        queue.drop(revoked)
        with queue.cond:
            finished = queue.cond.wait_for(
                lambda: not queue.running(revoked) or not self._live(), self.rebalance_wait
            )
        if not finished:
            logger.warning(
                "computation %s: records of %s still running after rebalance_wait (%.1f s); "
                "giving the partitions up without them (their new owner processes them again)",
                self.name,
                ", ".join(map(str, partitions)),
                self.rebalance_wait,
            )
        if self._asked:
            try:
                self._commit(tailer, revoked)
            except Exception:
                logger.exception("computation %s: revoked positions not committed", self.name)
        self.tracker.drop(revoked)

    # -- the workers ----------------------------------------------------------------------------
    def _work(self, index: int) -> None:
        runner = self.runners[index]
        queue, tracker = self.queue, self.tracker
        try:
            runner.open(None)
            while runner.running:
                if runner.next_timer <= runner.clock_ms():  # wall-clock timers run on the
                    runner.step(0.0)  # worker that set them
                timeout = _READ_TIMEOUT
                if runner.next_timer != math.inf:
                    due_in = (runner.next_timer - runner.clock_ms()) / 1000.0
                    timeout = max(0.0, min(timeout, due_in))
                item = queue.take(timeout)
                if item is None:
                    continue
                key, run = item
                try:
                    done, asked = runner.process_detached([rec for rec, _ in run])
                    if runner.stream_timers:
                        why = "it set a stream-time timer, which is bound to a task"
                        runner.terminate(TopologyError(refusal(self.name, why)), "refused")
                        done = 0
                    for rec, slot in run[:done]:
                        tracker.done(slot, rec.offset)
                    if asked:
                        self._asked = True
                finally:
                    queue.finish(key, run)
        except Exception as exc:
            runner.terminate(exc, "the worker crashed")
        finally:
            if runner.stats.state != RUNNING:  # failed, or a poison pill: every worker stops
                self.request_stop()
            with queue.cond:
                self._active -= 1
                queue.cond.notify_all()
            self._closed.wait()
            try:
                runner.close()
            except Exception:
                logger.exception("closing worker %d of computation %s failed", index, self.name)
