"""`DslComputation`: one fused chain of DSL operators run as a `Computation`.

The operator tree of a `SubTopology` is compiled once per computation instance into nested closures
(each operator calls the next directly), so a record costs one decode, one call per operator and
one encode per output, with no per-record interpretation of the tree. A node reached twice (after
a `merge` of two branches) is compiled once, so a `process` step after it has one processor and
one set of stores. A computation with a stream-table join reads several inputs (`i1` the
stream's source, `i2...` the tables' sources): each input's records enter their own tree, and the
trees share the computation's stores (a `join` step is a `process` step reading the table's).
A chain of stateless steps also has a batch form (`streamcore.computation.dsl_batch`), which the
runner uses for whole read batches when it can.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from streamcore.computation.computation import BatchFunction, Computation, ComputationContext
from streamcore.computation.dsl_batch import batch_function
from streamcore.computation.dsl_graph import OperatorNode, SubTopology
from streamcore.computation.dsl_process import BuiltinStep, ProcessStep, key_type_error, noted
from streamcore.computation.errors import DslDefinitionError, NotProcessingError
from streamcore.record import Flag, Record

__all__ = ["DslComputation"]

logger = logging.getLogger(__name__)

Emit = Callable[[str, Any], None]
_CONTROL = Flag.COMMIT | Flag.POISON_PILL
_PLAIN = Flag.DEFAULT
_new_record = tuple.__new__


def _fan_out(targets: list[Emit]) -> Emit:
    if len(targets) == 1:
        return targets[0]

    def fan(key: str, value: Any) -> None:
        for target in targets:
            target(key, value)

    return fan


def _not_running(output: str, record: Record) -> None:
    raise NotProcessingError("a DSL sink ran outside process_record")


class DslComputation(Computation):
    """Runs the operator tree of one `SubTopology` on each record of its input stream."""

    def __init__(self, subtopology: SubTopology) -> None:
        super().__init__(
            subtopology.name, inputs=1 + len(subtopology.joined), outputs=len(subtopology.outputs)
        )
        self.subtopology = subtopology
        self._produce: Callable[[str, Record], None] = _not_running
        self._context: ComputationContext | None = None  # whose produce_record `_produce` is
        self._watermark = 0
        self._record: Record | None = None  # the record the chain runs on (None: a timer)
        self._logical = {stream: f"o{i}" for i, stream in enumerate(subtopology.outputs, 1)}
        self._compiled: dict[int, Emit] = {}
        self._steps: list[ProcessStep] = []
        self._user_steps: list[ProcessStep] = []  # those that may punctuate on stream time
        # logical input -> (its stream, value decoder, the compiled tree of its source)
        self._inputs: dict[str, tuple[str, Callable[[bytes], Any], Emit]] = {}
        trees = [(subtopology.source, subtopology.codec, subtopology.root), *subtopology.joined]
        for i, (stream, codec, root) in enumerate(trees, 1):
            self._source = stream  # the stream the `process` steps compiled now read
            tree = _fan_out([self._compile(child) for child in root.children])
            self._inputs[f"i{i}"] = (stream, codec.decode, tree)
        self._batch: BatchFunction | None = None  # a chain of stateless steps: its batch form
        if not subtopology.joined:
            decoding = f"decoding a value of {subtopology.source!r} (DSL {self.metadata.name})"
            self._batch = batch_function(
                subtopology.root, subtopology.codec.decode, decoding, self._logical
            )
        logger.debug(
            "DSL computation %s: %s -> %s",
            subtopology.name,
            subtopology.source,
            ", ".join(subtopology.outputs),
        )

    @classmethod
    def supplier(cls, subtopology: SubTopology) -> Callable[[], DslComputation]:
        def supply() -> DslComputation:
            return cls(subtopology)

        supply.__qualname__ = f"DslComputation.supplier({subtopology.name!r})"
        return supply

    def _compile(self, node: OperatorNode) -> Emit:
        emit = self._compiled.get(id(node))
        if emit is None:
            emit = self._compiled[id(node)] = self._compile_node(node)
        return emit

    def _compile_node(self, node: OperatorNode) -> Emit:
        kind = node.kind
        if kind == "sink":
            return self._compile_sink(node)
        if kind == "branch":
            return self._compile_branch(node)
        nxt = _fan_out([self._compile(child) for child in node.children])
        if kind in ("arm", "merge"):
            return nxt
        if kind in ("process", "join"):
            return self._compile_process(node, nxt)
        fn = node.fn
        if kind == "filter":

            def filter_(key: str, value: Any) -> None:
                try:
                    keep = fn(key, value)
                except Exception as exc:
                    noted(exc, node)
                    raise
                if keep:
                    nxt(key, value)

            return filter_
        if kind == "map_values":

            def map_values(key: str, value: Any) -> None:
                try:
                    value = fn(value)
                except Exception as exc:
                    noted(exc, node)
                    raise
                nxt(key, value)

            return map_values
        if kind == "map":

            def map_(key: str, value: Any) -> None:
                try:
                    key, value = fn(key, value)
                except Exception as exc:
                    noted(exc, node)
                    raise
                nxt(key, value)

            return map_
        if kind == "flat_map":

            def flat_map(key: str, value: Any) -> None:
                try:
                    pairs = list(fn(key, value))
                except Exception as exc:
                    noted(exc, node)
                    raise
                for pair in pairs:
                    try:
                        k, v = pair
                    except Exception as exc:
                        noted(exc, node)
                        raise
                    nxt(k, v)

            return flat_map
        if kind == "flat_map_values":

            def flat_map_values(key: str, value: Any) -> None:
                try:
                    values = list(fn(value))
                except Exception as exc:
                    noted(exc, node)
                    raise
                for one in values:
                    nxt(key, one)

            return flat_map_values
        if kind == "peek":

            def peek(key: str, value: Any) -> None:
                try:
                    fn(key, value)
                except Exception as exc:
                    noted(exc, node)
                    raise
                nxt(key, value)

            return peek
        if kind == "select_key":

            def select_key(key: str, value: Any) -> None:
                try:
                    key = fn(key, value)
                except Exception as exc:
                    noted(exc, node)
                    raise
                nxt(key, value)

            return select_key
        raise DslDefinitionError(f"unknown DSL node kind {kind!r}")

    def _compile_process(self, node: OperatorNode, nxt: Emit) -> Emit:
        step = ProcessStep(node, self.metadata.name, self._source, nxt, len(self._steps))
        self._steps.append(step)
        if isinstance(step.processor, BuiltinStep):
            return step.processor.process  # it names its operator in its exceptions itself
        self._user_steps.append(step)

        def process(key: str, value: Any) -> None:
            try:
                step.process(self._record, key, value)
            except Exception as exc:
                noted(exc, node)
                raise

        return process

    def _compile_branch(self, node: OperatorNode) -> Emit:
        arms = list(zip(node.fn, [self._compile(arm) for arm in node.children], strict=True))

        def branch(key: str, value: Any) -> None:
            for predicate, arm in arms:
                try:
                    matched = predicate(key, value)
                except Exception as exc:
                    noted(exc, node)
                    raise
                if matched:
                    arm(key, value)
                    return

        return branch

    def _compile_sink(self, node: OperatorNode) -> Emit:
        output = self._logical[node.payload.stream]
        encode = node.codec.encode

        def sink(key: str, value: Any) -> None:
            if type(key) is not str:
                raise key_type_error(key, node)
            try:
                data = encode(value)
            except Exception as exc:
                noted(exc, node)
                raise
            if data.__class__ is bytes and key.isascii():
                # What Record() checks holds already (an ASCII str key, bytes, the watermark of
                # a decoded Record or 0): built without its checks, once per output.
                self._produce(
                    output, _new_record(Record, (key, data, self._watermark, _PLAIN, None))
                )
            else:
                self._produce(output, Record(key, data, self._watermark))

        return sink

    def batch_function(self, input_stream: str) -> BatchFunction | None:
        return self._batch if input_stream == "i1" else None

    def init(self, context: ComputationContext) -> None:
        for step in self._steps:
            step.init(context)

    def destroy(self) -> None:
        for step in self._steps:
            step.close()

    def process_record(
        self, context: ComputationContext, input_stream: str, record: Record
    ) -> None:
        if not record.data and record.flags & _CONTROL:
            return
        stream, decode, root = self._inputs[input_stream]
        try:
            value = decode(record.data)
        except Exception as exc:
            exc.add_note(f"decoding a value of {stream!r} (DSL {self.metadata.name})")
            raise
        if context is not self._context:  # a bound method made per record costs as much
            self._context, self._produce = context, context.produce_record
        self._watermark = record.watermark
        self._record = record
        root(record.key, value)
        for step in self._user_steps:
            if step.stream_interval_ms:
                step.start_stream_punctuation(context)
        context.ask_for_checkpoint()

    def process_timer(self, context: ComputationContext, key: str, timestamp_ms: int) -> None:
        """A punctuation of a `process` step: what it forwards runs down the chain with no input
        record; its outputs get watermark 0, which the runner replaces with the low watermark
        (as for records a `ProcessorComputation` sends in `punctuate`)."""
        if context is not self._context:
            self._context, self._produce = context, context.produce_record
        self._watermark = 0
        self._record = None
        for step in self._steps:
            try:
                if step.on_timer(context, key, timestamp_ms):
                    return
            except Exception as exc:
                noted(exc, step.node)
                raise
