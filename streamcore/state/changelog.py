"""The changelog of a state store: every checkpoint's changes appended to a key-compacted log, one
partition per task, each record carrying the input positions that produced it (docs/state.md,
"Changelog").

Naming: the changelog of store `counts` of computation `shop/count-orders` is
`shop/count-orders-counts-changelog` (Kafka Streams' `<app>-<store>-changelog`, in the
computation's namespace).

Record format (version 1). The log record's key is the store key (UTF-8 text, the `str` key of the
`KeyValueStore`), so key compaction keeps the latest record of each store key. The value:

- a put: `00 01` + the positions' length (2 bytes, big-endian) + the positions + the store value
  (the codec's bytes, unchanged);
- a delete: the project's `Record` envelope (the Avro single-object form the default `avro`
  codec writes) with the store key as key, the positions as data and the `TOMBSTONE` flag: the
  local log's compaction takes it for a tombstone (`streamcore.log.local.compaction`) and drops
  it after its delete retention, as it drops an empty value;
- an empty value (Kafka's null: a tombstone written by another tool) deletes the key and carries
  no positions: it is always applied.

The positions are compact JSON, `[["<log urn>", partition, offset], ...]` sorted: for each input
partition, the offset after the last input record whose processing produced the change (the
position the checkpoint commits). Every record of one `append` carries the same positions, so
the restore reads the bytes of one header once and then only compares prefixes
(`streamcore.state.restore`); the put's value is a slice of the log's value, never decoded.

Why the delete is not a bare tombstone: a delete must carry its positions too (a delete produced
by inputs that are re-delivered must not be applied), and the log API has no record headers.
Kafka's cleaner only takes a null value for a tombstone, so on Kafka a delete record stays as the
key's latest record (a few dozen bytes) instead of vanishing after `delete.retention.ms`.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from streamcore.codecs.framing import SINGLE_OBJECT_HEADER_SIZE, single_object_header
from streamcore.codecs.record_binary import (
    RECORD_FINGERPRINT,
    avro_long,
    decode_record,
    encode_record,
)
from streamcore.errors import CorruptCheckpointError, InvalidNameError, StateError
from streamcore.log.api import LogAppender, LogManager
from streamcore.log.capabilities import Segmented, TopicConfigurable
from streamcore.log.config import CHANGELOG_SUFFIX
from streamcore.log.values import LogPartition
from streamcore.names import NO_NAMESPACE, Name
from streamcore.record import TOMBSTONE, Record

__all__ = [
    "DELETE_PREFIX",
    "PUT_MAGIC",
    "ChangelogWriter",
    "Positions",
    "StoreCheckpoint",
    "changelog_name",
    "decode_positions",
    "delete_encoder",
    "encode_delete",
    "encode_positions",
    "encode_put",
    "ensure_changelog",
    "put_header",
]

logger = logging.getLogger(__name__)

Positions = Mapping[LogPartition, int]
"""Input partition -> the offset after the last input record whose processing produced a change
(the position the checkpoint commits)."""

PUT_MAGIC = b"\x00\x01"  # never the start of a Record envelope (C3 01) nor an empty value
DELETE_PREFIX = single_object_header(RECORD_FINGERPRINT)

_STORE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
# Kafka: how long a record stays out of the cleaner's reach. A crash leaves records produced by
# inputs that are re-delivered; until the restore that follows appends their compensation, the
# cleaner must not drop the older record they would supersede (docs/state.md, "Limits").
DEFAULT_MIN_COMPACTION_LAG_MS = 7 * 24 * 3600 * 1000


def changelog_name(computation: str | Name, store: str) -> str:
    """`<namespace>/<computation's name>-<store>-changelog`. The store name matches
    `[A-Za-z][A-Za-z0-9_]*` (no `-`, so the changelog's name reads back unambiguously); the
    computation has a namespace (a name without one cannot hold the `-` separators)."""
    if not isinstance(store, str) or not _STORE_NAME.fullmatch(store):
        raise InvalidNameError(
            f"invalid state store name {store!r}: it must match [A-Za-z][A-Za-z0-9_]* (no '-'), "
            "e.g. 'counts'"
        )
    name = Name.of(computation)
    if name.namespace == NO_NAMESPACE:
        raise InvalidNameError(
            f"computation {name.urn!r} has no namespace, so its store {store!r} has no changelog "
            f"name; name the computation 'namespace/{name.name}'"
        )
    return Name(name.namespace, f"{name.name}-{store}{CHANGELOG_SUFFIX}").urn


@runtime_checkable
class _Routed(Protocol):
    """A manager that routes each log to a backend manager (`UnifiedLogManager`)."""

    def backend_for(self, name: str | Name) -> LogManager: ...


def _create_options(manager: LogManager, name: str) -> dict[str, Any]:
    """What the backend under `manager` needs to create a compacted changelog that keeps every
    key: found by capability, not by backend name."""
    target = manager.backend_for(name) if isinstance(manager, _Routed) else manager
    if isinstance(target, TopicConfigurable):  # Kafka: the broker's cleaner compacts
        return {
            "topic_config": {
                "cleanup.policy": "compact",
                "min.compaction.lag.ms": str(DEFAULT_MIN_COMPACTION_LAG_MS),
            }
        }
    if isinstance(target, Segmented):  # local: no time retention (compaction is the job's)
        return {"retention": "0"}
    return {}  # memory: keeps everything


def ensure_changelog(manager: LogManager, name: str, partitions: int) -> None:
    """Create changelog `name` with `partitions` partitions (one per task) when missing:
    key-compacted on Kafka (`cleanup.policy=compact`), kept without time retention on the local
    log (its key compaction is the retention job's `compact` step, for logs a `compact = true`
    rule names). An existing changelog with another partition count is a `StateError`."""
    if not manager.exists(name):
        manager.create(name, partitions, **_create_options(manager, name))
        if manager.size(name) == partitions:
            return
    existing = manager.size(name)
    if existing != partitions:
        raise StateError(
            f"changelog {name} has {existing} partitions but the computation has {partitions} "
            "tasks: the task count changed (its inputs' partition count), so the stored state no "
            "longer matches its tasks. Reset the computation's state: delete the changelog and "
            "the local stores, then reprocess its inputs from the start"
        )


# -- the record format -------------------------------------------------------------------------
def encode_positions(positions: Positions) -> bytes:
    """The positions as compact, sorted JSON."""
    rows = sorted([p.name.urn, p.partition, int(o)] for p, o in positions.items())
    return json.dumps(rows, separators=(",", ":")).encode("ascii")


def decode_positions(blob: bytes) -> dict[LogPartition, int] | None:
    """The positions `encode_positions` wrote; None for anything else."""
    try:
        rows = json.loads(blob)
        out: dict[LogPartition, int] = {}
        for urn, partition, offset in rows:
            if type(partition) is not int or type(offset) is not int or offset < 0:
                return None
            out[LogPartition(Name.of(urn), partition)] = offset
    except (ValueError, TypeError):  # not JSON, not rows of three, a bad name
        return None
    return out


def put_header(blob: bytes) -> bytes:
    """The header every put of one append starts with."""
    return PUT_MAGIC + len(blob).to_bytes(2, "big") + blob


def encode_put(header: bytes, value: bytes) -> bytes:
    """A put's log value: the append's header, then the store value."""
    return header + value


def encode_delete(key: str, blob: bytes) -> bytes:
    """A delete's log value: a `Record` tombstone whose data are the positions."""
    return encode_record(Record(key, blob, 0, TOMBSTONE), DELETE_PREFIX)


def delete_encoder(blob: bytes) -> Callable[[bytes], bytes]:
    """`encode_delete(key, blob)` for many keys, given in UTF-8, and one `blob` (the deletes of
    one append: a window store's checkpoint has thousands). The Avro body of a Record is its
    fields in schema order, the key an Avro string (zigzag varint length, then the UTF-8) right
    after the watermark, so the bytes around the key are those of the tombstone with the empty
    key, made once."""
    empty = avro_long(0)  # the empty key's length
    whole = encode_record(Record("", blob, 0, TOMBSTONE), DELETE_PREFIX)
    at = len(DELETE_PREFIX) + len(avro_long(0))  # after the watermark 0
    head, tail = whole[:at], whole[at + len(empty) :]

    def encode(key: bytes) -> bytes:
        return head + avro_long(len(key)) + key + tail

    return encode


def decode_delete(value: bytes) -> bytes:
    """The positions of a delete `encode_delete` wrote."""
    return decode_record(value, SINGLE_OBJECT_HEADER_SIZE).data


# -- writing -----------------------------------------------------------------------------------
class ChangelogWriter:
    """Appends a task's checkpointed changes to its partition of the changelog. Thread-safe as
    its appender is; one writer serves every task of a computation's store."""

    def __init__(
        self, manager: LogManager, name: str, appender: LogAppender[Any] | None = None
    ) -> None:
        self.manager = manager
        self.name = Name.of(name).urn
        # Read once: the checkpoint of every flush names it (`checkpoint`), and on Kafka it
        # costs a metadata request.
        self.incarnation = manager.incarnation(self.name)
        # `appender`: another appender of the changelog (exactly-once: the unit's transaction's,
        # streamcore.computation.exactly_once); by default the manager's.
        self._appender: LogAppender[Any] = (
            manager.appender(self.name) if appender is None else appender
        )

    def append(self, task: int, changes: Mapping[bytes, bytes | None], positions: Positions) -> int:
        """Append `changes` (store key -> value, None deletes) to partition `task`, each record
        with `positions`; returns the partition's end offset after them (the next offset). The
        append returns once the log has them: written by the local log (fsynced as its `fsync`
        setting says), acknowledged by the Kafka broker."""
        if not changes:
            return self.manager.end_offsets(self.name)[task]
        blob = encode_positions(positions)
        header = put_header(blob)
        delete = delete_encoder(blob)
        items: list[tuple[str, bytes]] = []
        for raw, value in changes.items():
            items.append((raw.decode("utf-8"), delete(raw) if value is None else header + value))
        offsets = self._appender.append_batch(items, partition=task)
        return offsets[-1].offset + 1

    def checkpoint(self, offset: int, positions: Positions) -> bytes:
        """The store checkpoint to flush with the changes `append` returned `offset` for: this
        changelog's incarnation, `offset`, and the input positions the checkpoint commits."""
        return StoreCheckpoint(self.incarnation, offset, dict(positions)).encode()

    def close(self) -> None:
        """Close the appender; idempotent."""
        if not self._appender.closed:
            self._appender.close()

    def __enter__(self) -> ChangelogWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- the store's checkpoint --------------------------------------------------------------------
@dataclass(frozen=True)
class StoreCheckpoint:
    """What a store records atomically with its data: the changelog's incarnation, the changelog
    offset to read next, and the input positions the data are consistent with."""

    incarnation: str | None
    offset: int
    positions: Mapping[LogPartition, int] = field(default_factory=dict)

    def encode(self) -> bytes:
        """Compact JSON."""
        return json.dumps(
            {
                "v": 1,
                "incarnation": self.incarnation,
                "offset": self.offset,
                "positions": json.loads(encode_positions(self.positions)),
            },
            separators=(",", ":"),
        ).encode("utf-8")

    @classmethod
    def decode(cls, data: bytes) -> StoreCheckpoint:
        """The checkpoint `encode` wrote; `CorruptCheckpointError` for anything else."""
        try:
            doc = json.loads(data)
        except ValueError:
            doc = None
        if not isinstance(doc, dict) or doc.get("v") != 1:
            raise _corrupt(data, "not a version 1 checkpoint")
        incarnation, offset = doc.get("incarnation"), doc.get("offset")
        if not (incarnation is None or isinstance(incarnation, str)):
            raise _corrupt(data, f"bad incarnation {incarnation!r}")
        if type(offset) is not int or offset < 0:
            raise _corrupt(data, f"bad offset {offset!r}")
        positions = decode_positions(json.dumps(doc.get("positions")).encode("utf-8"))
        if positions is None:
            raise _corrupt(data, "bad positions")
        return cls(incarnation, offset, positions)


def _corrupt(data: bytes, why: str) -> CorruptCheckpointError:
    return CorruptCheckpointError(
        f"not a store checkpoint ({why}): {bytes(data[:120])!r}; the store is rebuilt from its "
        "changelog"
    )
