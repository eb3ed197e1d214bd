"""The text encoding that makes a store's UTF-8 byte order the order the window layouts need
(the window and session stores, the DSL's windowed joins): a time as `T(t)`, `t + 2**63` in 16
lowercase hex digits (fixed width, so text order is numeric order, negative times included), and
a record key as `esc(key)`, every U+0000 written U+0000 U+0001 and the key ended by U+0000
U+0000 (order-preserving and prefix-free: docs/state.md, "Windows")."""

from __future__ import annotations

from streamcore.errors import ArgumentTypeError

__all__ = ["TIME_WIDTH", "escape_key", "time_of", "time_text", "unescape_key"]

_OFFSET = 1 << 63
TIME_WIDTH = 16  # characters of `time_text`


def time_text(ms: int) -> str:
    """`T(ms)`."""
    return format(ms + _OFFSET, "016x")


def time_of(text: str) -> int:
    """The time `time_text` wrote as `text`."""
    return int(text, 16) - _OFFSET


def escape_key(key: str) -> str:
    """`esc(key)`; a key that is not a str is refused (a Record key is one)."""
    if type(key) is not str:
        raise ArgumentTypeError(
            f"a window store key must be a str (a Record key), got {type(key).__name__} {key!r}"
        )
    return key.replace("\x00", "\x00\x01") + "\x00\x00"


def unescape_key(text: str, at: int) -> tuple[str, int]:
    """The key escaped at `text[at:]` and the position after its terminator."""
    stop = text.index("\x00\x00", at)
    return text[at:stop].replace("\x00\x01", "\x00"), stop + 2
