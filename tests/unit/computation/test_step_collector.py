"""The runner pauses the cyclic garbage collector during a step (ComputationRunner.step): the
cycles a step makes are collected at its end, not left for an allocation that may never come
while the collector is on."""

from __future__ import annotations

import gc
import sys
import weakref
from typing import Any

from streamcore.computation import Computation, Settings, Topology, TopologyTestDriver
from streamcore.record import Record

IN, OUT = "app/in", "app/out"


class _Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the collector frees it


class MakesCycles(Computation):
    """Makes cycles per record, keeping only weak references to them."""

    def __init__(self) -> None:
        super().__init__("cycles", 1, 1)
        self.made: list[weakref.ref[_Node]] = []
        self.enabled_during: list[bool] = []

    def process_record(self, context, input_stream, record) -> None:
        self.enabled_during.append(gc.isenabled())
        for _ in range(2 * gc.get_threshold()[0]):
            self.made.append(weakref.ref(_Node()))
        context.produce_record("o1", record.key, record.data)
        context.ask_for_checkpoint()


def _in_a_step() -> bool:
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name == "step" and frame.f_code.co_filename.endswith("runner.py"):
            return True
        frame = frame.f_back
    return False


def test_the_cycles_a_step_made_are_collected_at_its_end() -> None:
    computation = MakesCycles()
    collected_in_step: list[bool] = []

    def note(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            collected_in_step.append(_in_a_step())

    topology = Topology.builder().add_computation(lambda: computation, [f"i1:{IN}", f"o1:{OUT}"])
    with TopologyTestDriver(topology.build(), Settings(), start_ms=1_000_000) as driver:
        gc.callbacks.append(note)
        try:
            driver.pipe_record(IN, Record("k", b"v"))
        finally:
            gc.callbacks.remove(note)
        assert computation.enabled_during == [False]  # paused during the step
        assert gc.isenabled()
        assert True in collected_in_step  # at its end, not at some later allocation
        assert computation.made
        assert all(ref() is None for ref in computation.made)
        assert [r.data for r in driver.read_output(OUT)] == [b"v"]
