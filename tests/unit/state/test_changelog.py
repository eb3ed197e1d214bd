"""The changelog of a state store (streamcore.state.changelog): its name, its creation with the
backend's compaction settings, the record format (puts, deletes the local compaction takes for
tombstones) and the store checkpoint."""

from __future__ import annotations

import time
import tomllib
from pathlib import Path

import pytest
from log_fixtures import make_config

from streamcore.config import LogDefaults, StreamcoreConfig
from streamcore.errors import CorruptCheckpointError, InvalidNameError, StateError
from streamcore.log import LogManager, LogPartition
from streamcore.log.capabilities import Segmented, TopicConfigurable
from streamcore.log.config import ARCHIVER, LogConfig
from streamcore.log.local.manager import LocalLogManager
from streamcore.log.memory import MemoryLogManager
from streamcore.log.unified import UnifiedLogManager
from streamcore.names import Name
from streamcore.state.changelog import (
    DELETE_PREFIX,
    PUT_MAGIC,
    ChangelogWriter,
    StoreCheckpoint,
    changelog_name,
    decode_positions,
    delete_encoder,
    encode_delete,
    encode_positions,
    ensure_changelog,
)

ORDERS = LogPartition(Name.of("test/orders"), 0)
RETURNS = LogPartition(Name.of("test/returns"), 0)


def test_the_name_is_the_computations_namespace_name_store_and_changelog() -> None:
    assert changelog_name("shop/count-orders", "counts") == "shop/count-orders-counts-changelog"
    assert changelog_name(Name.of("shop/count"), "by_key") == "shop/count-by_key-changelog"


@pytest.mark.parametrize("store", ["", "with-dash", "9lives", "a b", "é"])
def test_a_store_name_that_would_make_the_changelog_name_ambiguous_is_refused(store) -> None:
    with pytest.raises(InvalidNameError, match="invalid state store name"):
        changelog_name("shop/count", store)


def test_a_computation_without_namespace_has_no_changelog_name() -> None:
    with pytest.raises(InvalidNameError, match="has no namespace"):
        changelog_name("count", "counts")


def test_ensure_creates_one_partition_per_task_compacted_and_kept(manager: LogManager) -> None:
    name = changelog_name("test/count", "counts")
    ensure_changelog(manager, name, 3)
    assert manager.size(name) == 3
    if isinstance(manager, TopicConfigurable):
        config = manager.topic_config(name)
        assert config["cleanup.policy"] == "compact"
        assert int(config["min.compaction.lag.ms"]) > 0
    if isinstance(manager, Segmented):
        assert manager.retention_ms(name) == 0  # kept: only key compaction removes records
    ensure_changelog(manager, name, 3)  # there already: nothing to do
    with pytest.raises(StateError, match=r"has 3 partitions but the computation has 4 tasks"):
        ensure_changelog(manager, name, 4)


def test_through_the_routing_manager_each_backend_gets_its_own_options(tmp_path: Path) -> None:
    text = '[log.configs.mem]\ntype = "memory"\n[[log.match]]\nnamespace = "fast"\nconfig = "mem"\n'
    config = StreamcoreConfig(home=tmp_path, log=LogDefaults(), table=tomllib.loads(text))
    manager = UnifiedLogManager(config, LogConfig.from_settings(config, environ={}))
    on_disk, in_memory = changelog_name("slow/count", "c"), changelog_name("fast/count", "c")
    ensure_changelog(manager, on_disk, 2)  # the local log: kept without time retention
    ensure_changelog(manager, in_memory, 2)  # the memory log takes no option
    local = manager.backend_for(on_disk)
    assert isinstance(local, LocalLogManager) and local.retention_ms(on_disk) == 0
    assert isinstance(manager.backend_for(in_memory), MemoryLogManager)
    assert manager.size(in_memory) == 2
    manager.close()


def test_puts_and_deletes_carry_their_input_positions(manager: LogManager) -> None:
    name = changelog_name("test/count", "counts")
    ensure_changelog(manager, name, 2)
    with ChangelogWriter(manager, name) as writer:
        positions = {ORDERS: 12, RETURNS: 3}
        end = writer.append(1, {b"a": b"1", "é".encode(): b"", b"gone": None}, positions)
        assert end == 3 == manager.end_offsets(name)[1]
        assert writer.append(1, {}, positions) == 3  # nothing to append: the end as it is
        flushed = StoreCheckpoint.decode(writer.checkpoint(end, positions))
        assert flushed == StoreCheckpoint(manager.incarnation(name), 3, positions)
    blob = encode_positions(positions)
    assert decode_positions(blob) == positions
    records = {}
    for offset in range(3):
        key, value, _ = manager.record_at(LogPartition(Name.of(name), 1), offset)
        records[key] = value
    header = PUT_MAGIC + len(blob).to_bytes(2, "big") + blob
    assert records["a"] == header + b"1"
    assert records["é"] == header  # an empty store value is still a put, never a tombstone
    assert records["gone"].startswith(DELETE_PREFIX) and blob in records["gone"]


def test_the_local_compaction_takes_a_delete_for_a_tombstone(tmp_path: Path) -> None:
    manager = LocalLogManager(tmp_path / "log", config=make_config(tmp_path))
    name = changelog_name("test/count", "counts")
    manager.create(name, 1, segment_bytes=512, retention="0")
    writer = ChangelogWriter(manager, name)
    for i in range(20):
        writer.append(0, {b"k%d" % (i % 3): b"v%d" % i}, {ORDERS: i})
    writer.append(0, {b"k0": None}, {ORDERS: 20})
    for i in range(20):  # later records of other keys seal the delete's segment
        writer.append(0, {b"other": b"v%d" % i}, {ORDERS: 21 + i})
    partition = LogPartition(Name.of(name), 0)
    manager.commit_position(partition, ARCHIVER, manager.end_offsets(name)[0])
    later = time.time_ns() // 1_000_000 + 3_600_000
    [result] = manager.compact(name, now_ms=later, delete_retention_ms=0)
    assert result.tombstones == 1  # the expired delete went, with every older k0
    writer.close()
    manager.close()


def test_the_checkpoint_round_trips_and_a_corrupt_one_says_so() -> None:
    checkpoint = StoreCheckpoint("inc-1", 42, {ORDERS: 7, RETURNS: 0})
    assert StoreCheckpoint.decode(checkpoint.encode()) == checkpoint
    assert StoreCheckpoint.decode(StoreCheckpoint(None, 0).encode()) == StoreCheckpoint(None, 0)
    for corrupt in (b"", b"\xff", b"[]", b'{"v":2}', b'{"v":1,"incarnation":1,"offset":0}'):
        with pytest.raises(CorruptCheckpointError, match="not a store checkpoint"):
            StoreCheckpoint.decode(corrupt)


@pytest.mark.parametrize("blob", [b"", b"[]", bytes(range(256)) * 20])
def test_the_delete_encoder_writes_encode_deletes_bytes(blob: bytes) -> None:
    """Around the key, the bytes of the empty key's tombstone: the same bytes as encode_delete
    for keys whose length takes one, two and three varint bytes, and for non-ASCII keys."""
    delete = delete_encoder(blob)
    keys = ["", "k", "w" + "0" * 16 + "k42\x00\x00", "é€😀\x00", "x" * 63, "x" * 64, "y" * 9000]
    for key in keys:
        assert delete(key.encode("utf-8")) == encode_delete(key, blob), key
