"""Where a new group starts (Nuclio's "Seek To"; docs/operating.md): `subscribe(start=)` and
`Settings.set_start`, honoured only on partitions the group has no committed position on, on
every backend."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from audit_support import wait_until

from streamcore.codecs import get_codec
from streamcore.computation import Processor, Settings, StreamProcessor, Topology
from streamcore.errors import InvalidArgumentError, TopologyError
from streamcore.log import LogManager, LogTailer
from streamcore.record import Record

WAIT = 60.0


def append(manager: LogManager, name: str, keys: list[str]) -> None:
    manager.appender(name).append_batch([(k, k.encode()) for k in keys])


def assigned(tailer: LogTailer[Any], partitions: int) -> None:
    """Read until the group assigned every partition (records read meanwhile fail the test)."""

    def done() -> bool:
        assert tailer.read(timeout=0.1) is None, "read a record appended before the start"
        return len(tailer.assignments) == partitions

    wait_until(done, WAIT, "the assignment")


def read_all(tailer: LogTailer[Any], count: int) -> list[str]:
    keys: list[str] = []

    def more() -> bool:
        record = tailer.read(timeout=0.1)
        if record is not None:
            keys.append(record.key)
        return len(keys) >= count

    wait_until(more, WAIT, f"{count} records")
    return keys


def test_a_new_group_starting_latest_reads_only_later_records(
    manager: LogManager, new_log: Callable[..., str]
) -> None:
    name = new_log(2)
    append(manager, name, [f"old-{i}" for i in range(10)])
    tailer = manager.subscribe("test/late-readers", [name], start="latest")
    assigned(tailer, 2)
    # The ends are committed at once: a rewind or the next member resumes there.
    assert manager.committed(name, "test/late-readers") == manager.end_offsets(name)
    append(manager, name, [f"new-{i}" for i in range(6)])
    assert sorted(read_all(tailer, 6)) == [f"new-{i}" for i in range(6)]
    tailer.to_last_committed()
    assert sorted(read_all(tailer, 6)) == [f"new-{i}" for i in range(6)]
    tailer.close()


def test_a_group_with_committed_positions_resumes_from_them_whatever_the_start(
    manager: LogManager, new_log: Callable[..., str]
) -> None:
    name = new_log(1)
    append(manager, name, [f"k{i}" for i in range(10)])
    first = manager.subscribe("test/resumers", [name])  # earliest, the default
    assert read_all(first, 4) == ["k0", "k1", "k2", "k3"]
    first.commit()
    first.close()
    again = manager.subscribe("test/resumers", [name], start="latest")
    assert read_all(again, 6) == [f"k{i}" for i in range(4, 10)]
    again.close()


def test_unknown_start_positions_are_refused_with_the_allowed_ones(
    manager: LogManager, new_log: Callable[..., str]
) -> None:
    with pytest.raises(InvalidArgumentError, match="unknown start position 'middle'"):
        manager.subscribe("test/nowhere", [new_log(1)], start="middle")
    with pytest.raises(TopologyError, match="must be one of earliest, latest"):
        Settings(default_start="end")
    with pytest.raises(TopologyError, match="start of app/x must be one of"):
        Settings().set_start("app/x", "first")


class Collect(Processor):
    seen: list[str] = []

    def process(self, key: str, value: Any) -> None:
        Collect.seen.append(key)


def test_a_processor_set_to_start_latest_skips_what_was_there() -> None:
    from streamcore.log.memory import MemoryLogManager

    manager = MemoryLogManager()
    manager.create("app/in", 1)
    appender = manager.appender("app/in", get_codec("avro"))
    appender.append_batch([(f"old-{i}", Record(f"old-{i}", b"1")) for i in range(5)])
    topology = Topology.builder().add_processor("app/tail", Collect, inputs=["app/in"]).build()
    Collect.seen = []
    settings = Settings(drain_quiet=0.1).set_start("app/tail", "latest")
    with StreamProcessor(manager, topology, settings) as processor:
        wait_until(lambda: manager.committed("app/in", "app/tail") == [5], WAIT, "the start commit")
        appender.append_batch([(f"new-{i}", Record(f"new-{i}", b"1")) for i in range(3)])
        assert processor.drain_and_stop(WAIT)
    assert Collect.seen == ["new-0", "new-1", "new-2"]
