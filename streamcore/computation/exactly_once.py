"""Exactly-once checkpoints of a concurrency unit on Kafka (`Settings(processing_guarantee=
"exactly_once")`, Kafka Streams' `exactly_once_v2`; docs/delivery.md).

Each unit has one transactional producer (`streamcore.log.kafka.transaction`) and every
checkpoint of the unit is one transaction:

1. begin;
2. send the input positions the checkpoint commits (`send_offsets_to_transaction`, with the
   unit's consumer group metadata: KIP-447 fencing) instead of the tailer's commit; first, as
   the coordinator's answer tells a fenced producer or a zombie member before it appends;
3. append the buffered outputs (and dead letters) through the transaction's appenders;
4. append the stores' changes to their changelogs through them too;
5. commit;
6. then write the stores' changes and checkpoints to their engines.

Readers that read committed (the Kafka backend's default) see a checkpoint's outputs and
changelog records together with the group's new positions, or nothing of it. A failure before
the commit aborts the transaction and rewinds the unit to the group's committed positions (its
stores drop their buffered writes; the engines hold the last committed state, written only
after a commit), so the records are processed again and their outputs appended once more in
the next transaction. A failure while writing the engines after a commit closes the unit's
stores and restores them from their changelogs (the commit holds everything).

The transactional id is `<computation>/<instance>/<unit>`: stable for a process that restarts
with the same `instance_id` (the host name by default), so the restarted unit's producer
aborts the transaction its killed predecessor left open and fences it at once; two processes
that run the same topology need different instance ids. A member that lost its partitions to
another (a zombie: paused past its session, or cut off) is fenced by the group metadata sent
with the offsets: its transaction aborts and nothing of it becomes visible. A unit whose
producer was fenced by its id (`ProducerFencedError`: another process opened the same id)
commits nothing more: it stops with an error that names the fix.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from streamcore.computation.stats import STOPPED
from streamcore.errors import (
    CheckpointError,
    LogClosedError,
    ProducerFencedError,
    TransactionAbortedError,
    TransactionTimeoutError,
    UnsupportedOperationError,
)
from streamcore.log.api import LogAppender
from streamcore.log.capabilities import GroupRouting, Transactional, transactions_of
from streamcore.log.values import LogOffset
from streamcore.names import Name

if TYPE_CHECKING:
    from streamcore.codecs import Codec
    from streamcore.computation.runner import ComputationRunner
    from streamcore.log.api import LogManager

__all__ = [
    "AT_LEAST_ONCE",
    "EXACTLY_ONCE",
    "GUARANTEES",
    "UnitTransactionAppender",
    "UnitTransactions",
    "transactional_id",
    "transactional_manager",
]

logger = logging.getLogger(__name__)

AT_LEAST_ONCE = "at_least_once"
EXACTLY_ONCE = "exactly_once"
GUARANTEES = (AT_LEAST_ONCE, EXACTLY_ONCE)


def transactional_manager(
    manager: LogManager, group: str, inputs: Iterable[str], logs: Iterable[str]
) -> Transactional:
    """The manager whose transactions hold a computation's checkpoints: `manager`, or, when it
    routes logs to backends, the one backend that holds the group's `inputs` (its coordinator
    takes the offsets) and every log it writes (`logs`: outputs, dead letters, changelogs).
    `UnsupportedOperationError` (`transactions_of`'s, naming the guarantee) when that backend
    has no transactions or the logs are on several backends."""
    if not isinstance(manager, GroupRouting):
        return transactions_of(manager)
    found = {name: manager.backend_for(name, group) for name in inputs}
    found.update((name, manager.backend_for(name)) for name in logs)
    backends = {id(backend): backend for backend in found.values()}
    if len(backends) > 1:
        where = "; ".join(f"{name} -> {type(b).__name__}" for name, b in found.items())
        raise UnsupportedOperationError(
            f"computation {group!r}: exactly_once needs its inputs, outputs, dead letters and "
            f"changelogs in one Kafka cluster (one transaction), but they are routed to "
            f"several backends: {where}. Route them to one Kafka config, or use "
            "processing_guarantee='at_least_once'"
        )
    (backend,) = backends.values()
    return transactions_of(backend)


def transactional_id(computation: str, unit: int, instance_id: str | None = None) -> str:
    """`<computation urn>/<instance>/<unit>`; the instance is the host name when not given."""
    instance = instance_id or socket.gethostname()
    return f"{Name.of(computation).urn}/{instance}/{unit}"


class UnitTransactions:
    """The transactional producer of one unit and the checkpoint sequence of the module doc.
    Appenders made by `appender` follow the producer when it is replaced after a
    `TransactionTimeoutError`. Used by the unit's thread only."""

    def __init__(
        self,
        manager: Transactional,
        transactional_id: str,
        transaction_timeout: float | None = None,
    ) -> None:
        self._manager = manager
        self.transactional_id = transactional_id
        self._timeout = transaction_timeout  # None: the manager's (librdkafka's 60 s)
        self.tx: Any = self._open()
        self._appenders: dict[tuple[str, int], Any] = {}  # of the current producer
        self.failures = 0  # failed checkpoints in a row

    def __repr__(self) -> str:
        return f"UnitTransactions({self.transactional_id!r})"

    def _open(self) -> Any:
        return self._manager.transactions(self.transactional_id, transaction_timeout=self._timeout)

    def appender(self, name: str, codec: Codec[Any] | None = None) -> UnitTransactionAppender:
        """An appender of log `name` whose appends go into the checkpoint's transaction."""
        return UnitTransactionAppender(self, Name.of(name), codec)

    def _current(self, name: Name, codec: Codec[Any] | None) -> Any:
        key = (name.urn, id(codec))
        found = self._appenders.get(key)
        if found is None:
            found = self._appenders[key] = self.tx.appender(name, codec)
        return found

    def reopen(self) -> None:
        """A new producer of the same id (after the broker aborted a transaction that outlived
        its timeout and fenced the old one)."""
        self._close_tx()
        self.tx = self._open()

    def _close_tx(self) -> None:
        self._appenders.clear()
        try:
            self.tx.close()
        except Exception:
            logger.exception("%s: closing the transactional producer failed", self)

    def close(self) -> None:
        self._close_tx()

    # -- a checkpoint ---------------------------------------------------------------------------
    def checkpoint(
        self,
        runner: ComputationRunner,
        low_watermark: int,
        positions: dict[Any, int] | None,
        journal_tail: list[Any] | None,
    ) -> None:
        """One checkpoint of `runner` in one transaction (see the module doc); raises what
        failed before the commit (the transaction is then aborted; `failed` says what next)."""
        tailer = runner.tailer
        stores = runner.stores
        tx = self.tx
        tx.begin()
        try:
            flushes: list[Any] = []
            commit: Mapping[Any, int] = {}
            if tailer is not None:
                # Sent first (the order inside a transaction does not matter): the coordinator
                # answers at once, so a fenced producer or a member the group moved on from
                # learns it here, before it appends anything.
                commit = runner._commit_positions(tailer, positions)
                tx.send_offsets(tailer, commit)
            runner._append_outputs(low_watermark)
            if stores is not None and tailer is not None:
                flushes = stores.append_changes(commit, journal_tail)
            tx.commit()
        except BaseException as failure:
            if tx.open:
                try:
                    tx.abort()
                except (ProducerFencedError, TransactionTimeoutError) as fatal:
                    # What the failure was, if it did not say (an append or send that failed
                    # otherwise, e.g. for want of a broker answer): the abort says.
                    raise fatal from failure
                except Exception:
                    logger.exception("%s: abort after a failed checkpoint failed", self)
            raise
        self.failures = 0
        if stores is not None and flushes:
            try:
                stores.flush(flushes)
            except Exception:
                # Committed: the changelogs hold the changes. Reopen the stores from them.
                logger.exception(
                    "computation %s unit %d: writing the stores after a committed transaction "
                    "failed; restoring them from their changelogs",
                    runner.name,
                    runner.unit,
                )
                stores.revoke(list(stores.tasks))
                runner._rewind = True

    def failed(self, runner: ComputationRunner, failure: Exception) -> bool:
        """After a checkpoint that raised (its transaction aborted): a fenced unit stops; else
        the unit rewinds to its committed positions and processes the records again, until
        `checkpoint_retries` checkpoints in a row failed. Always False (nothing committed)."""
        if isinstance(failure, ProducerFencedError):
            logger.error(
                "computation %s unit %d: fenced, this unit commits nothing more and stops: %s. "
                "If no other member took its partitions over, two processes share the "
                "transactional id %s: give each process that runs this topology its own "
                "Settings(instance_id=...)",
                runner.name,
                runner.unit,
                failure,
                self.transactional_id,
            )
            runner.terminate(failure, "the unit's transactional producer was fenced")
            return False
        self.failures += 1
        if self.failures > runner._checkpoint_retries:
            runner.terminate(
                CheckpointError(f"{type(failure).__name__}: {failure}"),
                f"checkpoint transaction failed {self.failures} times",
            )
            return False
        logger.warning(
            "computation %s unit %d: checkpoint transaction failed and was aborted (%s: %s); "
            "processing again from the committed positions (%d/%d)",
            runner.name,
            runner.unit,
            type(failure).__name__,
            failure,
            self.failures,
            runner._checkpoint_retries,
        )
        if isinstance(failure, TransactionTimeoutError):
            self.reopen()
        elif not isinstance(failure, TransactionAbortedError) and not runner.sleep(
            runner._checkpoint_pause
        ):
            runner.stats.state = STOPPED  # asked to stop while waiting, as at_least_once does
            return False
        runner._do_rewind()
        return False


class UnitTransactionAppender(LogAppender[Any]):
    """A unit's appender of one log inside its checkpoint transactions: it appends through the
    unit's current transactional producer (which `UnitTransactions.reopen` replaces)."""

    def __init__(self, owner: UnitTransactions, name: Name, codec: Codec[Any] | None) -> None:
        self.owner = owner
        self.name = name
        self.codec = codec
        self._closed = False

    def _target(self) -> Any:
        if self._closed:
            raise LogClosedError(f"the transactional appender of {self.name.urn} is closed")
        return self.owner._current(self.name, self.codec)

    @property
    def size(self) -> int:
        return int(self._target().size)

    def append(self, key: str, message: Any) -> LogOffset:
        return self._target().append(key, message)  # type: ignore[no-any-return]

    def append_to(self, partition: int, key: str, message: Any) -> LogOffset:
        return self._target().append_to(partition, key, message)  # type: ignore[no-any-return]

    def append_batch(
        self,
        items: Sequence[tuple[str, Any]],
        *,
        partition: int | None = None,
        timestamps: Sequence[int] | None = None,
    ) -> Sequence[LogOffset]:
        return self._target().append_batch(  # type: ignore[no-any-return]
            items, partition=partition, timestamps=timestamps
        )

    def wait_for(self, offset: LogOffset, group: str, timeout: float) -> bool:
        return bool(self._target().wait_for(offset, group, timeout))

    def close(self) -> None:
        """Only this handle: the producer is the unit's (`UnitTransactions.close`)."""
        self._closed = True

    @property
    def closed(self) -> bool:
        return self._closed
