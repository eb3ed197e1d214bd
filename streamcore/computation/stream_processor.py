"""`StreamProcessor`: runs a topology on a `LogManager` (any backend), one thread per concurrency
unit (Nuxeo's `StreamProcessor` / `ComputationPool`).

Each unit subscribes to its computation's input streams with the computation name as consumer
group, so the units of a computation (in this process and in others) share the partitions and
take over those of a unit that leaves. Streams missing at `start` are created with the settings'
partitions (a DSL `group_by`'s repartition stream, unless set, with its input's count; dead-letter
streams with one partition).

Stopping:
- `stop(timeout)`: every unit finishes its current batch (taking the checkpoint it asked for),
  destroys its computation and leaves its group. Records processed without a checkpoint request
  are not committed and are delivered again next time (at-least-once).
- `drain_and_stop(timeout)`: the micro-batch mode. Waits until the topology is **drained**, then
  stops. Drained means, at one observation: every running unit has been idle (read no record,
  appended nothing) for `Settings.drain_quiet` seconds, and every running computation's group has
  lag 0 on every input stream (it committed up to the end). Computations terminated by a failure
  are left out (their lag stays); the result is then False. Returns True when the topology
  drained before `timeout`. A computation must ask for checkpoints for its lag to reach 0.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from streamcore.codecs import get_codec
from streamcore.computation.exactly_once import (
    EXACTLY_ONCE,
    UnitTransactions,
    transactional_id,
    transactional_manager,
)
from streamcore.computation.health import HealthStatus, check_health
from streamcore.computation.pool import POOL, PoolMember, check_pool
from streamcore.computation.runner import ComputationRunner, InputStream, OutputStream
from streamcore.computation.settings import Settings
from streamcore.computation.standby import (
    StandbyTailer,
    StandbyTasks,
    location,
    standby_groups,
)
from streamcore.computation.stats import RUNNING, TERMINATED, SkipBudget, UnitStats
from streamcore.computation.task_stores import task_stores
from streamcore.computation.tasks import (
    check_copartitioned,
    created_partitions,
    planned_partitions,
)
from streamcore.computation.topology import Topology
from streamcore.errors import ComputationError
from streamcore.log import Latency, LogAppender, LogLag, LogManager
from streamcore.log.capabilities import StandbyGroups, Transactional
from streamcore.names import Name
from streamcore.state.changelog import changelog_name, ensure_changelog
from streamcore.state.restore import RestoreProgress, StateRestoreListener

__all__ = ["StreamProcessor"]

logger = logging.getLogger(__name__)

_READ_TIMEOUT = 0.025  # Nuxeo's: short, so timers and stop requests are served quickly
_POLL = 0.02


def _epoch_ms() -> int:
    return time.time_ns() // 1_000_000


class _Unit:
    __slots__ = ("inputs", "runner", "stop_event", "thread")

    def __init__(
        self, runner: ComputationRunner, inputs: list[str], stop_event: threading.Event
    ) -> None:
        self.runner = runner
        self.inputs = inputs
        self.stop_event = stop_event
        self.thread: threading.Thread | None = None


class StreamProcessor:
    """Runs `topology` with `settings` over `manager`. Use it as a context manager, or call
    `start()` then `stop()` / `drain_and_stop()`. `restore_listener` hears every restore of a
    state store (start, batches, end; docs/state.md, "Restore")."""

    def __init__(
        self,
        manager: LogManager,
        topology: Topology,
        settings: Settings | None = None,
        *,
        health_delay: float = 36 * 3600.0,
        restore_listener: StateRestoreListener | None = None,
    ) -> None:
        self.manager = manager
        self.restore_listener = restore_listener
        self.topology = topology
        self.settings = settings or Settings()
        self.health_delay = health_delay
        self._units: dict[str, list[_Unit]] = {}
        self._pools: dict[str, PoolMember] = {}  # computations under pool allocation
        self._appenders: dict[str, LogAppender[Any]] = {}
        self._codecs: dict[str, Any] = {}
        self._started = False
        self._lock = threading.Lock()
        self._registry: Any = None
        for name in topology.computation_names():
            Name.of(name)  # the group name; already checked by ComputationMetadata
        self.exactly_once = self.settings.processing_guarantee == EXACTLY_ONCE
        # Per computation, the manager of its checkpoints' transactions: refused here, naming
        # the log's guarantee, rather than at start.
        self._transactional: dict[str, Transactional] = {}
        for name in topology.computation_names():
            if self.settings.worker_allocation(name) == POOL:
                check_pool(topology, self.settings, name)  # refused here, naming the fix
        # Refused here, naming the backend, when its groups cannot prefer a warm copy.
        self._standby: dict[str, StandbyGroups] = {}
        if self.settings.standby_replicas:
            for name in topology.computation_names():
                if topology.stores(name) and topology.input_streams(name):
                    self._standby[name] = standby_groups(
                        manager, name, topology.input_streams(name)
                    )
        if self.exactly_once:
            for name in topology.computation_names():
                written = [*topology.output_mapping(name).values()]
                written += [changelog_name(name, spec.name) for spec in topology.stores(name)]
                dlq = self.settings.policy(name).dlq
                if dlq is not None:
                    written.append(dlq)
                self._transactional[name] = transactional_manager(
                    manager, name, topology.input_streams(name), written
                )

    # -- starting -------------------------------------------------------------------------------
    def _codec(self, stream: str) -> Any:
        codec = self._codecs.get(stream)
        if codec is None:
            codec = self._codecs[stream] = get_codec(self.settings.codec(stream))
        return codec

    def _appender(self, stream: str) -> LogAppender[Any]:
        appender = self._appenders.get(stream)
        if appender is None:
            appender = self._appenders[stream] = self.manager.appender(stream, self._codec(stream))
        return appender

    def _create_streams(self) -> None:
        created = created_partitions(self.topology, self.settings, self.manager.size)
        wanted = {s: created(s) for s in self.topology.streams()}
        for name in self.topology.computation_names():
            dlq = self.settings.policy(name).dlq
            if dlq is not None:
                wanted.setdefault(Name.of(dlq).urn, 1)
        for stream, partitions in wanted.items():
            if self.manager.exists(stream):
                size = self.manager.size(stream)
                if size != partitions:
                    logger.warning(
                        "stream %s has %d partitions, settings say %d; using %d",
                        stream,
                        size,
                        partitions,
                        size,
                    )
            else:
                self.manager.create(stream, partitions)
        for name in self.topology.computation_names():
            if self.topology.stores(name):
                tasks = max(self.manager.size(s) for s in self.topology.input_streams(name))
                for spec in self.topology.stores(name):
                    ensure_changelog(self.manager, changelog_name(name, spec.name), tasks)

    def _make_unit(self, name: str, index: int, budget: SkipBudget) -> _Unit:
        topology, settings = self.topology, self.settings
        policy = settings.policy(name)
        inputs = {
            urn: InputStream(urn, logical, self._codec(urn), settings.filter(urn))
            for logical, urn in topology.input_mapping(name).items()
        }
        transactions = None
        appender: Callable[[str], LogAppender[Any]] = self._appender
        if self.exactly_once:  # the unit appends through its checkpoints' transactions
            unit_tx = transactions = UnitTransactions(
                self._transactional[name],
                transactional_id(name, index, settings.instance_id),
                settings.transaction_timeout,
            )

            def appender(urn: str) -> LogAppender[Any]:
                return unit_tx.appender(urn, self._codec(urn))

        outputs = {
            logical: OutputStream(urn, appender(urn), settings.filter(urn))
            for logical, urn in topology.output_mapping(name).items()
        }
        dlq = None
        if policy.dlq is not None:
            urn = Name.of(policy.dlq).urn
            dlq = OutputStream(urn, appender(urn), None)
        stop_event = threading.Event()

        def sleep(seconds: float) -> bool:
            return not stop_event.wait(seconds)

        def keep_restoring() -> bool:
            """Whether a restore goes on: not when the unit stops, nor when the group has moved
            tasks (the unit then applies the move and restores what it still owns)."""
            tailer = runner.tailer
            return not stop_event.is_set() and not (tailer is not None and tailer.rebalance_pending)

        stores = None
        if topology.stores(name):
            stores = task_stores(
                name,
                topology,
                self.manager,
                settings,
                keep_going=keep_restoring,
                listener=self.restore_listener,
                changelog_appender=None if transactions is None else transactions.appender,
            )

        runner = ComputationRunner(
            topology.supplier(name)(),
            unit=index,
            policy=policy,
            inputs=inputs,
            outputs=outputs,
            dlq=dlq,
            clock_ms=_epoch_ms,
            sleep=sleep,
            skip_budget=budget,
            read_batch=settings.read_batch,
            checkpoint_retries=settings.checkpoint_retries,
            checkpoint_pause=settings.checkpoint_pause,
            checkpoint_interval=settings.checkpoint_interval,
            stores=stores,
            timestamp_extractor=settings.timestamp_extractor(name),
            max_task_idle_ms=settings.max_task_idle_ms,
            transactions=transactions,
        )
        return _Unit(runner, list(inputs), stop_event)

    def start(self) -> StreamProcessor:
        """Create missing streams and start every unit's thread. Returns self."""
        with self._lock:
            if self._started:
                raise ComputationError("this StreamProcessor was started already; make a new one")
            self._started = True
            # Before anything is created: a refused topology leaves no stream behind.
            check_copartitioned(
                self.topology, planned_partitions(self.manager, self.settings, self.topology)
            )
            self._create_streams()
            for name in self.topology.computation_names():
                budget = SkipBudget(self.settings.policy(name).skip_first_failures)
                self._units[name] = [
                    self._make_unit(name, i, budget) for i in range(self.settings.concurrency(name))
                ]
            for name, units in self._units.items():
                if self._pooled(name):
                    pool = self._pools[name] = self._make_pool(name, units)
                    for unit, thread in zip(units, pool.start(), strict=True):
                        unit.thread = thread
                    continue
                for unit in units:
                    unit.thread = threading.Thread(
                        target=self._run_unit,
                        args=(unit,),
                        name=f"streamcore-{name}-{unit.runner.unit}",
                        daemon=True,
                    )
                    unit.thread.start()
        logger.info(
            "stream processor started: %s",
            ", ".join(f"{n} x{len(u)}" for n, u in self._units.items()),
        )
        return self

    def _pooled(self, name: str) -> bool:
        """Whether `name` runs under pool allocation (a source, reading nothing, never does)."""
        pooled = self.settings.worker_allocation(name) == POOL
        return pooled and bool(self.topology.input_streams(name))

    def _make_pool(self, name: str, units: list[_Unit]) -> PoolMember:
        settings = self.settings
        tuning = getattr(self.manager, "tuning", None)  # [groups]: the local and memory logs'
        return PoolMember(
            self.manager,
            name,
            units[0].inputs,
            [u.runner for u in units],
            [u.stop_event for u in units],
            start=settings.start(name),
            read_batch=settings.read_batch,
            checkpoint_interval=settings.checkpoint_interval,
            checkpoint_retries=settings.checkpoint_retries,
            rebalance_wait=300.0 if tuning is None else tuning.rebalance_wait,
        )

    def _run_unit(self, unit: _Unit) -> None:
        runner = unit.runner
        try:
            tailer = None
            standby_tailer: StandbyTailer | None = None
            groups = self._standby.get(runner.name)
            if groups is not None and runner.stores is not None:
                tailer = standby_tailer = groups.subscribe_with_standby(
                    runner.name,
                    unit.inputs,
                    runner,
                    standby_replicas=self.settings.standby_replicas,
                    location=location(runner.stores),
                    start=self.settings.start(runner.name),
                )
            elif unit.inputs:
                tailer = self.manager.subscribe(
                    runner.name, unit.inputs, runner, None, start=self.settings.start(runner.name)
                )
            runner.open(tailer)
            if standby_tailer is not None and runner.stores is not None:
                runner.stores.standby = StandbyTasks(runner.stores, standby_tailer)
            while runner.running:
                timeout = _READ_TIMEOUT
                if runner.next_timer != float("inf"):
                    due_in = (runner.next_timer - runner.clock_ms()) / 1000.0
                    timeout = max(0.0, min(timeout, due_in))
                if runner.step(timeout) == 0 and tailer is None:
                    unit.stop_event.wait(timeout or _READ_TIMEOUT)
        except Exception as exc:
            runner.terminate(exc, "the unit crashed")
        finally:
            if runner.stats.state == TERMINATED:
                # The whole computation stops (before this unit's partitions move to them).
                for sibling in self._units.get(runner.name, ()):
                    if sibling is not unit:
                        sibling.runner.request_stop()
                        sibling.stop_event.set()
            try:
                runner.close()
            except Exception:
                logger.exception(
                    "closing unit %d of computation %s failed", runner.unit, runner.name
                )

    # -- stopping -------------------------------------------------------------------------------
    def _all_units(self) -> list[_Unit]:
        return [u for units in self._units.values() for u in units]

    def stop(self, timeout: float = 30.0) -> bool:
        """Stop every unit after its current batch; True if all ended within `timeout` s."""
        units = self._all_units()
        for unit in units:
            unit.runner.request_stop()
            unit.stop_event.set()
            try:
                unit.runner.computation.signal_stop()
            except Exception:
                logger.exception("signal_stop() of computation %s failed", unit.runner.name)
        deadline = time.monotonic() + timeout
        for unit in units:
            if unit.thread is not None:
                unit.thread.join(max(0.0, deadline - time.monotonic()))
        ended = not any(u.thread is not None and u.thread.is_alive() for u in units)
        if ended:
            for appender in self._appenders.values():
                appender.close()
            self._appenders.clear()
        else:
            logger.warning("stream processor: some units did not stop within %.1f s", timeout)
        return ended

    def is_drained(self, quiet: float | None = None) -> bool:
        """True when the topology is drained now (see the module doc); `quiet` defaults to
        `Settings.drain_quiet`."""
        quiet = self.settings.drain_quiet if quiet is None else quiet
        now = time.monotonic()
        for name, units in self._units.items():
            live = [u for u in units if u.runner.stats.state == RUNNING]
            if not live or any(u.runner.stats.state == TERMINATED for u in units):
                continue
            if any(now - u.runner.stats.last_activity < quiet for u in live):
                return False
            if self.topology.input_streams(name) and self.lag(name).lag > 0:
                return False
        return True

    def drain_and_stop(self, timeout: float = 60.0) -> bool:
        """Wait until every input is caught up (see the module doc), then stop. True if the
        topology drained within `timeout` s (and no computation terminated)."""
        deadline = time.monotonic() + timeout
        quiet = self.settings.drain_quiet
        drained = False
        while time.monotonic() < deadline:
            if self.is_drained(quiet):
                drained = True
                break
            time.sleep(min(_POLL * 5, max(0.0, deadline - time.monotonic())))
        if not drained:
            logger.warning("stream processor: not drained after %.1f s; stopping anyway", timeout)
        stopped = self.stop(max(1.0, deadline - time.monotonic()))
        return drained and stopped and not self.failed_computations()

    def wait_for_assignments(self, timeout: float = 30.0) -> bool:
        """True once every running unit has partitions to read (all of them, when a
        computation has more units than partitions: the extra ones stay idle), within
        `timeout` s. Units of other processes in the same group take their share too."""
        deadline = time.monotonic() + timeout
        while True:
            if self._assigned():
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(_POLL)

    def _assigned(self) -> bool:
        for name, units in self._units.items():
            inputs = self.topology.input_streams(name)
            if not inputs:
                continue
            partitions = sum(self.manager.size(s) for s in inputs)
            running = [u.runner for u in units if u.runner.running]
            pool = self._pools.get(name)
            if pool is not None:  # one member for all the workers
                tailer = pool.tailer
                if running and (tailer is None or tailer.closed or not tailer.assignments):
                    return False
                continue
            assigned = sum(
                1
                for r in running
                if r.tailer is not None and not r.tailer.closed and r.tailer.assignments
            )
            if assigned < min(len(running), partitions):
                return False
        return True

    def is_terminated(self) -> bool:
        """True once every unit has ended (stopped, drained, poison pill or failure)."""
        return self._started and not any(
            u.thread is not None and u.thread.is_alive() for u in self._all_units()
        )

    def failed_computations(self) -> list[str]:
        """Computations with a unit terminated by a failure."""
        return [
            name
            for name, units in self._units.items()
            if any(u.runner.stats.state == TERMINATED for u in units)
        ]

    # -- observing ------------------------------------------------------------------------------
    def unit_stats(self, computation: str | None = None) -> list[UnitStats]:
        names = [computation] if computation else list(self._units)
        return [u.runner.stats for n in names for u in self._units.get(n, ())]

    def restores(self) -> list[tuple[str, int, RestoreProgress]]:
        """(computation, task, progress) of the last restore of each store of every unit: a
        running one, or the one that brought the store up to date (docs/state.md, "Restore")."""
        return [
            (name, task, progress)
            for name, units in self._units.items()
            for unit in units
            if unit.runner.stores is not None
            for (task, _store), progress in list(unit.runner.stores.restores.items())
        ]

    def unit_threads(self) -> list[tuple[str, ComputationRunner, threading.Thread | None]]:
        """(computation, runner, thread) of every unit (the processor dump's view,
        `streamcore.computation.dump`)."""
        return [(n, u.runner, u.thread) for n, units in self._units.items() for u in units]

    def standbys(self) -> list[tuple[str, int, RestoreProgress, bool]]:
        """(computation, task, progress, warm) of the last pass of each store of every standby
        copy the units keep (docs/state.md, "Standby replicas")."""
        out = []
        for name, units in self._units.items():
            for unit in units:
                stores = unit.runner.stores
                standby = None if stores is None else stores.standby
                if standby is None:
                    continue
                warm = set(standby.warm)
                for (task, _store), progress in list(standby.progress.items()):
                    out.append((name, task, progress, task in warm))
        return out

    def low_watermark(self, computation: str | None = None) -> int:
        """The lowest watermark not yet committed by `computation` (or by any computation): every
        record with a lower watermark was processed. 0 when nothing was read."""
        names = [computation] if computation else list(self._units)
        values = [
            wm
            for n in names
            for u in self._units.get(n, ())
            if (wm := u.runner.low_watermark()) > 0
        ]
        return min(values, default=0)

    def lag(self, computation: str) -> LogLag:
        """The lag of `computation`'s group over all its input streams."""
        return LogLag.aggregate(
            self.manager.lag(s, computation) for s in self.topology.input_streams(computation)
        )

    def latency(self, computation: str) -> Latency:
        return Latency.aggregate(
            self.manager.latency(s, computation, self._codec(s))
            for s in self.topology.input_streams(computation)
        )

    def stream_lags(self) -> list[tuple[str, str, LogLag, Latency]]:
        """(computation, input stream, lag, latency) for every input of every computation."""
        out = []
        for name in self.topology.computation_names():
            for stream in self.topology.input_streams(name):
                if not self.manager.exists(stream):
                    continue
                lag = self.manager.lag(stream, name)
                latency = self.manager.latency(stream, name, self._codec(stream))
                out.append((name, stream, lag, latency))
        return out

    @property
    def metrics(self) -> Any:
        """A prometheus_client `CollectorRegistry` of this processor's metrics (see
        `streamcore.computation.metrics`); not the global registry."""
        if self._registry is None:
            from streamcore.computation.metrics import processor_registry

            self._registry = processor_registry(self)
        return self._registry

    def health(self, now: float | None = None) -> HealthStatus:
        return check_health(self, self.health_delay, now)

    def __enter__(self) -> StreamProcessor:
        if not self._started:
            self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
