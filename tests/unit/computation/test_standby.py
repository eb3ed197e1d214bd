"""Standby replicas (docs/state.md, "Standby replicas"): a second processor, with a state folder
of its own, keeps a warm copy of the task it does not own by following the changelog, and the
copy becomes the task's store when the owner goes, so the new owner restores only the tail.
Both processors run in this process on the memory log (the group's rules are in
tests/unit/test_standby_groups.py; a SIGKILLed owner on the local log in
tests/faults/test_standby_faults.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from audit_support import wait_until
from prometheus_client import generate_latest

from streamcore.codecs import get_codec
from streamcore.computation import Processor, Settings, StreamProcessor, Topology
from streamcore.computation.dsl_values import resolve_value_codec
from streamcore.errors import TopologyError, UnsupportedOperationError
from streamcore.log.memory import MemoryLogManager
from streamcore.names import Name
from streamcore.record import Record
from streamcore.state.engines import open_engine
from streamcore.state.store import KeyValueStore

IN, COMPUTATION, STORE = "app/in", "app/count", "counts"
WAIT = 60.0


class Count(Processor):
    def init(self, context) -> None:
        self.context = context

    def process(self, key, value) -> None:
        store = self.context.get_state_store(STORE)
        store.put(key, (store.get(key) or 0) + 1)


def processor(manager: MemoryLogManager, state: Path) -> StreamProcessor:
    topology = (
        Topology.builder()
        .add_processor(COMPUTATION, Count, inputs=[IN], codec="json", stores=[STORE])
        .build()
    )
    settings = Settings(state_dir=state, read_batch=50, standby_replicas=1, drain_quiet=0.1)
    return StreamProcessor(manager, topology, settings)


def append(manager: MemoryLogManager, start: int, count: int, expected: dict[str, int]) -> None:
    keys = [f"k{i % 40}" for i in range(start, start + count)]
    manager.appender(IN, get_codec("avro")).append_batch([(k, Record(k, b"1")) for k in keys])
    for key in keys:
        expected[key] = expected.get(key, 0) + 1


def drained(manager: MemoryLogManager) -> bool:
    return manager.committed(IN, COMPUTATION)[0] == manager.end_offsets(IN)[0]


def stored(state: Path) -> dict[str, int]:
    path = state / Name.of(COMPUTATION).id / "0" / STORE
    engine = open_engine("rocksdb", path, 5.0)
    try:
        return dict(KeyValueStore(STORE, engine, resolve_value_codec("json", where="t")).all())
    finally:
        engine.close()


def test_the_member_holding_the_warm_copy_takes_the_task_and_restores_only_the_tail(
    tmp_path: Path,
) -> None:
    manager = MemoryLogManager()
    manager.heartbeat_interval, manager.session_timeout = 0.1, 0.8
    manager.create(IN, 1)
    expected: dict[str, int] = {}
    append(manager, 0, 400, expected)
    owner = processor(manager, tmp_path / "a").start()
    wait_until(lambda: drained(manager), WAIT, "the owner to count the first records")
    standby = processor(manager, tmp_path / "b").start()
    copies = standby._units[COMPUTATION][0].runner.stores
    wait_until(lambda: copies.standby is not None and 0 in copies.standby.warm, WAIT, "a copy")
    scraped = generate_latest(standby.metrics).decode()
    labels = '{computation="app/count",store="counts",task="0"}'
    assert f"streamcore_computation_standby_warm{labels} 1.0" in scraped
    assert f"streamcore_computation_standby_lag{labels}" in scraped
    append(manager, 400, 100, expected)  # counted by the owner, followed by the copy
    wait_until(lambda: drained(manager), WAIT, "the owner to count the next records")
    changelog_end = manager.end_offsets(f"{COMPUTATION}-{STORE}-changelog")[0]
    assert owner.stop()
    append(manager, 500, 100, expected)
    wait_until(lambda: drained(manager), WAIT, "the new owner to count the last records")
    restore = copies.restores[0, STORE]
    # The copy's checkpoint was near the changelog's end: the restore read its tail only.
    assert restore.start > 0
    assert restore.restored + restore.skipped < changelog_end / 2
    assert standby.stop()
    assert stored(tmp_path / "b") == expected


def test_standby_replicas_are_refused_where_the_group_cannot_prefer_a_copy() -> None:
    with pytest.raises(TopologyError, match="standby_replicas must be an int >= 0"):
        Settings(standby_replicas=-1)

    class NoStandby(MemoryLogManager):
        subscribe_with_standby = None  # type: ignore[assignment]

    topology = (
        Topology.builder()
        .add_processor(COMPUTATION, Count, inputs=[IN], codec="json", stores=[STORE])
        .build()
    )
    with pytest.raises(UnsupportedOperationError, match="cannot keep standby replicas"):
        StreamProcessor(NoStandby(), topology, Settings(standby_replicas=1))
