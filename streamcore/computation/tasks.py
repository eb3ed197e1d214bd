"""Tasks: how a computation with several inputs is split for its group members (docs/state.md,
"Tasks and co-partitioning").

Task *p* of a computation reads partition *p* of every input stream, as Kafka Streams groups
partitions: records with one key land in the same partition number of every input (same count,
same key partitioner), so one task sees all of them, and the task is what the group assigns,
moves and keeps state for. `check_copartitioned` refuses a topology whose computations read
inputs of different partition counts, before anything runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from streamcore.errors import TopologyError
from streamcore.log import LogManager, LogPartition

if TYPE_CHECKING:
    from streamcore.computation.settings import Settings
    from streamcore.computation.topology import Topology

__all__ = [
    "check_copartitioned",
    "created_partitions",
    "planned_partitions",
    "task_count",
    "task_of",
    "tasks_of",
]


def task_of(partition: LogPartition) -> int:
    """The task that reads `partition`: its partition number."""
    return partition.partition


def tasks_of(partitions: Iterable[LogPartition]) -> list[int]:
    """The tasks of `partitions` (e.g. a member's assignment), in order, each once."""
    return sorted({task_of(p) for p in partitions})


def created_partitions(
    topology: Topology, settings: Settings, size: Callable[[str], int] | None = None
) -> Callable[[str], int]:
    """The partition count a missing stream is created with: the settings' count given for it
    (`set_partitions`), else for an internal stream of the topology (a `group_by` repartition)
    that of the stream it copies (`size` of it, when given and it has one), else the settings'
    default."""

    def partitions_of(stream: str) -> int:
        copied = topology.partitions_copied_from(stream)
        if copied is None or settings.partitions_set(stream):
            return settings.partitions(stream)
        return size(copied) if size is not None else partitions_of(copied)

    return partitions_of


def planned_partitions(
    manager: LogManager, settings: Settings, topology: Topology
) -> Callable[[str], int]:
    """The partition count a stream will have when a processor starts: its size if it exists
    (an existing stream keeps its count whatever the settings say), else the count it is
    created with (`created_partitions`)."""

    def partitions_of(stream: str) -> int:
        return manager.size(stream) if manager.exists(stream) else created(stream)

    created = created_partitions(topology, settings, partitions_of)
    return partitions_of


def task_count(topology: Topology, computation: str, partitions_of: Callable[[str], int]) -> int:
    """How many tasks `computation` has: the partition count of its inputs (checked equal by
    `check_copartitioned`), 0 for a source."""
    return max((partitions_of(s) for s in topology.input_streams(computation)), default=0)


def check_copartitioned(topology: Topology, partitions_of: Callable[[str], int]) -> None:
    """Raise `TopologyError` if a computation of `topology` reads inputs whose partition counts
    (`partitions_of(stream URN)`) differ: task p could not read partition p of every input.
    The error names the computation, every input with its count, and the fix."""
    for name in topology.computation_names():
        counts = {stream: partitions_of(stream) for stream in topology.input_streams(name)}
        if len(set(counts.values())) <= 1:
            continue
        listed = ", ".join(f"{stream} has {n}" for stream, n in counts.items())
        most = max(counts.values())
        raise TopologyError(
            f"computation {name!r} reads inputs that are not co-partitioned: {listed} "
            "partitions. Its task p reads partition p of every input, so records with one key "
            "meet only if every input has as many partitions (and the same key partitioner). "
            f"Give them the same count: set it in the settings (Settings.set_partitions("
            f"stream, {most})) for streams not created yet, and recreate an existing stream "
            "with that count (streamcore delete -l STREAM --yes, then streamcore create -l "
            f"STREAM -p {most}), or repartition it through a computation that writes a stream "
            "of that count (in the DSL: .through('<stream>') on a stream created with that "
            "count, or group_by(...), whose repartition stream copies its input's count)"
        )
