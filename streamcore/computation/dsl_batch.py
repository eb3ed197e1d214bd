"""The batch-at-a-time form of a DSL chain made only of stateless built-in steps.

`DslComputation` runs a record down its chain of nested closures, one Python call per operator
per record. For a chain of `filter`, `map_values`, `map`, `flat_map`, `flat_map_values`,
`select_key`, `branch` and `to` steps this module compiles a second form that takes a whole read
batch through each step in one loop, builds each output's Records in one loop and hands them to
the runner per output stream: the framework's own calls are per batch and step, not per record
(the user's functions are still called once per record).

The two forms produce the same records in the same order per output stream: each step keeps its
input's order, a `branch` sends each record to the arm of its first matching predicate as the
per-record form does, and a chain whose outputs could interleave (two sinks to one stream, a
`merge`) is not compiled. A failure stops the batch form with nothing produced and reports which
record failed and with what exception, noted as the per-record form notes it; the runner then
processes that batch record by record, handing the reported failure to the policy as that
record's first attempt (retries, dead letters, skip as before). What differs is only the order of
the user's calls across records and steps (step by step rather than record by record), and, in a
batch with a failure, the calls made for its other records, which the per-record pass makes
again: seen only by a function with side effects, which is why `peek`, whose point is a side
effect, keeps the per-record form.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from streamcore.computation.computation import BatchFunction, BatchOutcome, Produced
from streamcore.computation.dsl_graph import OperatorNode
from streamcore.computation.dsl_process import key_type_error, noted
from streamcore.record import Flag, Record

__all__ = ["batch_function"]

Item = tuple[str, Any, int, int]  # key, value, and the watermark and index of its input record
Stage = Callable[[list[Item]], Produced]

_PLAIN = Flag.DEFAULT
_new_record = tuple.__new__
_STATELESS = frozenset(("filter", "map_values", "map", "flat_map", "flat_map_values", "select_key"))


def batch_function(
    root: OperatorNode, decode: Callable[[bytes], Any], decoding: str, logical: dict[str, str]
) -> BatchFunction | None:
    """The batch form of the chain under `root` (its source), or None when a step has no batch
    form or two sinks write one stream. `decoding`: the note a value that does not decode gets;
    `logical`: stream name -> logical output ("o1"...)."""
    sinks: list[str] = []
    failing = [-1]  # the index in its batch of the record that failed
    stage = _children(root, logical, sinks, failing)
    if stage is None or len(set(sinks)) != len(sinks):
        return None

    def run(records: list[Record]) -> BatchOutcome:
        items: list[Item] = []
        append = items.append
        i = -1
        try:
            for i, record in enumerate(records):
                append((record.key, decode(record.data), record.watermark, i))
        except Exception as exc:
            exc.add_note(decoding)
            return [], (i, exc)
        try:
            return stage(items), None
        except Exception as exc:
            return [], (failing[0], exc)

    return run


def _compile_all(
    node: OperatorNode, logical: dict[str, str], sinks: list[str], failing: list[int]
) -> list[Stage] | None:
    """The stage of each child of `node`, or None when one has no batch form."""
    stages = []
    for child in node.children:
        stage = _compile(child, logical, sinks, failing)
        if stage is None:
            return None
        stages.append(stage)
    return stages


def _children(
    node: OperatorNode, logical: dict[str, str], sinks: list[str], failing: list[int]
) -> Stage | None:
    stages = _compile_all(node, logical, sinks, failing)
    if stages is None:
        return None
    if len(stages) == 1:
        return stages[0]

    def fan(items: list[Item]) -> Produced:
        produced: Produced = []
        for stage in stages:
            produced += stage(items)
        return produced

    return fan


def _compile(
    node: OperatorNode, logical: dict[str, str], sinks: list[str], failing: list[int]
) -> Stage | None:
    kind = node.kind
    if kind == "sink":
        sinks.append(node.payload.stream)
        return _sink(node, logical[node.payload.stream], failing)
    if kind == "branch":
        return _branch(node, logical, sinks, failing)
    if kind != "arm" and kind not in _STATELESS:
        return None
    nxt = _children(node, logical, sinks, failing)
    if nxt is None or kind == "arm":
        return nxt
    step = _step(node, failing)

    def stage(items: list[Item]) -> Produced:
        return nxt(step(items))

    return stage


def _step(node: OperatorNode, failing: list[int]) -> Callable[[list[Item]], list[Item]]:
    """One stateless step over a batch, applied to each record as the per-record form does
    (`DslComputation._compile_node`), its failures noted as there (a `try` costs nothing until
    it catches)."""
    kind, fn = node.kind, node.fn

    def step(items: list[Item]) -> list[Item]:
        out: list[Item] = []
        append = out.append
        if kind == "filter":
            for item in items:
                try:
                    keep = fn(item[0], item[1])
                except Exception as exc:
                    _failed(exc, node, failing, item[3])
                    raise
                if keep:
                    append(item)
        elif kind == "map_values":
            for k, v, w, i in items:
                try:
                    append((k, fn(v), w, i))
                except Exception as exc:
                    _failed(exc, node, failing, i)
                    raise
        elif kind == "map":
            for k, v, w, i in items:
                try:
                    k, v = fn(k, v)
                except Exception as exc:
                    _failed(exc, node, failing, i)
                    raise
                append((k, v, w, i))
        elif kind == "flat_map":
            for k, v, w, i in items:
                try:
                    pairs = list(fn(k, v))
                    for k2, v2 in pairs:
                        append((k2, v2, w, i))
                except Exception as exc:
                    _failed(exc, node, failing, i)
                    raise
        elif kind == "flat_map_values":
            for k, v, w, i in items:
                try:
                    values = list(fn(v))
                except Exception as exc:
                    _failed(exc, node, failing, i)
                    raise
                out += [(k, one, w, i) for one in values]
        else:  # select_key
            for k, v, w, i in items:
                try:
                    append((fn(k, v), v, w, i))
                except Exception as exc:
                    _failed(exc, node, failing, i)
                    raise
        return out

    return step


def _branch(
    node: OperatorNode, logical: dict[str, str], sinks: list[str], failing: list[int]
) -> Stage | None:
    arms = _compile_all(node, logical, sinks, failing)
    if arms is None:
        return None
    predicates = list(node.fn)

    def branch(items: list[Item]) -> Produced:
        routed: list[list[Item]] = [[] for _ in arms]
        tests = list(zip(predicates, routed, strict=True))
        for item in items:
            key, value = item[0], item[1]
            for predicate, into in tests:
                try:
                    matched = predicate(key, value)
                except Exception as exc:
                    _failed(exc, node, failing, item[3])
                    raise
                if matched:
                    into.append(item)
                    break
        produced: Produced = []
        for stage, part in zip(arms, routed, strict=True):
            if part:
                produced += stage(part)
        return produced

    return branch


def _failed(exc: Exception, node: OperatorNode, failing: list[int], index: int) -> None:
    """Note `exc` as the per-record form notes a failure of `node`, and keep which record of
    the batch it was (`failing`)."""
    noted(exc, node)
    failing[0] = index


def _sink(node: OperatorNode, output: str, failing: list[int]) -> Stage:
    """The DSL sink (`DslComputation._compile_sink`) over a batch: each output's Record."""
    encode = node.codec.encode

    def sink(items: list[Item]) -> Produced:
        pairs: list[tuple[str, Record]] = []
        append = pairs.append
        for key, value, watermark, i in items:
            if type(key) is not str:
                failing[0] = i
                raise key_type_error(key, node)
            try:
                data = encode(value)
            except Exception as exc:
                _failed(exc, node, failing, i)
                raise
            if data.__class__ is bytes and key.isascii():
                append((key, _new_record(Record, (key, data, watermark, _PLAIN, None))))
                continue
            try:
                record = Record(key, data, watermark)
            except Exception:
                failing[0] = i
                raise
            append((record.key, record))
        return [(output, pairs)]

    return sink
