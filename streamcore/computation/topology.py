"""`Topology`: computations wired to streams by `i1:`/`o1:` mappings (Nuxeo's `Topology`).

    topology = (
        Topology.builder()
        .add_computation(Parse, ["i1:app/raw", "o1:app/parsed"])
        .add_computation(Route, ["i1:app/parsed", "o1:app/good", "o2:app/bad"])
        .build()
    )

`build()` checks the wiring: every logical stream of a computation is mapped exactly once and
exists in its metadata, computation names are unique, stream names are valid, and the graph of
computations and streams has no cycle. Each problem is a `TopologyError` naming the fix.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Self

from streamcore.computation.computation import Computation, ComputationMetadata
from streamcore.errors import TopologyError
from streamcore.names import Name

if TYPE_CHECKING:
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


class TopologyBuilder:
    def __init__(self) -> None:
        self._nodes: dict[str, _WiredComputation] = {}

    def add_computation(self, supplier: Supplier, mapping: Sequence[str]) -> Self:
        """Add the computation `supplier()` makes, its logical streams mapped by `mapping`
        (e.g. `["i1:app/in", "o1:app/out"]`). The supplier is called once here to read the
        metadata and again for each concurrency unit."""
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
        if meta.name in self._nodes:
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
                    f"computation {meta.name!r}: {logical}:{stream} is not a valid stream name "
                    f"({exc})"
                ) from None
        missing = [x for x in (*meta.inputs, *meta.outputs) if x not in inputs and x not in outputs]
        if missing:
            raise TopologyError(
                f"computation {meta.name!r}: {', '.join(missing)} not mapped; add e.g. "
                f"'{missing[0]}:namespace/stream' to its mapping"
            )
        self._nodes[meta.name] = _WiredComputation(
            supplier,
            meta,
            {x: inputs[x] for x in meta.inputs},
            {x: outputs[x] for x in meta.outputs},
        )
        return self

    def build(self) -> Topology:
        if not self._nodes:
            raise TopologyError("a topology needs at least one computation; add_computation first")
        _check_acyclic(self._nodes)
        return Topology(dict(self._nodes))


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

    def __init__(self, nodes: dict[str, _WiredComputation]) -> None:
        self._nodes = nodes

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
