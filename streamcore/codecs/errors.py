"""Errors raised inside the codecs. A codec turns each of the decoding ones into a `CodecError`
naming the codec (the contract of `Codec.decode`), so a caller of `encode`/`decode` meets only
`CodecError`; the registry's settings error reaches whoever opens the registry."""

from __future__ import annotations

from streamcore.errors import ConfigError, StreamcoreError

__all__ = [
    "ConflictingCredentialsError",
    "GuardError",
    "RecordFormatError",
    "RecordTruncatedError",
]


class RecordFormatError(StreamcoreError, ValueError):
    """A Record field cannot be encoded, or the bytes, the datum or the JSON value are not a
    Record; says which field."""

    retryable = False


class RecordTruncatedError(StreamcoreError, IndexError):
    """The bytes end inside a Record field (a truncated body): an `IndexError`, as indexing past
    the end of the bytes raises, so the codec reports both as a truncated or corrupt body."""

    retryable = False


class GuardError(StreamcoreError, ValueError):
    """The bytes declare something impossible or too large; the message says what."""

    retryable = False


class ConflictingCredentialsError(ConfigError, ValueError):
    """The schema registry's credentials are given twice (in the URL and in
    `basic.auth.user.info`): keep one."""
