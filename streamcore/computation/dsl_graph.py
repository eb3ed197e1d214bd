"""The graph a DSL definition builds, and its compile step into sub-topologies.

Each operator of a chain is an `OperatorNode`; a `through` links the sink that ends one chain to
the source that starts the next. `subtopologies` cuts a graph at those links: each piece is a
`SubTopology`, run as one `DslComputation` (`dsl_compile`). The user-facing `Stream` (`dsl`) and
the runtime (`dsl_compile`) both import this module and not each other.

A `join` node (a stream-table join, `dsl_join`) reads the store of a table whose chain starts at
another source: the two sources' trees are compiled into one computation with two inputs (the
stream's source first), so the table's store is written by the table side and read by the stream
side in the same task.

A `merge` node has two parents (it is a child of both), so a graph is a DAG: each source's
computation walks down into the merged chain, which is therefore compiled into the computation of
every source that reaches it (see `dsl`, "merge"). Shared nodes stay shared within one
computation (a record reaches a merge of two branches of one source once per path).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from streamcore.computation.errors import DslDefinitionError, UnfinishedStreamError
from streamcore.names import NO_NAMESPACE, Name
from streamcore.state.spec import StoreSpec

if TYPE_CHECKING:
    from streamcore.codecs import Codec

__all__ = [
    "OperatorNode",
    "SinkInfo",
    "SourceInfo",
    "SubTopology",
    "TableLookup",
    "computation_name_of",
    "subtopologies",
]


class OperatorNode:
    """One operator of a chain. Kinds: source, filter, map, map_values, flat_map,
    flat_map_values, peek, select_key, process (`fn` the processor supplier, `payload` its
    `StoreSpec`s), join (a process step whose `payload` is a `TableLookup`), branch, arm (one
    output of a branch), merge (`parent` the stream `merge` was called on, `payload` the other
    one; a child of both), sink."""

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
        """The chain that leads to this node, as code: `builder.stream('a').map(f)`. Sources
        and merges carry the whole chain before them in their label."""
        parts = []
        node: OperatorNode | None = self
        while node is not None:
            parts.append(node.label)
            node = node.parent if node.kind not in ("source", "merge") else None
        return "".join(reversed(parts))


@dataclass(frozen=True, slots=True)
class SourceInfo:
    """The payload of a source node: the stream it reads, its computation name if given."""

    stream: str
    name: str | None
    upstream: OperatorNode | None  # the `through` sink that feeds this source
    # A `group_by` repartition: the stream whose partition count this (internal) stream copies.
    copies: str | None = None


@dataclass(frozen=True, slots=True)
class SinkInfo:
    """The payload of a sink node: the stream it writes."""

    stream: str
    downstream: OperatorNode | None  # the source `through` starts


class TableLookup(tuple[StoreSpec, ...]):
    """The payload of a join node: the table's store (the one spec its step reaches, declared by
    the table's own step) and the table's node, whose source joins the computation."""

    table: OperatorNode

    def __new__(cls, spec: StoreSpec, table: OperatorNode) -> TableLookup:
        lookup = super().__new__(cls, (spec,))
        lookup.table = table
        return lookup


@dataclass(frozen=True)
class SubTopology:
    """One computation of a compiled DSL graph: its name, its input stream and value codec,
    its output streams (logical `o1..oN` in this order), the root of its operator tree, the
    state stores its `process` steps declare, the internal streams it reads with the stream
    whose partition count each copies, and the other sources a join brings in (logical `i2..`,
    each `(stream, value codec, root)`)."""

    name: str
    source: str
    codec: Codec[Any]
    outputs: tuple[str, ...]
    root: OperatorNode
    stores: tuple[StoreSpec, ...] = ()
    copies: tuple[tuple[str, str], ...] = ()
    joined: tuple[tuple[str, Codec[Any], OperatorNode], ...] = ()


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


@dataclass
class _Walk:
    """What `_walk` finds under a root."""

    sinks: list[OperatorNode]
    downstream: list[OperatorNode]  # sources `through` starts
    merged: list[OperatorNode]  # origins of the streams merged into this tree
    steps: list[OperatorNode]  # process steps
    joined: list[OperatorNode]  # sources of the tables joined in this tree


def _source_of(node: OperatorNode) -> OperatorNode:
    """The source starting `node`'s chain (not following `through` upstream)."""
    while node.kind != "source":
        assert node.parent is not None
        node = node.parent
    return node


