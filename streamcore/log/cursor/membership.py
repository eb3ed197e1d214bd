"""Dynamic consumer groups for the cursor backends (local and memory): Nuclio's v3io model. This
module is the membership protocol (`GroupStore`, `GroupMember`); the tailer that reads what a
member is assigned is `streamcore.log.cursor.subscription.SubscribedTailer`.

Members of a group subscribed to a set of logs share the partitions of those logs through a small
**group state** with a version (a JSON file for the local log, see `local/groups.py`; a dict
for the memory log). Every change is a compare-and-swap on that version, retried with random
exponential backoff when another member changed the state first.

- **Membership.** A member (id `<host>-<pid>-<random>`) registers with a heartbeat timestamp that a
  daemon thread refreshes every `heartbeat_interval` (default 3 s). Any member removes members
  whose heartbeat is older than their `session_timeout` (default 10 s), which frees their
  partitions. The thread also watches the state (every `watch_interval`) so changes made
  by others are seen within a fraction of a second. It only touches the state: assignment changes
  are applied by the tailer's own thread, inside `read()`, between batches (or at once when this
  member lost partitions).
- **Max poll interval.** A heartbeat only proves the thread runs. A member whose tailer has not
  called `read()` for `max_poll_interval` (default 300 s, Kafka's `max.poll.interval.ms`) leaves
  the group, so the others take its partitions; its next `read()` drops them (`on_revoked`, no
  commit) and joins again.
- **Tasks.** The unit of assignment is a *task*: task p is partition p of every subscribed log
  (Kafka Streams' partition grouping), so a member reading several logs gets the same partition
  numbers of each, as a join or any co-partitioned computation needs. A member of a single log
  has one task per partition. The state still records an owner per partition; a claim takes every
  partition of a task in one swap, and a release gives them all up in one swap.
- **Fair share.** With T tasks and N members (in join order), the T mod N longest-standing
  members target ceil(T / N) tasks and the others floor(T / N), so targets add up to T and
  every member has work while N <= T. A member claims free tasks (every partition without an
  owner) up to its target; a member holding more than its target gives the extra ones up, those
  it does not read yet first, then the highest task numbers. Nothing else moves: when a member
  joins or leaves, every task stays with its owner unless the fair share needs it elsewhere
  (sticky, as Kafka's cooperative-sticky assignor). A task split between members (only while a
  member of a version that assigned single partitions is in the group) is given up by the
  members that do not own its first partition, so that one member can complete it.
- **Bounded handover.** A member gives tasks up between batches, on its tailer's thread. If its
  reads stay busy (a slow batch) for `rebalance_wait` (GroupTuning, default 300 s) while the
  group wants some of its tasks elsewhere, its heartbeat thread gives them up itself, without
  committing: the tailer drops them at its next read (as after an expiry), the rest of the busy
  batch's work on them is not committed, and their new owner processes those records again.
  Lower it for faster rebalances, at the price of those duplicates.
- **Handover.** A member that gives a task up stops reading its partitions, calls
  `listener.on_revoked`, commits the marked positions of those partitions (and nothing else
  implicitly: delivery stays at-least-once), and only then removes itself as their owner in the
  state. Another member claims a task only once none of its partitions has an owner, and reads
  them from their committed positions, after which `listener.on_assigned` runs. So no two live
  members read one partition at once, and a task's partitions move together. `close()` revokes
  everything the same way and deregisters.
- **Expiry.** A member that missed its session (killed, or paused) loses its partitions to the
  others without committing. If it comes back, it notices on its next heartbeat or read: it drops
  the lost partitions *without* committing them (after `on_revoked`, where a `commit()` no longer
  touches them), skips commits of partitions it no longer owns, and joins again as a new member.
  A member checks this at the start of every `read()`, so after a pause it returns no record of
  a partition it lost (a read already under way when the process froze may still finish).
  Timestamps are wall-clock seconds: members of one group must share a clock (one host).
- **Reset.** Every state belongs to a `generation` (random, written with the first version). A
  member that sees another generation (the state was deleted, or lost in a crash) treats every
  partition as lost and joins the new one. A new generation made where a state existed before
  lets nobody claim for one `session_timeout` (`claims_after`), the time live members of the old
  one need to notice and stop reading.
- **Standby replicas.** A member may ask for standby copies of the tasks (`standby_replicas`) and
  reports the tasks it holds warm (`warm`, set by its processor); where copies go and which free
  task waits for its warm copy: `streamcore.log.cursor.standby`. A member claims the free tasks it
  holds warm first, and leaves those another member holds warm to that member.
"""

