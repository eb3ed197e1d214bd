"""`KafkaTransactions`: one transactional producer, for exactly-once checkpoints on Kafka.

Why: with the idempotent producer alone, a processor that crashes between appending a
checkpoint's outputs and committing its input positions appends them again when it restarts
(at-least-once). In a Kafka transaction the outputs, the changelog records and the group's input
positions (`send_offsets_to_transaction`) become visible together or not at all, to readers that
read committed (this backend's default `isolation.level`).

The usage is confluent-kafka's and Kafka Streams' (`exactly_once_v2`): one producer per
transactional id, a stable id the caller gives (a computation's group and task: the same id
after a restart or on the member that takes the task over), `init_transactions` once (done here:
it aborts or completes what a previous producer of that id left open, and fences it), then per
checkpoint::

    tx = manager.transactions(f"{group}/{task}")
    tx.begin()
    tx.appender("orders/enriched").append_batch(records)   # any logs, any partitions
    tx.send_offsets(tailer)                                 # the inputs read so far
    tx.commit()                                             # or tx.abort() on failure

`with tx.transaction(): ...` does begin, commit, and abort on an exception.

What can go wrong:
- `ProducerFencedError`: another producer opened the same transactional id (the task's new
  owner): this member is a zombie and must stop; its uncommitted work is redone by the new owner.
- `TransactionTimeoutError`: the transaction stayed open longer than `transaction.timeout.ms`;
  the broker aborted it and fenced this producer: open a new one and redo the checkpoint.
- `TransactionAbortedError`: an abortable broker error; the transaction was aborted here: rewind
  the inputs to the committed positions and redo the checkpoint.
- `BrokerUnavailableError`: the broker did not answer within the manager's timeout.

Not pooled (unlike the idempotent producer of `KafkaAppender`): a transactional id belongs to
one producer, and each costs its `init_transactions` round trips.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from confluent_kafka import KafkaException, Producer, TopicPartition

from streamcore.errors import (
    InvalidArgumentError,
    LogClosedError,
    LogError,
    ProducerFencedError,
    StreamcoreError,
    TransactionAbortedError,
    TransactionTimeoutError,
)
from streamcore.log.kafka.appender import KafkaAppender
from streamcore.log.kafka.client import FENCED
from streamcore.log.values import AppendedOffsets
from streamcore.names import Name

if TYPE_CHECKING:
    from streamcore.codecs import Codec
    from streamcore.log.api import LogTailer
    from streamcore.log.kafka.manager import KafkaLogManager
    from streamcore.log.values import LogPartition

__all__ = ["KafkaTransactions", "TransactionAppender"]

logger = logging.getLogger(__name__)
T = TypeVar("T")
_DEFAULT_TIMEOUT_MS = 60_000  # librdkafka's transaction.timeout.ms


class KafkaTransactions:
    """A transactional producer (`transactional.id` = the manager's topic prefix + `id`) and the
    transaction it has open, if any. Not thread-safe: one per task, used by its thread.
    `transaction_timeout` (s) sets `transaction.timeout.ms` (default: the `config`'s, else 60 s):
    the broker aborts a transaction open longer."""

    def __init__(
        self,
        manager: KafkaLogManager,
        transactional_id: str,
        *,
        transaction_timeout: float | None = None,
    ) -> None:
        if not isinstance(transactional_id, str) or not transactional_id:
            raise InvalidArgumentError(
                f"a transactional id must be a non-empty str (e.g. group + task), got "
                f"{transactional_id!r}"
            )
        self.manager = manager
        self.transactional_id = manager.topic_prefix + transactional_id
        clients = manager.clients
        conf = clients.producer_config()
        conf["transactional.id"] = self.transactional_id
        if transaction_timeout is not None:
            if transaction_timeout <= 0:
                raise InvalidArgumentError(
                    f"transaction_timeout must be positive, got {transaction_timeout}"
                )
            conf["transaction.timeout.ms"] = max(1, int(transaction_timeout * 1000))
        self.transaction_timeout_ms = int(conf.get("transaction.timeout.ms", _DEFAULT_TIMEOUT_MS))
        # librdkafka refuses message and socket timeouts longer than the transaction's.
        txn_ms = self.transaction_timeout_ms
        conf["message.timeout.ms"] = min(int(conf["message.timeout.ms"]), txn_ms)
        conf["socket.timeout.ms"] = min(int(conf["socket.timeout.ms"]), txn_ms + 100)
        with clients.errors(f"cannot create the transactional producer {self.transactional_id}"):
            self.producer = Producer(conf)
        self._began: float | None = None  # monotonic time of begin(), while a transaction is open
        self._fatal: StreamcoreError | None = None  # the producer can do nothing more
        self._closed = False
        self._call(
            "cannot initialize the transactions",
            lambda: self.producer.init_transactions(clients.timeout),
        )

    def __repr__(self) -> str:
        return f"KafkaTransactions({self.transactional_id!r}, open={self.open})"

    @property
    def open(self) -> bool:
        """Whether a transaction is open (begun, neither committed nor aborted)."""
        return self._began is not None

    # -- errors ---------------------------------------------------------------------------------
    def _error(self, exc: KafkaException, what: str) -> StreamcoreError:
        """The streamcore error of a producer error; remembers a fatal one."""
        error = exc.args[0] if exc.args else None
        what = f"transactional producer {self.transactional_id}: {what}"
        if error is not None and error.code() in FENCED:
            found: StreamcoreError = self._fenced(what, error.str())
        else:
            found = self.manager.clients.translate(exc, what)
        if error is not None and error.fatal():
            self._fatal = found
            self._began = None
        return found

    def _fenced(self, what: str, detail: str) -> StreamcoreError:
        """Fenced: by a new owner, or by the broker when the transaction outlived its timeout
        (the coordinator aborts it and bumps the producer's epoch: the same error code)."""
        began = self._began
        if began is not None and (time.monotonic() - began) * 1000 >= self.transaction_timeout_ms:
            return TransactionTimeoutError(
                f"{what}: the transaction was open {time.monotonic() - began:.1f} s, longer than "
                f"transaction.timeout.ms ({self.transaction_timeout_ms} ms), so the broker "
                f"aborted it and fenced this producer ({detail}). Close it, open new "
                "transactions with the same id and redo the checkpoint; checkpoint more often or "
                "raise the transaction timeout"
            )
        return ProducerFencedError(
            f"{what}: fenced ({detail}): another member opened transactions with the same "
            "transactional id and took the task over, so this one is a zombie whose writes and "
            "commits Kafka refuses. Stop working on the task here; its uncommitted work is "
            "redone by the new owner"
        )

    def _call(self, what: str, call: Callable[[], T]) -> T:
        try:
            return call()
        except KafkaException as exc:
            raise self._error(exc, what) from exc

    def _check(self, transaction: bool | None) -> None:
        """Usable, with (True) or without (False) an open transaction (None: either)."""
        if self._closed:
            raise LogClosedError(f"transactions of {self.transactional_id} are closed")
        if self._fatal is not None:
            raise self._fatal
        if transaction is True and self._began is None:
            raise LogError(f"{self.transactional_id}: no transaction is open; call begin() first")
        if transaction is False and self._began is not None:
            raise LogError(
                f"{self.transactional_id}: a transaction is open already; commit() or abort() "
                "it first"
            )

    # -- a transaction --------------------------------------------------------------------------
    def begin(self) -> None:
        """Open a transaction: the appends and offsets that follow belong to it."""
        self._check(False)
        self._call("cannot begin a transaction", self.producer.begin_transaction)
        self._began = time.monotonic()

    def appender(self, name: str | Name, codec: Codec[Any] | None = None) -> TransactionAppender:
        """An appender of log `name` whose appends go into the open transaction (the same checks
        and encoding as `KafkaAppender`; each append waits for its delivery reports, so its
        offsets are known, though readers that read committed see them only after `commit`)."""
        self._check(None)
        name = Name.of(name)
        return TransactionAppender(self, name, codec, self.manager.size(name))

    def send_offsets(
        self, tailer: LogTailer[Any], offsets: Mapping[LogPartition, int] | None = None
    ) -> None:
        """Make the group's committed positions part of the transaction: `offsets` (next offset
        to read per partition; default: `tailer.positions()`, what it has read) become the
        group's committed offsets when, and only when, the transaction commits. `tailer` is a
        member of the group (its group metadata lets the coordinator refuse a zombie's): a
        tailer of this manager (`KafkaTailer`)."""
        from streamcore.log.kafka.tailer import KafkaTailer

        self._check(True)
        if not isinstance(tailer, KafkaTailer):
            raise InvalidArgumentError(
                f"send_offsets needs a tailer of the Kafka manager of these transactions (its "
                f"consumer group metadata), got {type(tailer).__name__}"
            )
        positions = tailer.positions() if offsets is None else dict(offsets)
        if not positions:
            return
        topic = self.manager.topic
        tps = [TopicPartition(topic(p.name), p.partition, int(o)) for p, o in positions.items()]
        metadata = tailer.group_metadata()
        timeout = self.manager.clients.timeout
        try:
            self.producer.send_offsets_to_transaction(tps, metadata, timeout)
        except KafkaException as exc:
            raise self._abortable(
                exc, f"cannot send the offsets of group {tailer.group!r}"
            ) from exc

    def commit(self) -> None:
        """Commit the open transaction: its records and offsets become visible at once. A
        commit that timed out is tried once more (librdkafka's advice: its outcome is not known
        until it answers); an abortable error aborts the transaction and raises
        `TransactionAbortedError`."""
        self._check(True)
        timeout = self.manager.clients.timeout
        try:
            try:
                self.producer.commit_transaction(timeout)
            except KafkaException as exc:
                error = exc.args[0] if exc.args else None
                if error is None or not error.retriable():
                    raise
                self.producer.commit_transaction(timeout)
        except KafkaException as exc:
            raise self._abortable(exc, "cannot commit the transaction") from exc
        self._began = None

    def abort(self) -> None:
        """Abort the open transaction (nothing of it becomes visible to committed reads); no-op
        without one."""
        if self._began is None or self._fatal is not None or self._closed:
            return
        try:
            self.producer.abort_transaction(self.manager.clients.timeout)
        except KafkaException as exc:
            raise self._error(exc, "cannot abort the transaction") from exc
        self._began = None

    def _abortable(self, exc: KafkaException, what: str) -> StreamcoreError:
        """The error of a failed send or commit; when librdkafka says the transaction must be
        aborted, it is aborted here first and the error is `TransactionAbortedError`."""
        error = exc.args[0] if exc.args else None
        if error is None or error.fatal() or not error.txn_requires_abort():
            return self._error(exc, what)
        try:
            self.abort()
        except StreamcoreError as abort_error:
            return abort_error
        return TransactionAbortedError(
            f"transactional producer {self.transactional_id}: {what} ({error.str()}); the "
            "transaction was aborted, nothing of it is visible: rewind the inputs to the "
            "group's committed positions and redo the checkpoint in a new transaction"
        )

    @contextlib.contextmanager
    def transaction(self) -> Iterator[KafkaTransactions]:
        """`begin()`, then `commit()` when the block ends, or `abort()` if it raises."""
        self.begin()
        try:
            yield self
        except BaseException:
            try:
                self.abort()
            except StreamcoreError:
                logger.exception("%s: abort after a failure failed", self.transactional_id)
            raise
        self.commit()

    def close(self) -> None:
        """Abort an open transaction (if the producer can) and let the producer go."""
        if self._closed:
            return
        try:
            self.abort()
        except StreamcoreError:
            logger.exception("%s: abort on close failed", self.transactional_id)
        finally:
            self._closed = True
            self.manager._transactions_closed(self)


class TransactionAppender(KafkaAppender):
    """A `KafkaAppender` on a transaction's producer: appends only while a transaction is open;
    a fencing met by an append is reported as the transactions' (a zombie's or a timeout's)."""

    def __init__(
        self, transactions: KafkaTransactions, name: Name, codec: Codec[Any] | None, size: int
    ) -> None:
        super().__init__(transactions.manager, name, codec, size, transactions.producer)
        self.transactions = transactions

    def _check(self, partition: int | None) -> None:
        self.transactions._check(True)
        super()._check(partition)

    def _send(
        self,
        items: Sequence[tuple[str, Any]],
        partition: int | None,
        timestamps: Sequence[int] | None,
    ) -> AppendedOffsets:
        try:
            return super()._send(items, partition, timestamps)
        except ProducerFencedError as exc:
            tx = self.transactions
            found = tx._fenced(f"transactional producer {tx.transactional_id}: append", str(exc))
            tx._fatal = found
            tx._began = None
            raise found from exc
