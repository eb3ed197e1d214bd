"""`Settings(checkpoint_interval=)`: a checkpoint asked for at the end of a read batch waits for
the interval or for a read that finds nothing; a batch that does not ask commits the put-off
window only; the stores and the outputs stay consistent with the commits (TopologyTestDriver,
whose virtual clock is the runner's clock)."""

from __future__ import annotations

from typing import Any

import pytest

from streamcore.computation import Computation, Processor, Settings, Topology, TopologyTestDriver
from streamcore.errors import TopologyError
from streamcore.record import Record

IN, OUT, NAME = "app/in", "app/out", "app/count"


class Count(Processor):
    def init(self, context: Any) -> None:
        self.context = context

    def process(self, key: str, value: Any) -> None:
        store = self.context.get_state_store("counts")
        count = (store.get(key) or 0) + 1
        store.put(key, count)
        self.context.forward(key, count)


def count_driver(interval: float, read_batch: int = 10) -> TopologyTestDriver:
    topology = (
        Topology.builder()
        .add_processor(NAME, Count, inputs=[IN], outputs=[OUT], codec="json", stores=["counts"])
        .build()
    )
    settings = Settings(read_batch=read_batch, checkpoint_interval=interval)
    return TopologyTestDriver(topology, settings, start_ms=1_000_000)


def records(n: int, first: int = 0) -> list[Record]:
    return [Record(f"k{i % 7}", b"1") for i in range(first, first + n)]


@pytest.mark.parametrize(("interval", "checkpoints"), [(0.0, 10), (60.0, 1)])
def test_batches_asking_within_the_interval_share_one_checkpoint(
    interval: float, checkpoints: int
) -> None:
    with count_driver(interval) as driver:
        driver.pipe_records(IN, records(100))
        assert driver.stats(NAME).checkpoints == checkpoints
        assert driver.lag(NAME).lag == 0  # the reads found nothing new: the put-off one is taken
        store = driver.get_key_value_store(NAME, "counts", 0)
        assert sum(count for _, count in store.all()) == 100
        assert not store.dirty
        assert len(driver.read_output(OUT)) == 100


def test_the_first_batch_after_the_interval_checkpoints_at_once() -> None:
    with count_driver(60.0) as driver:
        driver.pipe_records(IN, records(10))
        assert driver.stats(NAME).checkpoints == 1
        driver.advance_time(60_000)
        driver.pipe_records(IN, records(30, 10))
        # the first of the three batches is due; the next two wait for the idle read
        assert driver.stats(NAME).checkpoints == 3
        assert driver.lag(NAME).lag == 0


class AskOnDone(Computation):
    """Forwards every record; asks for a checkpoint only after a record whose data is b"done"."""

    def __init__(self) -> None:
        super().__init__(NAME, 1, 1)

    def process_record(self, context: Any, input_stream: str, record: Record) -> None:
        context.produce_record("o1", record)
        if record.data == b"done":
            context.ask_for_checkpoint()


def test_a_batch_that_does_not_ask_commits_the_put_off_window_only() -> None:
    topology = Topology.builder().add_computation(AskOnDone, [f"i1:{IN}", f"o1:{OUT}"]).build()
    settings = Settings(read_batch=10, checkpoint_interval=60.0)
    with TopologyTestDriver(topology, settings, start_ms=1_000_000) as driver:
        asking = [Record(f"a{i}", b"done") for i in range(10)]
        holding = [Record(f"h{i}", b"hold") for i in range(10)]
        driver.pipe_records(IN, asking + holding)
        # batch 1 asked through its end (put off), batch 2 did not ask: batch 1 is committed,
        # batch 2 is not (its records are delivered again after a restart)
        assert driver.stats(NAME).checkpoints == 1
        assert driver.lag(NAME).lag == 10
        # a checkpoint appends every record produced so far (outputs are at-least-once)
        assert [r.key for r in driver.read_output(OUT)] == [r.key for r in asking + holding]


def test_a_negative_interval_is_refused() -> None:
    with pytest.raises(TopologyError, match="checkpoint_interval"):
        Settings(checkpoint_interval=-1.0)
