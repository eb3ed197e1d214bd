"""Pre-scan untrusted Avro binary for the inputs fastavro cannot survive.

fastavro's compiled reader trusts declared counts and recursion. Two kinds of schema let a few
hostile bytes take the process down:

* an array whose items encode to zero bytes (`null`, an empty record, `fixed` of size 0): a block
  count of 2**60 costs nine bytes and makes fastavro append 2**60 items (memory exhaustion);
* a recursive schema (a linked list, a tree): a few thousand nested union branches overflow the
  C stack and the interpreter dies with a segmentation fault, not an exception.

For those schemas only (`BinaryGuard.for_schema` returns None for all others, which need no help)
the guard walks the bytes once in Python, without building values, and rejects blocks that cannot
fit in the buffer, more than `MAX_EMPTY_ITEMS` zero-byte items, and nesting deeper than
`MAX_NESTING` records, before fastavro sees them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from streamcore.codecs.errors import GuardError

__all__ = [
    "MAX_DATUM_DEPTH",
    "MAX_EMPTY_ITEMS",
    "MAX_NESTING",
    "BinaryGuard",
    "nesting_exceeds",
]

MAX_NESTING = 128
"""Deepest record nesting accepted for recursive schemas."""

MAX_EMPTY_ITEMS = 1_000_000
"""Most zero-byte array items (e.g. nulls) accepted in one message."""

_PRIMITIVE_MIN = {
    "null": 0,
    "boolean": 1,
    "int": 1,
    "long": 1,
    "float": 4,
    "double": 8,
    "bytes": 1,
    "string": 1,
}

MAX_DATUM_DEPTH = 4 * MAX_NESTING
"""Deepest dict/list nesting of a datum handed to fastavro's (recursive, compiled) writer."""

# A reader: (data, position, state) -> new position. state = [depth, empty items left].
_Reader = Callable[[bytes, int, list[int]], int]


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """A zigzag varint (Avro int/long) at `pos` -> (value, next position)."""
    result = 0
    shift = 0
    end = len(data)
    while True:
        if pos >= end:
            raise GuardError("truncated: a number runs past the end of the data")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            break
        shift += 7
        if shift >= 70:
            raise GuardError("a number is longer than 10 bytes")
    if result >> 64:
        raise GuardError("a number does not fit in 64 bits")
    return (result >> 1) ^ -(result & 1), pos


def _need(data: bytes, pos: int, size: int, what: str) -> int:
    if size < 0:
        raise GuardError(f"negative {what} length {size}")
    end = pos + size
    if end > len(data):
        raise GuardError(f"truncated: {what} of {size} bytes, only {len(data) - pos} left")
    return end


class BinaryGuard:
    """A validating skipper for one (risky) writer schema. `check` raises `GuardError`."""

    def __init__(self, parsed: Any, named: dict[str, Any]) -> None:
        self._named = named
        self._compiled: dict[str, _Reader] = {}
        self._min_sizes: dict[str, int] = {}
        self._root = self._compile(parsed)

    @classmethod
    def for_schema(cls, parsed: Any, named: dict[str, Any]) -> BinaryGuard | None:
        """A guard if the schema is recursive or has zero-byte array items, else None."""
        if _is_risky(parsed, named):
            return cls(parsed, named)
        return None

    def check(self, data: bytes, pos: int = 0) -> int:
        """Walk one datum from `pos`; returns where it ends. Raises `GuardError`."""
        try:
            return self._root(data, pos, [0, MAX_EMPTY_ITEMS])
        except RecursionError:
            raise GuardError("the value is nested too deeply") from None

    # -- compilation -----------------------------------------------------------------------

    def _min_size(self, schema: Any, visiting: frozenset[str] = frozenset()) -> int:
        return _min_size(schema, self._named, visiting)

    def _compile(self, schema: Any) -> _Reader:
        if isinstance(schema, list):
            return self._union(schema)
        if isinstance(schema, str):
            if schema in _PRIMITIVE_MIN:
                return _PRIMITIVES[schema]
            return self._reference(schema)
        kind = schema["type"]
        if kind in ("record", "error"):
            return self._record(schema)
        if kind == "enum":
            return self._enum(schema)
        if kind == "fixed":
            return self._fixed(schema)
        if kind == "array":
            return self._array(schema)
        if kind == "map":
            return self._map(schema)
        return self._compile(kind)  # {"type": "long", "logicalType": ...} and the like

    def _lazy(self, name: str) -> _Reader:
        """A reader that finds the compiled type at call time (recursive types need this)."""
        compiled = self._compiled

        def read(data: bytes, pos: int, state: list[int]) -> int:
            return compiled[name](data, pos, state)

        return read

    def _reference(self, name: str) -> _Reader:
        if name not in self._compiled:
            if name not in self._named:
                raise GuardError(f"schema references unknown type {name!r}")
            self._compile(self._named[name])  # registers itself under its name
        return self._lazy(name)

    def _record(self, schema: dict[str, Any]) -> _Reader:
        name = schema.get("name")
        if name and name not in self._compiled:
            self._compiled[name] = self._lazy(name)  # placeholder while compiling the fields
        fields = [self._compile(f["type"]) for f in schema["fields"]]

        def read(data: bytes, pos: int, state: list[int]) -> int:
            state[0] += 1
            if state[0] > MAX_NESTING:
                raise GuardError(f"records nested deeper than {MAX_NESTING} levels")
            for field in fields:
                pos = field(data, pos, state)
            state[0] -= 1
            return pos

        if name:
            self._compiled[name] = read
        return read

    def _union(self, branches: list[Any]) -> _Reader:
        readers = [self._compile(b) for b in branches]
        count = len(readers)

        def read(data: bytes, pos: int, state: list[int]) -> int:
            index, pos = _varint(data, pos)
            if not 0 <= index < count:
                raise GuardError(f"union branch {index} does not exist (the union has {count})")
            return readers[index](data, pos, state)

        return read

    def _enum(self, schema: dict[str, Any]) -> _Reader:
        count = len(schema["symbols"])
        name = schema.get("name")

        def read(data: bytes, pos: int, state: list[int]) -> int:
            index, pos = _varint(data, pos)
            if not 0 <= index < count:
                raise GuardError(f"enum {name} has no symbol #{index}")
            return pos

        if name:
            self._compiled[name] = read
        return read

    def _fixed(self, schema: dict[str, Any]) -> _Reader:
        size = int(schema["size"])
        name = schema.get("name")

        def read(data: bytes, pos: int, state: list[int]) -> int:
            return _need(data, pos, size, "fixed")

        if name:
            self._compiled[name] = read
        return read

    def _blocks(self, item: _Reader, item_min: int, what: str) -> _Reader:
        def read(data: bytes, pos: int, state: list[int]) -> int:
            while True:
                count, pos = _varint(data, pos)
                if count == 0:
                    return pos
                if count < 0:
                    count = -count
                    size, pos = _varint(data, pos)
                    if size < 0:
                        raise GuardError(f"negative {what} block size {size}")
                if item_min:
                    if count * item_min > len(data) - pos:
                        raise GuardError(
                            f"{what} block declares {count} items, more than the "
                            f"{len(data) - pos} bytes left can hold"
                        )
                    for _ in range(count):
                        pos = item(data, pos, state)
                else:
                    state[1] -= count
                    if state[1] < 0:
                        raise GuardError(
                            f"more than {MAX_EMPTY_ITEMS} zero-byte {what} items in one message"
                        )
                    # Zero-byte items consume nothing, so one walk checks them all.
                    pos = item(data, pos, state)

        return read

    def _array(self, schema: dict[str, Any]) -> _Reader:
        items = schema["items"]
        return self._blocks(self._compile(items), self._min_size(items), "array")

    def _map(self, schema: dict[str, Any]) -> _Reader:
        value = self._compile(schema["values"])

        def entry(data: bytes, pos: int, state: list[int]) -> int:
            return value(data, _read_length_prefixed(data, pos, state), state)

        return self._blocks(entry, 1, "map")


