"""The graph a DSL definition builds, and its compile step into sub-topologies.

Each operator of a chain is an `OperatorNode`; a `through` links the sink that ends one chain to
the source that starts the next. `subtopologies` cuts a graph at those links: each piece is a
`SubTopology`, run as one `DslComputation` (`dsl_compile`). The user-facing `Stream` (`dsl`) and
the runtime (`dsl_compile`) both import this module and not each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from streamcore.computation.errors import DslDefinitionError, UnfinishedStreamError
from streamcore.names import NO_NAMESPACE, Name

if TYPE_CHECKING:
    from streamcore.codecs import Codec

__all__ = ["OperatorNode", "SinkInfo", "SourceInfo", "SubTopology", "subtopologies"]


class OperatorNode:
    """One operator of a chain. Kinds: source, filter, map, map_values, flat_map, branch, arm
    (one output of a branch), sink."""

    __slots__ = ("children", "codec", "fn", "kind", "label", "parent", "payload")

    def __init__(
        self,
        kind: str,
        parent: OperatorNode | None,
        codec: Codec[Any],
        label: str,
        fn: Any = None,
        payload: Any = None,
    ) -> None:
        self.kind = kind
        self.parent = parent
        self.codec = codec
        self.label = label
        self.fn = fn
        self.payload = payload
        self.children: list[OperatorNode] = []
        if parent is not None:
            parent.children.append(self)

    def chain(self) -> str:
        """The chain that leads to this node, as code: `builder.stream('a').map(f)`."""
        parts = []
        node: OperatorNode | None = self
        while node is not None:
            parts.append(node.label)
            node = node.parent if node.kind != "source" else None
        return "".join(reversed(parts))


@dataclass(frozen=True, slots=True)
class SourceInfo:
    """The payload of a source node: the stream it reads, its computation name if given."""

    stream: str
    name: str | None
    upstream: OperatorNode | None  # the `through` sink that feeds this source


@dataclass(frozen=True, slots=True)
class SinkInfo:
    """The payload of a sink node: the stream it writes."""

    stream: str
    downstream: OperatorNode | None  # the source `through` starts


@dataclass(frozen=True)
class SubTopology:
    """One computation of a compiled DSL graph: its name, its input stream and value codec,
    its output streams (logical `o1..oN` in this order), and the root of its operator tree."""

    name: str
    source: str
    codec: Codec[Any]
    outputs: tuple[str, ...]
    root: OperatorNode


def _origin(node: OperatorNode) -> OperatorNode:
    """The first source of the graph `node` belongs to (following `through` upstream)."""
    while True:
        while node.kind != "source":
            assert node.parent is not None
            node = node.parent
        upstream = node.payload.upstream
        if upstream is None:
            return node
        node = upstream


def _walk(root: OperatorNode) -> tuple[list[OperatorNode], list[OperatorNode]]:
    """(sinks, sources started by `through`) of the tree under `root`; raises on dead ends."""
    sinks, downstream = [], []
    stack = [root]
    while stack:
        node = stack.pop()
        if node.kind == "sink":
            sinks.append(node)
            if node.payload.downstream is not None:
                downstream.append(node.payload.downstream)
            continue
        if not node.children:
            raise UnfinishedStreamError(
                f"{node.chain()} has no sink: end it with .to('<stream>') or .through(...), "
                "or remove it (a branch you don't need: drop its predicate)"
            )
        stack.extend(reversed(node.children))
    return sinks, downstream


def _snapshot(node: OperatorNode, parent: OperatorNode | None = None) -> OperatorNode:
    """A copy of the tree under `node`: operators added after `build()` don't change a topology
    that was built already."""
    copy = OperatorNode(node.kind, parent, node.codec, node.label, node.fn, node.payload)
    for child in node.children:
        _snapshot(child, copy)
    return copy


def _default_name(stream: str, taken: set[str]) -> str:
    name = Name.of(stream)
    sep = "_" if name.namespace == NO_NAMESPACE else "-"
    base = f"{stream}{sep}dsl"
    candidate, n = base, 1
    while candidate in taken:
        n += 1
        candidate = f"{base}{sep}{n}"
    return candidate


def subtopologies(*nodes: OperatorNode) -> list[SubTopology]:
    """The computations the graphs of `nodes` (any node of each graph) compile to, in
    definition order. Raises `UnfinishedStreamError` for a chain without a sink."""
    roots: list[OperatorNode] = []
    for node in nodes:
        origin = _origin(node)
        if not any(origin is r for r in roots):
            roots.append(origin)
    pending = list(roots)
    walked: list[tuple[OperatorNode, list[OperatorNode]]] = []
    while pending:
        root = pending.pop(0)
        sinks, downstream = _walk(root)
        walked.append((root, sinks))
        pending.extend(downstream)
    explicit = [root.payload.name for root, _ in walked if root.payload.name]
    taken = set(explicit)
    for name in explicit:
        if explicit.count(name) > 1:
            raise DslDefinitionError(
                f"two computations of this build are named {name!r}; give each a distinct "
                "name= (it is also the consumer group)"
            )
    out = []
    for root, sinks in walked:
        info: Any = root.payload
        name = info.name or _default_name(info.stream, taken)
        taken.add(name)
        outputs = tuple(dict.fromkeys(s.payload.stream for s in sinks))
        out.append(SubTopology(name, info.stream, root.codec, outputs, _snapshot(root)))
    return out
