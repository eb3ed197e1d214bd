"""Checks every backend runs on an append's input before it writes anything, so that a bad item
anywhere in a batch leaves the log as it was."""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import Any

import numpy as np

from streamcore.errors import ArgumentTypeError, InvalidArgumentError, InvalidRecordError

__all__ = ["check_keys_encode", "check_timestamps", "check_types", "unencodable_key"]


def _is_millis(value: Any) -> bool:
    try:
        array("q", [value])
    except (TypeError, OverflowError):
        return False
    return True


def check_timestamps(
    timestamps: Sequence[int] | np.ndarray | None, count: int
) -> np.ndarray | None:
    """The append times of a batch of `count` items as int64 milliseconds (None stays None).

    Raises `InvalidRecordError` naming the first item whose time is not an integer that fits in
    64 bits (a float, a string, a datetime): appends store integer milliseconds since the epoch."""
    if timestamps is None:
        return None
    if len(timestamps) != count:
        raise InvalidArgumentError(f"{len(timestamps)} timestamps for {count} items; give one each")
    if isinstance(timestamps, np.ndarray) and timestamps.dtype.kind == "i":
        return timestamps.astype(np.int64, copy=False)
    try:
        # array("q") converts in C and refuses floats, text and out-of-range integers.
        return np.frombuffer(array("q", timestamps), dtype=np.int64)
    except (TypeError, OverflowError):
        index, value = next((i, t) for i, t in enumerate(timestamps) if not _is_millis(t))
        raise InvalidRecordError(
            f"timestamp #{index} is {value!r}; append timestamps are integer milliseconds since "
            "the epoch, one per item: convert that item's time (e.g. int(dt.timestamp() * 1000)). "
            "Nothing of this batch was appended"
        ) from None


def unencodable_key(index: int, key: str, exc: UnicodeEncodeError) -> InvalidRecordError:
    return InvalidRecordError(
        f"key #{index} ({key!r}) is not valid Unicode text, so it has no UTF-8 form "
        f"({exc.reason}); fix the key (decode its bytes with their real encoding, or encode "
        "binary ids as hex or base64). Nothing of this batch was appended"
    )


def check_keys_encode(keys: Sequence[str]) -> None:
    """`InvalidRecordError` naming the first key with no UTF-8 form (a lone surrogate, e.g. from
    bytes decoded with errors="surrogateescape"); one pass in C when every key is fine."""
    joined = "".join(keys)
    if joined.isascii():
        return
    try:
        joined.encode()
    except UnicodeEncodeError:
        for index, key in enumerate(keys):
            try:
                key.encode()
            except UnicodeEncodeError as exc:
                raise unencodable_key(index, key, exc) from None


def check_types(keys: Sequence[object], values: Sequence[object]) -> None:
    """TypeError naming the first key that is not a str or value that is not bytes-like."""
    for k in keys:
        if not isinstance(k, str):
            raise ArgumentTypeError(f"log keys must be str, got {type(k).__name__}")
    for v in values:
        if not isinstance(v, bytes | bytearray | memoryview):
            raise ArgumentTypeError(
                f"log values must be bytes, got {type(v).__name__}; pass a codec to the "
                "appender to encode messages"
            )
