"""The exception hierarchy. Every message says what was wrong and what to do about it."""

from __future__ import annotations

from typing import Any, ClassVar

__all__ = [
    "ArgumentTypeError",
    "BrokerAuthenticationError",
    "BrokerUnavailableError",
    "ChangelogTruncatedError",
    "CheckpointError",
    "CodecError",
    "ComputationError",
    "ConfigError",
    "CorruptCheckpointError",
    "CorruptLogError",
    "IncompatibleTableError",
    "InvalidArgumentError",
    "InvalidNameError",
    "InvalidRecordError",
    "LogClosedError",
    "LogError",
    "LogExistsError",
    "LogLockedError",
    "LogNotFoundError",
    "LogWriteError",
    "PartitionNotFoundError",
    "ProducerFencedError",
    "RecordFieldError",
    "RecordTooLargeError",
    "RestoreAbandonedError",
    "RestoreStalledError",
    "SchemaNotFoundError",
    "StateError",
    "StoreLockedError",
    "StreamcoreError",
    "TableError",
    "TailerConflictError",
    "TopologyError",
    "TransactionAbortedError",
    "TransactionTimeoutError",
    "UndecodableRecordError",
    "UnsupportedOperationError",
]


class StreamcoreError(Exception):
    """Root of every error streamcore raises on purpose.

    `retryable` says whether the same call, unchanged, can succeed if made again: True when the
    cause is a state outside the call that passes (a lock another process holds, a broker or
    database that is down or busy, a full disk, a consumer group still live), so a retry after a
    wait, or once that state is cleared, can work; False when the call, its input, a
    definition, the configuration or the stored data must change first. Every family (each
    direct subclass) sets it, and a member whose answer differs sets its own: docs/errors.md
    lists them. A bare `StreamcoreError` is not retryable."""

    retryable: ClassVar[bool] = False


class ConfigError(StreamcoreError):
    """A setting in `include/streamcore.toml` or a `STREAMCORE_*` variable is invalid."""

    retryable = False


class InvalidNameError(StreamcoreError, ValueError):
    """A log or group name does not follow the `namespace/name` rules."""

    retryable = False


class RecordFieldError(StreamcoreError, TypeError, ValueError):
    """A `Record` was given a field it cannot hold: a key that is not UTF-8 text, data or a trace
    context that is not bytes, a watermark outside the signed 64-bit range, flags outside one
    byte. Raised by the constructor and the `with_*` copies; fix the value, retrying cannot help.
    A `TypeError` and a `ValueError`, like Python's own argument errors."""

    retryable = False


class CodecError(StreamcoreError):
    """Bytes could not be encoded or decoded by a codec (bad magic, unknown schema, truncated)."""

    retryable = False

    def __init__(self, codec: str, reason: str) -> None:
        super().__init__(f"codec {codec!r}: {reason}")
        self.codec = codec
        self.reason = reason


class SchemaNotFoundError(CodecError):
    """The writer schema named by a fingerprint or registry id is not known."""


class UndecodableRecordError(CodecError):
    """A tailer cannot turn a record into a `LogRecord`: its codec rejects the value, or the key
    is not UTF-8. The tailer stays at that record (every record before it was returned):
    `skip_one()` moves past it. `offset` is its `LogOffset`; `key` and `value` its raw bytes."""

    def __init__(
        self, codec: str, reason: str, *, offset: Any, key: bytes, value: bytes, timestamp: int
    ) -> None:
        super().__init__(codec, reason)
        self.offset = offset
        self.key = key
        self.value = value
        self.timestamp = timestamp


class LogError(StreamcoreError):
    """Base of the log layer errors."""

    retryable = False


class LogNotFoundError(LogError):
    """The log does not exist."""


class LogExistsError(LogError):
    """A log with that name exists already (with other settings)."""


class LogLockedError(LogError):
    """Another process holds the single-writer lock of a partition."""

    retryable = True


class TailerConflictError(LogError):
    """A live tailer already reads this (group, partition) in this process."""


class CorruptLogError(LogError):
    """A segment holds bytes that fail their checksum somewhere other than its tail."""


class RecordTooLargeError(LogError):
    """A record or batch exceeds the configured size limit."""


class LogWriteError(LogError, OSError):
    """Writing an append to disk failed (a full disk, an I/O error): nothing of that append was
    written, and the partition stays readable. `errno` is the operating system's."""

    retryable = True

    def __init__(self, message: str, errno: int | None = None) -> None:
        super().__init__(message)
        self.errno = errno

    def __str__(self) -> str:
        return str(self.args[0])


class InvalidRecordError(LogError, ValueError):
    """An append was given a record the log cannot store (a key that is not UTF-8 text, a
    timestamp that is not integer milliseconds): nothing of that append was written."""


class LogClosedError(LogError):
    """The appender, tailer or manager was used after close()."""


class BrokerUnavailableError(LogError):
    """A Kafka broker did not answer within the configured timeout (down, wrong address, or
    refused the credentials)."""

    retryable = True


class BrokerAuthenticationError(BrokerUnavailableError):
    """A Kafka broker refused the client's credentials (SASL authentication failed)."""

    retryable = False