from __future__ import annotations

import logging
import os
import random
import socket
import threading
import time
from collections.abc import Callable, Sequence, Set
from typing import Any, Protocol

from streamcore.errors import ConfigError, LogError
from streamcore.log.cursor.standby import reserved, standby_placement, warm_tasks
from streamcore.log.tuning import GroupTuning
from streamcore.log.values import LiveMember

__all__ = [
    "DEFAULT_HEARTBEAT_INTERVAL",
    "DEFAULT_MAX_POLL_INTERVAL",
    "DEFAULT_SESSION_TIMEOUT",
    "GroupMember",
    "GroupStore",
    "Task",
    "expired",
    "held_tasks",
    "live_members",
    "new_member_id",
    "owned_by",
    "surplus",
    "targets",
]

logger = logging.getLogger(__name__)

_TUNING = GroupTuning()  # the defaults of `[groups]`
DEFAULT_HEARTBEAT_INTERVAL = _TUNING.heartbeat_interval
DEFAULT_SESSION_TIMEOUT = _TUNING.session_timeout
DEFAULT_MAX_POLL_INTERVAL = _TUNING.max_poll_interval


class GroupStore(Protocol):
    """Versioned storage of one group state."""

    def load(self) -> dict[str, Any]:
        """The current state (a fresh copy the caller may change), with its `version`."""

    def swap(self, state: dict[str, Any], expected_version: int) -> bool:
        """Store `state` as `expected_version + 1` if the stored version is still
        `expected_version`; False otherwise."""

    def signature(self) -> Any:
        """A value that changes whenever the state changes (cheap)."""

    def existed(self) -> bool:
        """True if a state was stored before, so that an empty state now means it was deleted."""


def new_member_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{os.urandom(3).hex()}"


def targets(state: dict[str, Any], tasks: int) -> dict[str, int]:
    """How many tasks each member should hold: ceil(T/N) for the T mod N oldest members,
    floor(T/N) for the others."""
    members = sorted(state["members"].items(), key=lambda kv: (kv[1]["seq"], kv[0]))
    if not members:
        return {}
    base, extra = divmod(tasks, len(members))
    return {mid: base + (1 if i < extra else 0) for i, (mid, _) in enumerate(members)}


def expired(state: dict[str, Any], now: float, keep: str | None = None) -> list[str]:
    """Members whose last heartbeat is older than their session timeout (never `keep`)."""
    return [
        mid
        for mid, info in state["members"].items()
        if mid != keep and now - info["heartbeat"] > info["session_timeout"]
    ]


def live_members(state: dict[str, Any], now: float) -> list[LiveMember]:
    """The members of `state` that `expired` would keep, as `LogManager.group_members` reports
    them (the logs are those of the state: every member of it subscribed to all of them)."""
    gone = set(expired(state, now))
    logs = tuple(state.get("logs", ()))
    return [
        LiveMember(mid, info.get("host"), logs)
        for mid, info in state["members"].items()
        if mid not in gone
    ]


def owned_by(state: dict[str, Any], member: str) -> set[str]:
    return {key for key, owner in state["owners"].items() if owner == member}


Task = tuple[str, ...]  # the partition keys of one task, one per subscribed log that has it


