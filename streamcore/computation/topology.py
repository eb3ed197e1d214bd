"""`Topology`: computations wired to streams by `i1:`/`o1:` mappings (Nuxeo's `Topology`), and
`TopologyBuilder`, the one surface that registers them (Kafka Streams' `StreamsBuilder`).

    builder = (
        Topology.builder()
        .add_computation(Parse, ["i1:app/raw", "o1:app/parsed"])
        .add_processor("app/dedup", Dedup, inputs=["app/parsed"], outputs=["app/unique"])
    )
    builder.stream("app/unique", codec="json").filter(is_valid).to("app/good")
    topology = builder.build()

A builder registers three kinds of computation, each method returning the builder except
`stream`, which returns the `Stream` to chain DSL operators on: `add_computation` (a
`Computation` subclass), `add_processor` (a KIP-28 `Processor`), and `stream` (the DSL, whose
chains are compiled into computations when the builder builds). A DSL graph's computations take
the place of its first `stream` call among the others.

`build()` checks the wiring: every logical stream of a computation is mapped exactly once and
exists in its metadata, computation names are unique, stream names are valid, and the graph of
computations and streams has no cycle. Each problem is a `TopologyError` naming the fix.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Self

from streamcore.computation.computation import Computation, ComputationMetadata
from streamcore.computation.dsl import Stream, compile_streams, source
from streamcore.computation.dsl_compile import DslComputation
from streamcore.computation.processor import Processor, wire_processor
from streamcore.errors import StreamcoreError, TopologyError
from streamcore.names import Name
from streamcore.state.changelog import changelog_name
from streamcore.state.spec import StoreSpec

if TYPE_CHECKING:
    from streamcore.computation.dsl_aggregate import Table
    from streamcore.computation.dsl_values import ValueCodecSpec
    from streamcore.computation.settings import Settings

__all__ = ["Topology", "TopologyBuilder"]

Supplier = Callable[[], Computation]


@dataclass(frozen=True)
class _WiredComputation:
    """A computation of a topology: how to make it, what it declares, and its streams."""

    supplier: Supplier
    metadata: ComputationMetadata
    inputs: dict[str, str]  # logical -> stream URN, in logical order
    outputs: dict[str, str]
    stores: tuple[StoreSpec, ...] = ()


class TopologyBuilder:
    """Registers computations, processors and DSL streams; `build()` checks and freezes them.
    Every method but `stream` returns the builder, so calls chain."""

    def __init__(self) -> None:
        self._nodes: dict[str, _WiredComputation] = {}
        self._streams: list[Stream] = []  # DSL sources, compiled by build()
        self._dsl_at: int | None = None  # where the DSL's computations go among the others

    def add_computation(
        self,
        supplier: Supplier,
        mapping: Sequence[str],
        *,
        stores: Sequence[str | StoreSpec] = (),
    ) -> Self:
        """Add the computation `supplier()` makes, its logical streams mapped by `mapping`
        (e.g. `["i1:app/in", "o1:app/out"]`). The supplier is called once here to read the
        metadata and again for each concurrency unit. `stores`: the state stores it uses (names
        of JSON stores, or `StoreSpec`s), one per task, reached with
        `context.get_state_store(name)` (docs/state.md)."""
        node = _wire(supplier, mapping, self._nodes)
        _add(self._nodes, _with_stores(node, stores))
        return self

    def add_processor(
        self,
        name: str,
        processor: Callable[[], Processor],
        *,
        inputs: Sequence[str],
        outputs: Sequence[str] = (),
        codec: ValueCodecSpec = "bytes",
        schema: Any = None,
        codecs: Mapping[str, ValueCodecSpec] | None = None,
        auto_commit: bool = True,
        stores: Sequence[str | StoreSpec] = (),
    ) -> Self:
        """Add the processor made by `processor()` (a `Processor` subclass or factory; one
        instance per thread) as computation `name` reading `inputs` and sending to `outputs`.
        Values use `codec` (with `schema` for Avro), or `codecs[stream]` (a codec name or a
        `Codec`) for the streams listed there.

        `auto_commit=True` (Kafka Streams' behaviour) checkpoints after the records a processor
        handled, once per read batch. A processor that keeps state in memory across records (and
        emits it later, e.g. in `punctuate`) passes `auto_commit=False` and calls
        `context.commit()` once what it holds has been sent, so a crash re-delivers what it had
        not emitted yet. `stores`: its state stores (see `add_computation`), reached with
        `context.get_state_store(name)`."""
        supplier, mapping = wire_processor(
            name,
            processor,
            inputs=inputs,
            outputs=outputs,
            codec=codec,
            schema=schema,
            codecs=codecs,
            auto_commit=auto_commit,
        )
        return self.add_computation(supplier, mapping, stores=stores)

    def stream(
        self,
        stream: str,
        *,
        codec: ValueCodecSpec = "bytes",
        schema: Any = None,
        name: str | None = None,
    ) -> Stream:
        """The records of `stream` as a DSL `Stream`, values decoded with `codec` (`"bytes"`,
        `"json"`, an Avro mode with `schema=`, or a Codec); `name` overrides the computation
        name. Chain operators on it and end each chain with `.to()` or `.through()`; `build()`
        compiles them (see `streamcore.computation.dsl`)."""
        dsl = source(stream, codec=codec, schema=schema, name=name)
        if self._dsl_at is None:
            self._dsl_at = len(self._nodes)
        self._streams.append(dsl)
        return dsl

    def table(
        self,
        stream: str,
        *,
        codec: ValueCodecSpec = "bytes",
        schema: Any = None,
        name: str | None = None,
        store: str | StoreSpec | None = None,
    ) -> Table:
        """The records of `stream` (a key-compacted one, typically) as a DSL `Table`: the latest
        value per key in the state store `store` (default `table`), None deleting a key
        (`stream(...).to_table()`; docs/aggregations.md)."""
        return self.stream(stream, codec=codec, schema=schema, name=name).to_table(store=store)

    def build(self) -> Topology:
        """The checked `Topology` of everything registered; the builder stays usable, and what
        is added to it afterwards does not change a topology built already."""
        wired = list(self._nodes.values())
        copies: dict[str, str] = {}
        if self._streams:
            dsl: dict[str, _WiredComputation] = {}
            for sub in compile_streams(self._streams):
                sources = [sub.source, *(stream for stream, _, _ in sub.joined)]
                mapping = [f"i{i}:{stream}" for i, stream in enumerate(sources, 1)]
                mapping += [f"o{i}:{stream}" for i, stream in enumerate(sub.outputs, 1)]
                node = _wire(DslComputation.supplier(sub), mapping, dsl)
                _add(dsl, _with_stores(node, sub.stores))
                copies.update(sub.copies)
            at = len(wired) if self._dsl_at is None else self._dsl_at
            wired[at:at] = dsl.values()
        nodes: dict[str, _WiredComputation] = {}
        for node in wired:
            _add(nodes, node)  # a DSL computation may take a hand-written one's name
        if not nodes:
            raise TopologyError(
                "a topology needs at least one computation; add_computation, add_processor or "
                "stream first"
            )
        _check_acyclic(nodes)
        return Topology(nodes, copies)


def _wire(
    supplier: Supplier, mapping: Sequence[str], nodes: Mapping[str, _WiredComputation]
) -> _WiredComputation:
    """The computation `supplier` makes with its streams mapped by `mapping`, checked (its name
    against those of `nodes`)."""
    if not callable(supplier):
        raise TopologyError(
            f"add_computation needs a supplier (a class or function returning a Computation), "
            f"got {supplier!r}"
        )
    if isinstance(mapping, str):
        raise TopologyError(
            f"mapping must be a list of 'i1:stream' / 'o1:stream' entries, got the string "
            f"{mapping!r}; wrap it in a list"
        )
    computation = supplier()
    if not isinstance(computation, Computation):
        raise TopologyError(
            f"supplier {supplier!r} returned {type(computation).__name__}, not a Computation"
        )
    meta = computation.metadata
    if meta.name in nodes:
        raise TopologyError(
            f"duplicate computation name {meta.name!r}: each computation of a topology needs "
            "its own name (it is also its consumer group)"
        )
    inputs: dict[str, str] = {}
    outputs: dict[str, str] = {}
    for entry in mapping:
        logical, sep, stream = str(entry).partition(":")
        if not sep or not stream:
            raise TopologyError(
                f"computation {meta.name!r}: bad mapping entry {entry!r}; write it as "
                "'i1:namespace/stream' or 'o1:namespace/stream'"
            )
        if logical in meta.inputs:
            target = inputs
        elif logical in meta.outputs:
            target = outputs
        else:
            raise TopologyError(
                f"computation {meta.name!r} has no stream {logical!r} (it declares inputs "
                f"{list(meta.inputs)} and outputs {list(meta.outputs)}); fix the mapping or "
                "the inputs/outputs counts of the computation"
            )
        if logical in target:
            raise TopologyError(
                f"computation {meta.name!r}: {logical!r} is mapped twice in {list(mapping)}"
            )
        try:
            target[logical] = Name.of(stream).urn
        except ValueError as exc:
            raise TopologyError(
                f"computation {meta.name!r}: {logical}:{stream} is not a valid stream name ({exc})"
            ) from None
    missing = [x for x in (*meta.inputs, *meta.outputs) if x not in inputs and x not in outputs]
    if missing:
        raise TopologyError(
            f"computation {meta.name!r}: {', '.join(missing)} not mapped; add e.g. "
            f"'{missing[0]}:namespace/stream' to its mapping"
        )
    return _WiredComputation(
        supplier,
        meta,
        {x: inputs[x] for x in meta.inputs},
        {x: outputs[x] for x in meta.outputs},
    )


def _with_stores(node: _WiredComputation, stores: Sequence[str | StoreSpec]) -> _WiredComputation:
    """`node` with its state stores, checked: unique names, and inputs to form tasks from."""
    if isinstance(stores, str | StoreSpec):
        stores = [stores]
    specs = tuple(StoreSpec.of(s) for s in stores)
    if not specs:
        return node
    name = node.metadata.name
    seen: set[str] = set()
    for spec in specs:
        if spec.name in seen:
            raise TopologyError(
                f"computation {name!r} declares the state store {spec.name!r} twice; give each "
                "store its own name"
            )
        seen.add(spec.name)
    if not node.inputs:
        raise TopologyError(
            f"computation {name!r} has state stores but no input stream: a store belongs to a "
            "task, and tasks are formed from the input partitions (docs/state.md); keep state "
            "of a source elsewhere"
        )
    for spec in specs:
        try:
            changelog_name(name, spec.name)
        except StreamcoreError as exc:
            raise TopologyError(f"computation {name!r}, state store {spec.name!r}: {exc}") from None
    return dataclasses.replace(node, stores=specs)


def _add(nodes: dict[str, _WiredComputation], node: _WiredComputation) -> None:
    name = node.metadata.name
    if name in nodes:
        raise TopologyError(
            f"duplicate computation name {name!r}: each computation of a topology needs "
            "its own name (it is also its consumer group)"
        )
    nodes[name] = node


def _check_acyclic(nodes: dict[str, _WiredComputation]) -> None:
    readers: dict[str, list[str]] = {}
    for name, node in nodes.items():
        for stream in node.inputs.values():
            readers.setdefault(stream, []).append(name)
    done: set[str] = set()
    path: list[str] = []
    on_path: set[str] = set()

    def visit(name: str) -> None:
        if name in done:
            return
        if name in on_path:
            cycle = [*path[path.index(name) :], name]
            raise TopologyError(
                "the topology has a cycle: "
                + " -> ".join(cycle)
                + "; computations must form a DAG (send results back through a separate stream "
                "read by another processor, or break the loop)"
            )
        on_path.add(name)
        path.append(name)
        for stream in nodes[name].outputs.values():
            for reader in readers.get(stream, ()):
                visit(reader)
        path.pop()
        on_path.discard(name)
        done.add(name)

    for name in nodes:
        visit(name)


class Topology:
    """An immutable, checked DAG of computations and streams; build it with `Topology.builder()`."""

    def __init__(
        self, nodes: dict[str, _WiredComputation], copies: Mapping[str, str] | None = None
    ) -> None:
        self._nodes = nodes
        self._copies = dict(copies or {})

    @staticmethod
    def builder() -> TopologyBuilder:
        return TopologyBuilder()

    def _node(self, name: str) -> _WiredComputation:
        try:
            return self._nodes[name]
        except KeyError:
            raise TopologyError(
                f"no computation {name!r} in this topology (it has {', '.join(self._nodes)})"
            ) from None

    def computation_names(self) -> list[str]:
        """Computation names, in the order they were added."""
        return list(self._nodes)

    def streams(self) -> list[str]:
        """Every stream (URN) read or written, in order of first mention."""
        seen: dict[str, None] = {}
        for node in self._nodes.values():
            seen.update(dict.fromkeys(node.inputs.values()))
            seen.update(dict.fromkeys(node.outputs.values()))
        return list(seen)

    def metadata(self, name: str) -> ComputationMetadata:
        return self._node(name).metadata

    def supplier(self, name: str) -> Supplier:
        return self._node(name).supplier

    def input_streams(self, name: str) -> list[str]:
        return list(self._node(name).inputs.values())

    def output_streams(self, name: str) -> list[str]:
        return list(self._node(name).outputs.values())

    def input_mapping(self, name: str) -> dict[str, str]:
        """Logical input name -> stream URN."""
        return dict(self._node(name).inputs)

    def output_mapping(self, name: str) -> dict[str, str]:
        """Logical output name -> stream URN."""
        return dict(self._node(name).outputs)

    def stores(self, name: str) -> tuple[StoreSpec, ...]:
        """The state stores computation `name` declared (docs/state.md)."""
        return self._node(name).stores

    def partitions_copied_from(self, stream: str) -> str | None:
        """The stream whose partition count the internal stream `stream` is created with (a
        DSL `group_by`'s repartition stream copies its input's), None for other streams."""
        return self._copies.get(Name.of(stream).urn)

    def is_source(self, name: str) -> bool:
        return not self._node(name).inputs

    def readers(self, stream: str) -> list[str]:
        """Computations reading `stream`."""
        urn = Name.of(stream).urn
        return [n for n, node in self._nodes.items() if urn in node.inputs.values()]

    def to_mermaid(self, settings: Settings | None = None) -> str:
        """The topology as a Mermaid flowchart (streams as stadiums, computations as boxes),
        with partitions, concurrency and dead-letter streams when `settings` are given."""
        ids: dict[str, str] = {}

        def node_id(kind: str, name: str) -> str:
            key = f"{kind}:{name}"
            if key not in ids:
                ids[key] = f"{kind}{len(ids)}"
            return ids[key]

        lines = ["flowchart LR"]
        for stream in self.streams():
            label = stream
            if settings is not None:
                label += f"<br/>partitions: {settings.partitions(stream)}"
            lines.append(f'  {node_id("s", stream)}(["{label}"])')
        for name in self._nodes:
            label = name
            if settings is not None:
                label += f"<br/>concurrency: {settings.concurrency(name)}"
            lines.append(f'  {node_id("c", name)}["{label}"]')
        for name, node in self._nodes.items():
            cid = node_id("c", name)
            for logical, stream in node.inputs.items():
                lines.append(f"  {node_id('s', stream)} -->|{logical}| {cid}")
            for logical, stream in node.outputs.items():
                lines.append(f"  {cid} -->|{logical}| {node_id('s', stream)}")
            if settings is not None and settings.policy(name).dlq is not None:
                dlq = Name.of(settings.policy(name).dlq or "").urn
                lines.append(f'  {node_id("s", dlq)}(["{dlq}"])')
                lines.append(f"  {cid} -.->|dlq| {node_id('s', dlq)}")
        return "\n".join(lines) + "\n"

    def __repr__(self) -> str:
        return f"Topology({', '.join(self._nodes)})"