def _read_length_prefixed(data: bytes, pos: int, state: list[int]) -> int:
    size, pos = _varint(data, pos)
    return _need(data, pos, size, "bytes/string")


def _read_null(data: bytes, pos: int, state: list[int]) -> int:
    return pos


def _read_boolean(data: bytes, pos: int, state: list[int]) -> int:
    return _need(data, pos, 1, "boolean")


def _read_number(data: bytes, pos: int, state: list[int]) -> int:
    return _varint(data, pos)[1]


def _read_float(data: bytes, pos: int, state: list[int]) -> int:
    return _need(data, pos, 4, "float")


def _read_double(data: bytes, pos: int, state: list[int]) -> int:
    return _need(data, pos, 8, "double")


_PRIMITIVES: dict[str, _Reader] = {
    "null": _read_null,
    "boolean": _read_boolean,
    "int": _read_number,
    "long": _read_number,
    "float": _read_float,
    "double": _read_double,
    "bytes": _read_length_prefixed,
    "string": _read_length_prefixed,
}


def _min_size(schema: Any, named: dict[str, Any], visiting: frozenset[str]) -> int:
    """A lower bound of the encoded size of any value of `schema` (0 for in-progress cycles)."""
    if isinstance(schema, list):
        return 1
    if isinstance(schema, str):
        if schema in _PRIMITIVE_MIN:
            return _PRIMITIVE_MIN[schema]
        if schema in visiting or schema not in named:
            return 0
        return _min_size(named[schema], named, visiting)
    kind = schema["type"]
    if kind in ("record", "error"):
        inner = visiting | {schema.get("name", "")}
        return sum(_min_size(f["type"], named, inner) for f in schema["fields"])
    if kind == "fixed":
        return int(schema["size"])
    if kind in ("enum", "array", "map"):
        return 1
    return _min_size(kind, named, visiting)


def _is_risky(schema: Any, named: dict[str, Any]) -> bool:
    """True if the schema is recursive or has an array of zero-byte items."""
    seen: set[str] = set()

    def walk(node: Any, path: frozenset[str]) -> bool:
        if isinstance(node, list):
            return any(walk(b, path) for b in node)
        if isinstance(node, str):
            if node in _PRIMITIVE_MIN:
                return False
            if node in path:
                return True  # recursion
            if node in seen or node not in named:
                return False
            return walk(named[node], path)
        kind = node["type"]
        if kind in ("record", "error"):
            name = node.get("name", "")
            if name in path:
                return True
            seen.add(name)
            inner = path | {name}
            return any(walk(f["type"], inner) for f in node["fields"])
        if kind == "array":
            if _min_size(node["items"], named, frozenset()) == 0:
                return True
            return walk(node["items"], path)
        if kind == "map":
            return walk(node["values"], path)
        if kind in ("enum", "fixed"):
            return False
        return walk(kind, path)

    return walk(schema, frozenset())


def nesting_exceeds(value: Any, limit: int = MAX_DATUM_DEPTH) -> bool:
    """True if dicts/lists/tuples nest deeper than `limit` (or contain themselves).

    Iterative, so it is safe on exactly the values it exists to reject: fastavro's compiled
    writer and validator would overflow the C stack on them.
    """
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False