def held_tasks(state: dict[str, Any], member: str, tasks: Sequence[Task]) -> list[Task]:
    """The tasks of which `member` owns at least one partition (all of them, unless a member
    of an older version split one), in task order."""
    owners = state["owners"]
    return [task for task in tasks if any(owners.get(key) == member for key in task)]


def surplus(
    state: dict[str, Any], member: str, tasks: Sequence[Task], target: int, read: Set[str]
) -> list[str]:
    """The partition keys `member` should give up, whole tasks only: tasks split with another
    member whose first partition it does not own, then tasks beyond `target`, those it does not
    read yet (`read`: the keys its tailer reads) first, then the highest task numbers."""
    owners = state["owners"]
    held = held_tasks(state, member, tasks)
    split = [
        task
        for task in held
        if owners.get(task[0]) != member and any(owners.get(k) not in (None, member) for k in task)
    ]
    kept = [task for task in held if task not in split]
    extra = len(kept) - target
    if extra > 0:
        order = sorted(
            range(len(kept)), key=lambda i: (any(k in read for k in kept[i]), -i)
        )  # unread first, then the last tasks
        split += [kept[i] for i in order[:extra]]
    return [key for task in split for key in task if owners.get(key) == member]


class GroupMember:
    """One member of a group: its registration, heartbeat thread and state changes. The tailer's
    thread calls `refresh`, `release`, `claim`, `leave` and sets `polled`; the heartbeat thread
    refreshes, watches and leaves after `max_poll_interval` without a poll, setting `due` when
    this member's assignment should change and `lost` when partitions it reads were taken away."""

    def __init__(
        self,
        store: GroupStore,
        partitions: Sequence[str],
        *,
        tasks: Sequence[Sequence[str]] | None = None,
        member_id: str | None = None,
        heartbeat_interval: float = DEFAULT_HEARTBEAT_INTERVAL,
        session_timeout: float = DEFAULT_SESSION_TIMEOUT,
        max_poll_interval: float = DEFAULT_MAX_POLL_INTERVAL,
        watch_interval: float | None = None,
        standby_replicas: int = 0,
        location: str | None = None,
        tuning: GroupTuning = _TUNING,
    ) -> None:
        if heartbeat_interval <= 0 or session_timeout <= heartbeat_interval:
            raise ConfigError(
                f"need 0 < heartbeat_interval < session_timeout, got {heartbeat_interval} and "
                f"{session_timeout}: make the session a few heartbeats long (e.g. 3 s and 10 s)"
            )
        if max_poll_interval <= 0:
            raise ConfigError(
                f"max_poll_interval must be positive, got {max_poll_interval}: give the longest "
                "time, in seconds, your code may take between two read() calls (default 300)"
            )
        self.store = store
        self.partitions = list(partitions)  # every partition key of the subscribed logs, in order
        # The units of assignment (see the module doc); one per partition unless told.
        self.tasks: list[Task] = (
            [tuple(task) for task in tasks] if tasks is not None else [(k,) for k in partitions]
        )
        if sorted(k for task in self.tasks for k in task) != sorted(self.partitions):
            raise ConfigError(
                f"the tasks {self.tasks} must hold every partition of {self.partitions} once"
            )
        self.id = member_id or new_member_id()
        if standby_replicas < 0:
            raise ConfigError(
                f"standby_replicas must be 0 or more, got {standby_replicas}: the number of warm "
                "copies kept of each task besides its owner's"
            )
        self.standby_replicas = standby_replicas
        self.location = location  # where this member's state lives (standby's module doc)
        self.tuning = tuning  # the rebalance timeout and backoff of `update`, rebalance_wait
        self._giving_since: float | None = None  # since when the group wants tasks of this one
        self.warm: frozenset[int] = frozenset()  # task indexes held warm (set by the processor)
        self.heartbeat_interval = heartbeat_interval
        self.session_timeout = session_timeout
        self.max_poll_interval = max_poll_interval
        self.watch_interval = (
            watch_interval if watch_interval is not None else min(0.1, heartbeat_interval / 2)
        )
        self.due = True  # the tailer should (re)compute its assignment at its next read
        self.lost = False  # the tailer reads partitions this member no longer owns
        self.evicted = False  # left the group after max_poll_interval without a poll
        self.polled = time.monotonic()  # last read() of the tailer
        self.local: frozenset[str] = frozenset()  # what the tailer reads now (set by the tailer)
        self.owned: frozenset[str] = frozenset()  # what the newest state seen says this owns
        self.generation: str | None = None  # of the newest state seen
        self._had_generation = False  # was a member of some generation (evidence of a reset)
        self._seen_version = -2
        self._claims_after = 0.0  # wall-clock time when a new generation allows claims
        self._lock = threading.Lock()
        self.last_ok = time.monotonic()  # start of the last successful write
        self.stale_after = (heartbeat_interval + session_timeout) / 2
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- state changes --------------------------------------------------------------------------
    def update(self, change: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        """Apply `change` (which edits the state in place and says whether it changed anything)
        by compare-and-swap, retrying with random exponential backoff; the resulting state.
        `change` may run more than once for one update: it must compute its edit from the state
        it is given."""
        tuning = self.tuning
        deadline = time.monotonic() + tuning.rebalance_timeout
        attempt = 0
        while True:
            state = self.store.load()
            version = state["version"]
            if not change(state):
                return state
            if state.get("generation") is None:
                self._new_generation(state)
            if self.store.swap(state, version):
                return state
            attempt += 1
            if time.monotonic() > deadline:
                raise LogError(
                    f"could not update the group state {self.store!r} in "
                    f"{tuning.rebalance_timeout:g} s (groups.rebalance_timeout) "
                    f"({attempt} conflicts); too many members changing it at once?"
                )
            pause = min(tuning.rebalance_backoff_max, tuning.rebalance_backoff * 2**attempt)
            time.sleep(random.uniform(0, pause))

    def _new_generation(self, state: dict[str, Any]) -> None:
        """Start a generation. If a state existed before (it was deleted, or this member was in
        another generation), live members of the old one may still read their partitions: no
        claims until they had a session to notice."""
        state["generation"] = os.urandom(8).hex()
        reset = self._had_generation or self.store.existed()
        state["claims_after"] = time.time() + (self.session_timeout if reset else 0.0)
        if reset:
            logger.warning(
                "group %s: its state %r was deleted or unreadable; starting a new generation "
                "(no partition is claimed for %.1f s while the members rejoin)",
                state["group"],
                self.store,
                self.session_timeout,
            )

    def _tidy(self, state: dict[str, Any], now: float) -> None:
        """Remove expired members (not this one) and owners that are no longer members;
        register this member or refresh its heartbeat (unless it left for not polling)."""
        members = state["members"]
        for mid in expired(state, now, keep=self.id):
            logger.warning(
                "group %s: member %s missed its session (%.1f s without heartbeat); its "
                "partitions are free again",
                state["group"],
                mid,
                now - members[mid]["heartbeat"],
            )
            del members[mid]
        if self.evicted:
            members.pop(self.id, None)
        elif self.id in members:
            members[self.id]["heartbeat"] = now
            if self.standby_replicas:
                members[self.id]["warm"] = sorted(self.warm)
        else:
            members[self.id] = {
                "seq": state["next_seq"],
                "heartbeat": now,
                "session_timeout": self.session_timeout,
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "location": self.location,
                "standby": self.standby_replicas,
                "warm": sorted(self.warm),
            }
            state["next_seq"] += 1
        state["owners"] = {k: m for k, m in state["owners"].items() if m in members}

    def _write(self, change: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        started = time.monotonic()
        state = self.update(change)
        self.observe(state)  # before the member looks fresh again: `lost` is set first
        self.last_ok = started
        return state

    def refresh(self) -> dict[str, Any]:
        """Heartbeat: register or refresh this member and expire dead ones."""

        def change(state: dict[str, Any]) -> bool:
            self._tidy(state, time.time())
            return True

        return self._write(change)

    def claim(self) -> dict[str, Any]:
        """Refresh, then take free partitions up to this member's target (none while a new
        generation waits for the members of the old one)."""

        def change(state: dict[str, Any]) -> bool:
            now = time.time()
            self._tidy(state, now)
            if self.id not in state["members"] or now < state.get("claims_after", 0.0):
                return True
            owners = state["owners"]
            held = held_tasks(state, self.id, self.tasks)
            for task in held:  # complete a task split with a member that let its part go
                for key in task:
                    owners.setdefault(key, self.id)
            want = self.target(state) - len(held)
            skip = reserved(state, self.id, self.tasks, targets(state, len(self.tasks)))
            warm = warm_tasks(state, self.id)
            order = sorted(range(len(self.tasks)), key=lambda i: i not in warm)  # warm first
            for index in order:
                task = self.tasks[index]
                if want <= 0:
                    break
                if index not in skip and not any(key in owners for key in task):
                    for key in task:
                        owners[key] = self.id
                    want -= 1
            return True

        return self._write(change)

    def release(self, keys: Sequence[str]) -> dict[str, Any]:
        """Give partitions up (the caller stopped reading them and committed): whole tasks, in
        one swap, so that another member claims them together."""

        def change(state: dict[str, Any]) -> bool:
            self._tidy(state, time.time())
            for key in keys:
                if state["owners"].get(key) == self.id:
                    del state["owners"][key]
            return True

        return self._write(change)

    def leave(self) -> None:
        """Deregister, freeing every partition this member owns."""

        def change(state: dict[str, Any]) -> bool:
            if self.id not in state["members"]:
                return False
            del state["members"][self.id]
            state["owners"] = {k: m for k, m in state["owners"].items() if m != self.id}
            return True

        self.update(change)
        self.owned = frozenset()

    def rejoin(self) -> None:
        """After leaving for not polling: take part in the group again (at the next write)."""
        self.evicted = False

    def _evict(self, idle: float) -> None:
        """Leave the group because the tailer has not polled for `idle` s: the others take the
        partitions, and the tailer drops them at its next read."""
        logger.warning(
            "%r: member %s did not call read() for %.1f s (max_poll_interval %.1f s); it "
            "leaves the group so that others take its partitions, and rejoins at its next "
            "read(). Read more often, or raise max_poll_interval above your longest processing",
            self.store,
            self.id,
            idle,
            self.max_poll_interval,
        )
        self.evicted = True
        self.leave()
        with self._lock:
            if self.local:
                self.lost = True
            self.due = True

    # -- what this member should do -------------------------------------------------------------
    def target(self, state: dict[str, Any]) -> int:
        """How many tasks this member should hold in `state`."""
        return targets(state, len(self.tasks)).get(self.id, 0)

    def standby_tasks(self, state: dict[str, Any]) -> list[int]:
        """Indexes of the tasks this member should keep a warm copy of in `state`: those placed
        on it, and the free ones it holds warm (until someone claims them)."""
        if self.id not in state["members"]:
            return []
        owners = state["owners"]
        placed = standby_placement(state, self.tasks).get(self.id, set())
        free = {i for i in self.warm if not any(k in owners for k in self.tasks[i])}
        return sorted(placed | free)

    def surplus(self, state: dict[str, Any]) -> list[str]:
        """The partition keys this member should give up in `state` (whole tasks)."""
        return surplus(state, self.id, self.tasks, self.target(state), self.local)

    def observe(self, state: dict[str, Any]) -> None:
        """Take note of a state: what this member owns in it, and whether the tailer should
        change its assignment (`due`) or drop partitions at once (`lost`)."""
        with self._lock:
            generation = state.get("generation")
            if generation != self.generation:
                # A state of another generation: a reset, or an older load racing a newer one.
                # The store's newest state decides.
                state = self.store.load()
                generation = state.get("generation")
                if self.generation is not None and generation != self.generation:
                    logger.warning(
                        "group %s: the group state was reset (deleted or unreadable); member %s "
                        "drops its partitions and rejoins",
                        state["group"],
                        self.id,
                    )
                self.generation = generation
                self._had_generation = self._had_generation or generation is not None
                self._seen_version = -2
            if state["version"] < self._seen_version:
                return  # an older state than one already seen
            self._seen_version = state["version"]
            owned = owned_by(state, self.id)
            self.owned = frozenset(owned)
            if self.local - owned:
                self.lost = True  # taken away: expired, left for not polling, or a reset
            if self.id not in state["members"] or owned != self.local:
                self.due = True
                return
            giving = bool(self.surplus(state))
            claims_after = state.get("claims_after", 0.0)
            if time.time() < claims_after:
                self._claims_after = claims_after  # the heartbeat thread sets `due` then
                self.due = giving
                return
            owners = state["owners"]
            held = held_tasks(state, self.id, self.tasks)
            skip = reserved(state, self.id, self.tasks, targets(state, len(self.tasks)))
            free = any(
                i not in skip and all(k not in owners for k in task)
                for i, task in enumerate(self.tasks)
            )
            incomplete = any(k not in owners for task in held for k in task)
            self.due = giving or incomplete or (len(held) < self.target(state) and free)

    def stale(self) -> bool:
        """True when the heartbeat has not been written for long enough that others may soon
        expire this member; the tailer then refreshes on its own thread before reading on."""
        return time.monotonic() - self.last_ok > self.stale_after

    def must_rebalance_now(self, now: float) -> bool:
        """True when the tailer must apply assignment changes before returning any record: it
        lost partitions, left the group, or was paused long enough to have been expired."""
        return self.lost or self.evicted or now - self.last_ok > self.stale_after

    def _bound_handover(self, state: dict[str, Any]) -> None:
        """Give up, for a tailer busy longer than `rebalance_wait`, the tasks the group wants
        elsewhere (see "Bounded handover" in the module doc)."""
        give = self.surplus(state) if self.id in state["members"] else []
        if not give:
            self._giving_since = None
            return
        now = time.monotonic()
        if self._giving_since is None:
            self._giving_since = now
            return
        waited = now - self._giving_since
        if waited < self.tuning.rebalance_wait:
            return
        logger.warning(
            "group %s: member %s has been busy %.1f s (groups.rebalance_wait %.1f s) while the "
            "group wants %s elsewhere; giving them up without committing their current batch "
            "(its records are processed again by their new owner)",
            state["group"],
            self.id,
            waited,
            self.tuning.rebalance_wait,
            ", ".join(give),
        )
        self._giving_since = None
        self.release(give)

    # -- heartbeat thread -----------------------------------------------------------------------
    def start(self) -> None:
        self.refresh()
        self._thread = threading.Thread(
            target=self._run, name=f"streamcore-heartbeat-{self.id}", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=max(1.0, 2 * self.watch_interval))

    def _run(self) -> None:
        last_beat = time.monotonic()
        signature = None
        while not self._stop.wait(self.watch_interval):
            try:
                if self.evicted:
                    continue  # out of the group until the tailer reads again
                now = time.monotonic()
                if now - self.polled > self.max_poll_interval:
                    self._evict(now - self.polled)
                    continue
                if self._claims_after and time.time() >= self._claims_after:
                    self._claims_after = 0.0
                    self.due = True
                if now - last_beat >= self.heartbeat_interval:
                    last_beat = now
                    self._bound_handover(self.refresh())
                    continue
                current = self.store.signature()
                if current == signature:
                    continue
                signature = current
                state = self.store.load()
                if expired(state, time.time(), keep=self.id):
                    last_beat = time.monotonic()
                    state = self.refresh()
                else:
                    self.observe(state)
                self._bound_handover(state)
            except Exception:  # keep beating: a transient I/O error must not end the membership
                logger.exception("heartbeat of group member %s failed; retrying", self.id)
