"""Computations: topologies of computations wired by streams, run by a `StreamProcessor` on any log
backend, or synchronously by a `TopologyTestDriver` (see docs/computations.md)."""

from __future__ import annotations

from streamcore.computation.batch import BatchComputation
from streamcore.computation.computation import Computation, ComputationMetadata
from streamcore.computation.context import ComputationContext
from streamcore.computation.dlq import DeadLetter
from streamcore.computation.dsl import Stream
from streamcore.computation.dsl_aggregate import GroupedStream, Table
from streamcore.computation.dsl_join import JoinWindows
from streamcore.computation.filters import RecordFilter
from streamcore.computation.health import HealthStatus
from streamcore.computation.policy import ComputationPolicy
from streamcore.computation.processor import Processor, ProcessorContext
from streamcore.computation.settings import Settings
from streamcore.computation.stream_processor import StreamProcessor
from streamcore.computation.testing import TopologyTestDriver
from streamcore.computation.topology import Topology, TopologyBuilder

__all__ = [
    "BatchComputation",
    "Computation",
    "ComputationContext",
    "ComputationMetadata",
    "ComputationPolicy",
    "DeadLetter",
    "GroupedStream",
    "HealthStatus",
    "JoinWindows",
    "Processor",
    "ProcessorContext",
    "RecordFilter",
    "Settings",
    "Stream",
    "StreamProcessor",
    "Table",
    "Topology",
    "TopologyBuilder",
    "TopologyTestDriver",
]