def _walk(root: OperatorNode) -> _Walk:
    """What the tree under `root` holds; raises on dead ends (a `process` may end a chain)."""
    found = _Walk([], [], [], [], [])
    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if node.kind == "sink":
            found.sinks.append(node)
            if node.payload.downstream is not None:
                found.downstream.append(node.payload.downstream)
            continue
        if node.kind == "merge":
            assert node.parent is not None
            found.merged += [_origin(node.parent), _origin(node.payload)]
        elif node.kind == "process":
            found.steps.append(node)
        elif node.kind == "join":
            found.joined.append(_source_of(node.payload.table))
        if not node.children and node.kind != "process":
            raise UnfinishedStreamError(
                f"{node.chain()} has no sink: end it with .to('<stream>') or .through(...), "
                "or remove it (a branch you don't need: drop its predicate)"
            )
        stack.extend(reversed(node.children))
    return found


def _stores(steps: list[OperatorNode]) -> tuple[StoreSpec, ...]:
    """The stores the `process` steps of one computation declare. Two steps declaring one name
    are refused rather than made to share a store: two `count()`s left to their default store
    name would otherwise count each record twice."""
    specs: dict[str, tuple[StoreSpec, OperatorNode]] = {}
    for step in steps:
        for spec in step.payload:
            first = specs.setdefault(spec.name, (spec, step))
            if first[1] is not step:
                raise DslDefinitionError(
                    f"{step.chain()}: state store {spec.name!r} is also declared by "
                    f"{first[1].chain()}, in the same computation; give each step's store its "
                    "own name"
                )
    return tuple(spec for spec, _ in specs.values())


def _snapshot(
    node: OperatorNode,
    parent: OperatorNode | None = None,
    copies: dict[int, OperatorNode] | None = None,
) -> OperatorNode:
    """A copy of the tree under `node` (a node reached twice, after a merge, copied once):
    operators added after `build()` don't change a topology that was built already."""
    copies = {} if copies is None else copies
    copy = copies.get(id(node))
    if copy is not None:
        if parent is not None:
            parent.children.append(copy)
        return copy
    copy = OperatorNode(node.kind, parent, node.codec, node.label, node.fn, node.payload)
    copies[id(node)] = copy
    for child in node.children:
        _snapshot(child, copy, copies)
    return copy


def computation_name_of(node: OperatorNode) -> str:
    """The name of the computation `node`'s chain compiles to: its source's `name=`, else the
    default `<source>-dsl` (`subtopologies` adds `-2`, `-3` ... when one build reads a stream
    several times without names)."""
    while node.kind != "source":
        assert node.parent is not None
        node = node.parent
    info: SourceInfo = node.payload
    return info.name or _default_name(info.stream, set())


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
    pending: list[OperatorNode] = []
    for node in nodes:
        origin = _origin(node)
        if not any(origin is r for r in pending):
            pending.append(origin)
    walked: list[tuple[OperatorNode, _Walk]] = []
    done: set[int] = set()
    while pending:
        root = pending.pop(0)
        if id(root) in done:
            continue
        done.add(id(root))
        found = _walk(root)
        walked.append((root, found))
        pending.extend(found.downstream)
        pending.extend(found.merged)
        pending.extend(found.joined)
    _check_repartitions(walked)
    hosts = _join_hosts(walked)
    _check_stateful_merges(walked, hosts)
    explicit = [root.payload.name for root, _ in walked if root.payload.name]
    taken = set(explicit)
    for name in explicit:
        if explicit.count(name) > 1:
            raise DslDefinitionError(
                f"two computations of this build are named {name!r}; give each a distinct "
                "name= (it is also the consumer group)"
            )
    out = []
    for root, found in walked:
        if id(root) in hosts:
            continue  # a joined table's source: compiled into its host's computation
        info: Any = root.payload
        name = info.name or _default_name(info.stream, taken)
        taken.add(name)
        parts = [(root, found)] + [(r, f) for r, f in walked if hosts.get(id(r)) is root]
        sinks = [s for _, f in parts for s in f.sinks]
        outputs = tuple(dict.fromkeys(s.payload.stream for s in sinks))
        stores = _stores([step for _, f in parts for step in f.steps])
        copies = tuple((r.payload.stream, r.payload.copies) for r, _ in parts if r.payload.copies)
        # One snapshot of all the trees: a node they share (the merge after a stream-stream
        # join) stays one node, compiled once.
        shared: dict[int, OperatorNode] = {}
        tree = _snapshot(root, None, shared)
        joined = tuple(
            (r.payload.stream, r.codec, _snapshot(r, None, shared)) for r, _ in parts[1:]
        )
        out.append(
            SubTopology(name, info.stream, root.codec, outputs, tree, stores, copies, joined)
        )
    return out


