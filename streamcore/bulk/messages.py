"""What commands and statuses are on the streams: `Record`s keyed by command id, whose data is the
BulkCommand / BulkStatus datum in Avro single-object encoding (include/schemas), like every
stream of the catalog (docs/design.md, "The catalog")."""

from __future__ import annotations

import functools

from streamcore.bulk.model import BulkCommand, BulkStatus
from streamcore.codecs import AvroCodec
from streamcore.codecs.avro import default_store
from streamcore.record import Record

__all__ = [
    "COMMAND_STREAM",
    "DONE_STREAM",
    "STATUS_STREAM",
    "STREAM_PARTITIONS",
    "command_record",
    "decode_command",
    "decode_status",
    "status_record",
]


COMMAND_STREAM = "bulk/command"
STATUS_STREAM = "bulk/status"
DONE_STREAM = "bulk/done"
# Nuxeo's partition counts: commands spread over two scrollers, statuses keep one total order.
STREAM_PARTITIONS = {COMMAND_STREAM: 2, STATUS_STREAM: 1, DONE_STREAM: 1}
COMMAND_SCHEMA = "org.streamcore.bulk.BulkCommand"
STATUS_SCHEMA = "org.streamcore.bulk.BulkStatus"


@functools.cache
def _codec(name: str) -> AvroCodec:
    store = default_store()
    return AvroCodec(store.by_name(name), "avro", store)


def command_record(command: BulkCommand) -> Record:
    return Record.of(command.id, _codec(COMMAND_SCHEMA).encode(command.to_datum()))


def status_record(status: BulkStatus) -> Record:
    return Record.of(status.command_id, _codec(STATUS_SCHEMA).encode(status.to_datum()))


def decode_command(data: bytes) -> BulkCommand:
    """The command in the data of a `bulk/command` Record."""
    return BulkCommand.from_datum(_codec(COMMAND_SCHEMA).decode(data))


def decode_status(data: bytes) -> BulkStatus:
    """The status in the data of a `bulk/status` or `bulk/done` Record."""
    return BulkStatus.from_datum(_codec(STATUS_SCHEMA).decode(data))