# The log's calls that raised builtins (issue 26): each is also the builtin it replaced, so
# `except ValueError` / `except NotImplementedError` still works.


class PartitionNotFoundError(LogError, ValueError):
    """A call named a partition the log does not have, or one not assigned to the tailer: the
    message names the partitions there are."""


class UnsupportedOperationError(LogError, NotImplementedError):
    """The backend does not implement this call (a `LogManager` without `subscribe`)."""


# Kafka transactions (`streamcore.log.kafka.transaction`): what a checkpoint's commit can meet.


class ProducerFencedError(LogError):
    """Another member opened a transactional producer with the same transactional id (it took
    the task over): this one is a zombie, and Kafka refuses everything it sends. This member must
    stop working on the task; its uncommitted work is redone by the new owner."""


class TransactionAbortedError(LogError):
    """A Kafka transaction was aborted (an abortable broker error): none of its records or
    input positions is visible to read_committed readers. Rewind the inputs to the group's
    committed positions and redo the checkpoint in a new transaction."""

    retryable = True


class TransactionTimeoutError(TransactionAbortedError):
    """A Kafka transaction stayed open longer than `transaction.timeout.ms`, or its commit did
    not finish within the timeout: it is (or will be) aborted. Redo the checkpoint; checkpoint
    more often or raise `transaction.timeout.ms`."""


class TopologyError(StreamcoreError):
    """A topology, its settings or a computation's metadata is inconsistent (unknown stream,
    cycle, duplicate name, bad policy). Fix the definition; retrying does not help."""

    retryable = False


class ComputationError(StreamcoreError):
    """A computation could not run: its processor failed to start, checkpoint or stop."""

    retryable = False


class CheckpointError(ComputationError):
    """Appending the produced records or committing the input positions failed (after the
    configured retries, the computation's unit terminates; nothing committed is lost)."""

    retryable = True


class StateError(StreamcoreError):
    """A state store cannot be made consistent with its changelog as asked (streamcore.state):
    the changelog has another partition count than the computation has tasks, or it lost records
    the store needs and the settings say to fail."""

    retryable = False


class CorruptCheckpointError(StateError):
    """A store's checkpoint cannot be read (not the changelog checkpoint format). The restore
    catches it and rebuilds the store from the changelog's start."""


class ChangelogTruncatedError(StateError):
    """A changelog no longer holds records a restore needs (purged or truncated below the store's
    checkpoint, or during the restore) and the restore's `on_truncated` setting is "fail". Use
    "rebuild" to restore what the changelog still holds, or reset the computation's state."""


class RestoreStalledError(StateError):
    """A restore read no further for its `stall_timeout`: the changelog partition's position did
    not move towards the end offset captured at the start. The message names the changelog, the
    partition, the position and the end; check that the log is reachable and readable."""

    retryable = True


class RestoreAbandonedError(StateError):
    """A restore stopped because its caller asked it to (`keep_going()` answered False, e.g. the
    task was revoked by a rebalance). The store is at a consistent checkpoint; the next owner of
    the task restores from it."""

    retryable = True


class StoreLockedError(StateError):
    """Another process still holds a persistent state store's directory lock after the bounded
    wait (`[state] lock_timeout`): a store has one owner at a time. Stop the other processor, or
    wait for it: its lock is released when its process ends, even on SIGKILL. `path` is the store's
    directory, `pid` the holder's (None when it could not be read)."""

    retryable = True

    def __init__(self, path: Any, holder: str, timeout: float) -> None:
        # `holder`: what the holder wrote in the lock file ("<pid> <host> <since>"), or a
        # description when there is none.
        fields = holder.split()
        self.path = path
        self.pid = int(fields[0]) if len(fields) == 3 and fields[0].isdigit() else None
        who = holder
        if self.pid is not None:
            who = f"pid {fields[0]} on {fields[1]}, holding it since {fields[2]}"
        super().__init__(
            f"state store {str(path)!r} is locked by {who}; waited "
            f"{timeout:g} s. A store has one owner at a time: stop the other processor, or wait "
            "for it (its lock is released when its process ends, even on SIGKILL; [state] "
            "lock_timeout sets the wait)"
        )


class TableError(StreamcoreError):
    """A Delta table of the catalog (streamcore.tables) cannot be read or maintained as asked."""

    retryable = False


class IncompatibleTableError(TableError):
    """A table exists where the catalog puts one, with other columns, types or partitioning than
    the catalog declares. Writing would mix shapes, so nothing is written; retrying does not help:
    migrate or move the table away."""


# Calls given a wrong argument, shared by every package (issue 26: library code raises the
# project's exceptions). Each is also the builtin it replaced, so `except ValueError` still works.


class InvalidArgumentError(StreamcoreError, ValueError):
    """A function was called with an argument out of its range (a negative count, duration or
    timestamp, time moving backwards): the message names the argument and the range."""

    retryable = False


class ArgumentTypeError(StreamcoreError, TypeError):
    """A function was called with an argument of a type it does not take: the message names the
    types it takes and the one it was given."""

    retryable = False