def _join_hosts(walked: list[tuple[OperatorNode, _Walk]]) -> dict[int, OperatorNode]:
    """For the source of each joined table, the source of the stream joining it: the table's
    tree runs in that stream's computation (one computation reads both, so one task holds the
    store and sees both sides of a key)."""
    hosts: dict[int, OperatorNode] = {}
    for root, found in walked:
        for table in found.joined:
            if table is root:
                continue  # a table of the stream's own source: in its computation already
            first = hosts.setdefault(id(table), root)
            if first is not root:
                raise DslDefinitionError(
                    f"the table of {table.chain()} is joined by streams of two computations, "
                    f"{first.chain()} and {root.chain()}; join a table from one computation "
                    "(merge the streams first) or build one table per stream"
                )
            if table.payload.stream == root.payload.stream:
                raise DslDefinitionError(
                    f"{root.chain()} joins a table of the same stream {root.payload.stream!r} "
                    "read by another builder.stream(...); build the table from the same "
                    "Stream (stream.to_table()) so one computation reads it once"
                )
            if table.payload.name:
                raise DslDefinitionError(
                    f"{table.chain()}: name={table.payload.name!r} is not used: the table is "
                    f"joined by {root.chain()} and runs in that stream's computation; give "
                    "name= to the stream's source instead"
                )
    for root, found in walked:
        if id(root) in hosts and (found.joined or any(h is root for h in hosts.values())):
            raise DslDefinitionError(
                f"{root.chain()}: a joined table's chain joins another table itself; join the "
                "tables in separate computations (write one side .through(...) first)"
            )
    return hosts


def _check_stateful_merges(
    walked: list[tuple[OperatorNode, _Walk]], hosts: dict[int, OperatorNode]
) -> None:
    """A `process` step with stores after a merge of two sources would run in both sources'
    computations, each with its own store: the state of one key would be split in two (not
    when a join puts both sources in one computation)."""
    reached: dict[int, OperatorNode] = {}
    for root, found in walked:
        host = hosts.get(id(root), root)
        for step in found.steps:
            if not step.payload:
                continue
            first = reached.get(id(step))
            if first is not None and hosts.get(id(first), first) is not host:
                raise DslDefinitionError(
                    f"{step.chain()}: this step keeps state stores but follows a merge of the "
                    f"streams {reached[id(step)].payload.stream!r} and {root.payload.stream!r}, "
                    "which run as two computations, each with its own stores; write the merged "
                    "stream .through('<stream>') first, then .process(...) reads one stream"
                )
            reached[id(step)] = root


def _check_repartitions(walked: list[tuple[OperatorNode, _Walk]]) -> None:
    """Each `group_by` needs a repartition stream of its own: two computations reading one would
    each get the records of both."""
    readers: dict[str, OperatorNode] = {}
    for root, _ in walked:
        info: SourceInfo = root.payload
        first = readers.setdefault(info.stream, root)
        if first is not root and (info.copies or first.payload.copies):
            raise DslDefinitionError(
                f"{root.chain()} and {first.chain()} both read the repartition stream "
                f"{info.stream!r}; give each group_by of one computation its own "
                "name= (the stream is <computation>-<name>-repartition)"
            )
