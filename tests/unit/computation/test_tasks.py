"""`streamcore.computation.tasks`: the build-time co-partitioning check and the task helpers."""

from __future__ import annotations

import pytest

from streamcore.computation import Computation, Settings, Topology
from streamcore.computation.tasks import (
    check_copartitioned,
    planned_partitions,
    task_count,
    task_of,
    tasks_of,
)
from streamcore.errors import TopologyError
from streamcore.log import LogPartition
from streamcore.log.memory import MemoryLogManager
from streamcore.names import Name

ORDERS, CUSTOMERS, OUT = "app/orders", "app/customers", "app/out"


class Passthrough(Computation):
    def __init__(self, name: str = "join", inputs: int = 2) -> None:
        super().__init__(name, inputs, 1)

    def process_record(self, context, input_stream, record) -> None:
        context.produce_record("o1", record.key, record.data)


def joined() -> Topology:
    return (
        Topology.builder()
        .add_computation(Passthrough, [f"i1:{ORDERS}", f"i2:{CUSTOMERS}", f"o1:{OUT}"])
        .build()
    )


def counts(**by_stream: int):
    urns = {Name.of(f"app/{stream}").urn: n for stream, n in by_stream.items()}
    return lambda stream: urns.get(Name.of(stream).urn, 1)


def test_inputs_of_different_partition_counts_are_refused_with_the_streams_and_the_fix() -> None:
    with pytest.raises(TopologyError) as caught:
        check_copartitioned(joined(), counts(orders=4, customers=2))
    message = str(caught.value)
    assert "computation 'join'" in message and "not co-partitioned" in message
    assert f"{Name.of(ORDERS).urn} has 4" in message
    assert f"{Name.of(CUSTOMERS).urn} has 2" in message
    assert "set_partitions" in message and "streamcore create -l STREAM -p 4" in message


def test_inputs_of_equal_partition_counts_are_accepted() -> None:
    check_copartitioned(joined(), counts(orders=4, customers=4))
    assert task_count(joined(), "join", counts(orders=4, customers=4)) == 4


def test_a_single_input_computation_is_always_co_partitioned() -> None:
    topology = (
        Topology.builder()
        .add_computation(lambda: Passthrough("one", 1), [f"i1:{ORDERS}", f"o1:{OUT}"])
        .add_computation(lambda: Passthrough("two", 1), [f"i1:{OUT}", f"o1:{CUSTOMERS}"])
        .build()
    )
    # Its output may have another count than its input: only a computation's inputs must match.
    check_copartitioned(topology, counts(orders=4, out=3, customers=2))


def test_existing_streams_count_with_their_size_others_with_the_settings() -> None:
    manager = MemoryLogManager()
    manager.create(ORDERS, 4)
    settings = Settings(default_partitions=2)
    partitions_of = planned_partitions(manager, settings, joined())
    assert partitions_of(ORDERS) == 4 and partitions_of(CUSTOMERS) == 2
    with pytest.raises(TopologyError, match=r"has 4, .* has 2"):
        check_copartitioned(joined(), partitions_of)
    settings.set_partitions(CUSTOMERS, 4)
    check_copartitioned(joined(), partitions_of)
    manager.close()


def test_a_task_is_the_partition_number_of_every_input() -> None:
    assignment = [LogPartition.of(ORDERS, 3), LogPartition.of(CUSTOMERS, 3)]
    assignment += [LogPartition.of(ORDERS, 0), LogPartition.of(CUSTOMERS, 0)]
    assert task_of(LogPartition.of(CUSTOMERS, 3)) == 3
    assert tasks_of(assignment) == [0, 3]
