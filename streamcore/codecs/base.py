"""`Codec`: the one interface the logs, tools and computations use to turn messages into bytes.

Every codec honours one contract on `decode`: it returns a complete message or raises
`CodecError` naming the codec and the reason -- never another exception type, never a partial
object -- because decode runs on bytes read from logs and topics that anyone may have written.
"""

from __future__ import annotations

import struct
from abc import ABC, abstractmethod
from typing import Generic, TypeVar

from streamcore.errors import CodecError

__all__ = ["Codec", "describe_failure", "hex_prefix"]

M = TypeVar("M")


class Codec(ABC, Generic[M]):
    """Encodes a message (a `Record`, a dict datum, a JSON value) to bytes and back."""

    name: str
    """The codec name, one of `streamcore.codecs.CODEC_NAMES`; used in every error message."""

    @abstractmethod
    def encode(self, message: M) -> bytes:
        """The bytes of `message`; `CodecError` if the message does not fit the codec/schema."""

    @abstractmethod
    def decode(self, data: bytes) -> M:
        """The message held by `data`; `CodecError` for anything else."""

    def error(self, reason: str) -> CodecError:
        """A `CodecError` labelled with this codec's name."""
        return CodecError(self.name, reason)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


def hex_prefix(data: bytes, length: int = 2) -> str:
    """`'c3 01'`: the first bytes of a message, for error messages about magic bytes."""
    shown = bytes(data[:length]).hex(" ")
    return shown if shown else "nothing (empty input)"


def describe_failure(exc: BaseException, *, reading: bool = True) -> str:
    """A short, human reason for an exception raised while reading (or writing) Avro/JSON.

    fastavro reports a truncated or corrupt body through whatever Python raised first (EOFError,
    IndexError, struct.error, ...), so we translate the common ones into what they mean.
    """
    if reading and isinstance(exc, (EOFError, IndexError, struct.error)):
        return f"truncated or corrupt body ({type(exc).__name__}: {exc})"
    if isinstance(exc, UnicodeError):
        return f"a string is not valid UTF-8 ({exc})"
    if isinstance(exc, RecursionError):
        return "the value is nested too deeply"
    if isinstance(exc, MemoryError):
        return "a declared length is too large to allocate"
    return f"{type(exc).__name__}: {exc}"
