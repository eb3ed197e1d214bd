"""The LogManager / LogAppender / LogTailer contract, run against every backend (`manager` fixture).

Backend-specific behaviour lives in test_local_log.py; anything here must hold for all backends.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable

import pytest

from streamcore.errors import (
    ConfigError,
    LogClosedError,
    LogExistsError,
    LogNotFoundError,
    TailerConflictError,
)
from streamcore.log import Latency, LogLag, LogManager, LogOffset, LogPartition, LogRecord
from streamcore.log.local.manager import LocalLogManager
from streamcore.log.partitioner import partition_for_key
from streamcore.log.registry import backend_type
from streamcore.names import Name

NewLog = Callable[..., str]


def reopen(backend: str, manager: LogManager) -> LogManager:
    """A second manager over the logs of `manager`, as another process would open it."""
    if backend == "local":
        return LocalLogManager(manager.root, config=manager.config)
    assert backend == "kafka", f"{backend} logs live and die with their manager"
    from log_fixtures import KAFKA_TEST_CONFIG

    from streamcore.log.kafka import KafkaLogManager

    return KafkaLogManager(
        manager.bootstrap_servers,
        topic_prefix=manager.topic_prefix,
        config=KAFKA_TEST_CONFIG,
        timeout=manager.timeout,
    )


def drain(tailer, timeout: float = 0.0) -> list[LogRecord]:
    """Every record available now (waiting `timeout` for the first)."""
    out = []
    rec = tailer.read(timeout)
    while rec is not None:
        out.append(rec)
        rec = tailer.read(0)
    return out


def by_partition(records: list[LogRecord]) -> dict[int, list[LogRecord]]:
    grouped: dict[int, list[LogRecord]] = defaultdict(list)
    for r in records:
        grouped[r.partition.partition].append(r)
    return grouped


def fill(manager: LogManager, name: str, per_partition: dict[int, int]) -> None:
    """Append `count` records `p<partition>-<i>` to each partition."""
    app = manager.appender(name)
    for p, count in per_partition.items():
        for i in range(count):
            app.append_to(p, f"k{i}", f"p{p}-{i}".encode())


def key_partition(backend: str, key: str, partitions: int) -> int:
    """Where `append(key, ...)` puts a record: Nuxeo's Java-hash partitioner on the local and
    memory logs, Kafka's own murmur2 partitioner on Kafka (a documented difference)."""
    if backend == "kafka":
        from streamcore.log.kafka.partitioner import kafka_partition_for_key

        return kafka_partition_for_key(key, partitions)
    return partition_for_key(key, partitions)


class TestLifecycle:
    def test_create_exists_size(self, manager: LogManager) -> None:
        assert not manager.exists("test/a")
        assert manager.create("test/a", 3) is True
        assert manager.exists("test/a")
        assert manager.exists(Name.of("test/a"))
        assert manager.size("test/a") == 3
        assert manager.end_offsets("test/a") == [0, 0, 0]
        assert manager.start_offsets("test/a") == [0, 0, 0]

    def test_create_twice_returns_false_and_keeps_the_log(self, manager: LogManager) -> None:
        assert manager.create("test/a", 2) is True
        manager.appender("test/a").append_to(1, "k", b"v")
        assert manager.create("test/a", 2) is False
        assert manager.create("test/a") is False
        assert manager.size("test/a") == 2
        assert manager.end_offsets("test/a") == [0, 1]

    def test_create_with_other_partition_count_raises(self, manager: LogManager) -> None:
        manager.create("test/a", 2)
        with pytest.raises(
            LogExistsError,
            match=r"log test/a exists with 2 partitions, not 5; delete it first or use its current",
        ):
            manager.create("test/a", 5)
        assert manager.size("test/a") == 2

    def test_create_without_partitions_uses_a_default(self, manager: LogManager) -> None:
        assert manager.create("test/a") is True
        assert manager.size("test/a") >= 1

    @pytest.mark.parametrize("partitions", [0, -1, 1001])
    def test_create_with_invalid_partition_count(self, manager: LogManager, partitions) -> None:
        with pytest.raises(
            ConfigError, match=rf"test/a: partitions must be 1\.\.1000, got {partitions}"
        ):
            manager.create("test/a", partitions)
        assert not manager.exists("test/a")

    def test_create_validates_the_name(self, manager: LogManager) -> None:
        from streamcore.errors import InvalidNameError

        with pytest.raises(InvalidNameError, match="invalid namespace 'bad-ns'"):
            manager.create("bad-ns/x", 1)

    def test_list_logs_sorted_by_urn(self, manager: LogManager) -> None:
        for urn in ("test/b", "audit/entries", "plain", "test/a-1"):
            manager.create(urn, 1)
        assert manager.list_logs() == [
            Name.of(u) for u in ("audit/entries", "plain", "test/a-1", "test/b")
        ]

    def test_delete(self, manager: LogManager) -> None:
        manager.create("test/a", 1)
        manager.create("test/b", 1)
        with manager.appender("test/a") as app:
            app.append("k", b"v")
        with manager.tailer("g", "test/a") as tailer:
            assert tailer.read(1) is not None
            tailer.commit()
        assert manager.delete("test/a") is True
        assert not manager.exists("test/a")
        assert manager.list_logs() == [Name.of("test/b")]
        assert manager.delete("test/a") is False
        with pytest.raises(LogNotFoundError, match="log test/a does not exist"):
            manager.size("test/a")

    def test_recreate_after_delete_is_empty(self, manager: LogManager) -> None:
        manager.create("test/a", 1)
        with manager.appender("test/a") as app:
            app.append("k", b"v")
        with manager.tailer("g", "test/a") as tailer:
            tailer.read(1)
            tailer.commit()
        manager.delete("test/a")
        assert manager.create("test/a", 3) is True
        assert manager.size("test/a") == 3
        assert manager.end_offsets("test/a") == [0, 0, 0]
        assert manager.committed("test/a", "g") == [None, None, None]
        assert manager.list_groups("test/a") == []

    def test_incarnation_is_stable_and_new_when_the_log_is_recreated(
        self, manager: LogManager
    ) -> None:
        manager.create("test/a", 1)
        manager.create("test/b", 1)
        first = manager.incarnation("test/a")
        assert isinstance(first, str) and first
        assert manager.incarnation(Name.of("test/a")) == first
        assert manager.incarnation("test/b") not in (None, first)
        with manager.appender("test/a") as app:
            app.append("k", b"v")
        assert manager.incarnation("test/a") == first
        manager.delete("test/a")
        manager.create("test/a", 1)
        assert manager.incarnation("test/a") not in (None, first)

    @pytest.mark.parametrize(  # a memory log lives and dies with its manager
        "backend", ["local", pytest.param("kafka", marks=pytest.mark.kafka)], indirect=True
    )
    def test_incarnation_is_the_same_for_every_manager_of_the_log(
        self, manager: LogManager, backend: str
    ) -> None:
        """Another manager (another process) sees the same incarnation, and each sees the other
        recreate the log."""
        manager.create("test/a", 1)
        first = manager.incarnation("test/a")
        with reopen(backend, manager) as other:
            assert other.incarnation("test/a") == first
            other.delete("test/a")
            other.create("test/a", 1)
            second = manager.incarnation("test/a")
            assert second not in (None, first)
            assert other.incarnation("test/a") == second

    def test_list_groups(self, manager: LogManager, new_log: NewLog) -> None:
        name = new_log(2)
        assert manager.list_groups(name) == []
        for group in ("zeta", "alpha", "audit/writer-1"):
            with manager.tailer(group, name) as tailer:
                tailer.commit()
        assert manager.list_groups(name) == ["alpha", "audit/writer-1", "zeta"]
        assert manager.committed(name, "audit/writer-1") == [0, 0]

    @pytest.mark.parametrize(
        "call",
        [
            lambda m: m.size("test/missing"),
            lambda m: m.incarnation("test/missing"),
            lambda m: m.appender("test/missing"),
            lambda m: m.tailer("g", "test/missing"),
            lambda m: m.end_offsets("test/missing"),
            lambda m: m.start_offsets("test/missing"),
            lambda m: m.committed("test/missing", "g"),
            lambda m: m.lag("test/missing", "g"),
            lambda m: m.list_groups("test/missing"),
            lambda m: m.tailer("g", LogPartition.of("test/missing", 0)),
        ],
        ids=[
            "size",
            "incarnation",
            "appender",
            "tailer",
            "end_offsets",
            "start_offsets",
            "committed",
            "lag",
            "list_groups",
            "tailer-partition",
        ],
    )
    def test_unknown_log(self, manager: LogManager, call) -> None:
        with pytest.raises(LogNotFoundError, match=r"log test/missing does not exist.*create it"):
            call(manager)

    def test_tailer_on_missing_partition(self, manager: LogManager, new_log: NewLog) -> None:
        name = new_log(2)
        with pytest.raises(ValueError, match="has no partition 2"):
            manager.tailer("g", LogPartition.of(name, 2))


class TestAppend:
    def test_append_by_key_goes_to_partition_for_key(
        self, manager: LogManager, new_log: NewLog, backend: str
    ) -> None:
        name = new_log(5)
        app = manager.appender(name)
        assert app.size == 5
        moved = 0
        for i in range(50):
            key = f"key-{i}"
            offset = app.append(key, b"x")
            assert offset.partition == LogPartition.of(name, key_partition(backend, key, 5))
            moved += offset.partition.partition != partition_for_key(key, 5)
        if backend == "kafka":  # Kafka's partitioner, not Nuxeo's: many keys land elsewhere
            assert moved > 20
        else:
            assert moved == 0

    def test_offsets_are_contiguous_from_zero(self, manager: LogManager, new_log: NewLog) -> None:
        name = new_log(3)
        app = manager.appender(name)
        seen: dict[int, list[int]] = defaultdict(list)
        for i in range(60):
            off = app.append(f"key-{i % 7}", b"v")
            seen[off.partition.partition].append(off.offset)
        for offsets in seen.values():
            assert offsets == list(range(len(offsets)))
        assert manager.end_offsets(name) == [len(seen.get(p, [])) for p in range(3)]

    def test_per_key_order(self, manager: LogManager, new_log: NewLog) -> None:
        name = new_log(4)
        app = manager.appender(name)
        keys = [f"user-{i}" for i in range(6)]
        for i in range(30):
            for key in keys:
                app.append(key, f"{key}:{i}".encode())
        with manager.tailer("g", name) as tailer:
            records = drain(tailer)
        assert len(records) == 180
        per_key: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for r in records:
            per_key[r.key].append((r.offset, int(r.message.decode().split(":")[1])))
        for key in keys:
            offsets, seqs = zip(*per_key[key], strict=True)
            assert list(seqs) == list(range(30))
            assert list(offsets) == sorted(offsets)

    def test_append_to(self, manager: LogManager, new_log: NewLog) -> None:
        name = new_log(3)
        app = manager.appender(name)
        assert app.append_to(2, "k", b"a") == LogOffset(LogPartition.of(name, 2), 0)
        assert app.append_to(2, "other", b"b") == LogOffset(LogPartition.of(name, 2), 1)
        assert app.append_to(0, "k", b"c") == LogOffset(LogPartition.of(name, 0), 0)
        assert manager.end_offsets(name) == [1, 0, 2]

    @pytest.mark.parametrize("partition", [-1, 3])
    def test_append_to_bad_partition(self, manager: LogManager, new_log: NewLog, partition) -> None:
        name = new_log(3)
        with pytest.raises(ValueError, match=rf"has partitions 0\.\.2, not {partition}"):
            manager.appender(name).append_to(partition, "k", b"v")
        assert manager.end_offsets(name) == [0, 0, 0]

    def test_append_batch_keyed(self, manager: LogManager, new_log: NewLog, backend: str) -> None:
        name = new_log(4)
        app = manager.appender(name)
        app.append_to(1, "first", b"0")
        items = [(f"key-{i}", f"v{i}".encode()) for i in range(40)]
        offsets = app.append_batch(items)
        assert len(offsets) == 40
        expected_next = {0: 0, 1: 1, 2: 0, 3: 0}
        for (key, _), off in zip(items, offsets, strict=True):
            p = key_partition(backend, key, 4)
            assert off.partition == LogPartition.of(name, p)
            assert off.offset == expected_next[p]
            expected_next[p] += 1
        assert manager.end_offsets(name) == [expected_next[p] for p in range(4)]
        with manager.tailer("g", name) as tailer:
            got = {(r.partition.partition, r.offset): (r.key, r.message) for r in drain(tailer)}
        for (key, value), off in zip(items, offsets, strict=True):
            assert got[(off.partition.partition, off.offset)] == (key, value)

    def test_append_batch_to_partition(self, manager: LogManager, new_log: NewLog) -> None:
        name = new_log(3)
        app = manager.appender(name)
        offsets = app.append_batch([(f"k{i}", bytes([i])) for i in range(10)], partition=2)
        assert offsets == [LogOffset(LogPartition.of(name, 2), i) for i in range(10)]
        offsets = app.append_batch([("a", b"x"), ("b", b"y")], partition=2)
        assert [o.offset for o in offsets] == [10, 11]
        with manager.tailer("g", LogPartition.of(name, 2)) as tailer:
            records = drain(tailer)
        assert [(r.key, r.message) for r in records][:3] == [
            ("k0", b"\x00"),
            ("k1", b"\x01"),
            ("k2", b"\x02"),
        ]
        assert [r.offset for r in records] == list(range(12))

    def test_append_empty_batch(self, manager: LogManager, new_log: NewLog) -> None:
        name = new_log(2)
        assert manager.appender(name).append_batch([]) == []
        assert manager.end_offsets(name) == [0, 0]

    def test_keys_and_values_round_trip(self, manager: LogManager, new_log: NewLog) -> None:
        name = new_log(1)
        app = manager.appender(name)
        samples = [("", b""), ("clé-日本", b"\x00\xff" * 100), ("\U0001f600", bytes(range(256)))]
        for key, value in samples:
            app.append_to(0, key, value)
        app.append_batch(samples, partition=0)
        with manager.tailer("g", name) as tailer:
            assert [(r.key, r.message) for r in drain(tailer)] == samples * 2

    @pytest.mark.parametrize("value", ["text", 42, {"a": 1}, None])
    def test_non_bytes_without_codec_is_a_type_error(
        self, manager: LogManager, new_log: NewLog, value
    ) -> None:
        name = new_log(1)
        app = manager.appender(name)
        kind = type(value).__name__
        with pytest.raises(TypeError, match=rf"log values must be bytes, got {kind}; pass a codec"):
            app.append("k", value)
        with pytest.raises(TypeError, match=rf"log values must be bytes, got {kind}; pass a codec"):
            app.append_batch([("k", b"ok"), ("k", value)], partition=0)
        assert manager.end_offsets(name) == [0]

    def test_keyed_batch_with_a_bad_value_writes_nothing(
        self, manager: LogManager, new_log: NewLog
    ) -> None:
        name = new_log(4)
        items = [(f"key-{i}", b"ok") for i in range(20)] + [("last", "not bytes")]
        assert len({partition_for_key(k, 4) for k, _ in items}) == 4
        with pytest.raises(TypeError, match="log values must be bytes, got str"):
            manager.appender(name).append_batch(items)
        assert manager.end_offsets(name) == [0, 0, 0, 0]

    @pytest.mark.parametrize("key", [None, 7, b"bytes"])
    def test_key_must_be_a_string(self, manager: LogManager, new_log: NewLog, key) -> None:
        name = new_log(1)
        with pytest.raises(TypeError, match=rf"log keys must be str, got {type(key).__name__}"):
            manager.appender(name).append_to(0, key, b"v")
        assert manager.end_offsets(name) == [0]

    def test_bytes_like_values_are_read_back_as_bytes(
        self, manager: LogManager, new_log: NewLog
    ) -> None:
        name = new_log(1)
        app = manager.appender(name)
        app.append_to(0, "a", bytearray(b"array"))
        app.append_to(0, "b", memoryview(b"view"))
        with manager.tailer("g", name) as tailer:
            messages = [r.message for r in drain(tailer)]
        assert messages == [b"array", b"view"]
        assert all(type(m) is bytes for m in messages)

    def test_codec_is_applied_by_appender_and_tailer(
        self, manager: LogManager, new_log: NewLog, json_codec
    ) -> None:
        name = new_log(2)
        app = manager.appender(name, codec=json_codec)
        app.append("a", {"n": 1})
        app.append_to(1, "b", {"n": 2})
        app.append_batch([("c", {"n": 3}), ("d", [4])])
        assert json_codec.encoded == 4
        with manager.tailer("decoded", name, codec=json_codec) as tailer:
            messages = sorted(drain(tailer), key=lambda r: r.key)
        assert [m.message for m in messages] == [{"n": 1}, {"n": 2}, {"n": 3}, [4]]
        assert json_codec.decoded == 4
        with manager.tailer("raw", name) as raw:
            values = sorted(r.message for r in drain(raw))
        assert values == sorted([b'{"n": 1}', b'{"n": 2}', b'{"n": 3}', b"[4]"])

    def test_closed_appender(self, manager: LogManager, new_log: NewLog) -> None:
        name = new_log(1)
        app = manager.appender(name)
        app.append("k", b"v")
        app.close()
        assert app.closed
        with pytest.raises(LogClosedError, match="is closed"):
            app.append("k", b"v")
        with pytest.raises(LogClosedError, match="is closed"):
            app.append_batch([("k", b"v")], partition=0)
        # another appender still works
        assert manager.appender(name).append("k", b"w").offset == 1

    def test_appender_is_thread_safe(self, manager: LogManager, new_log: NewLog) -> None:
        name = new_log(2)
        app = manager.appender(name)

        def work(t: int) -> None:
            for i in range(200):
                app.append(f"t{t}", f"{t}:{i}".encode())

        threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert sum(manager.end_offsets(name)) == 800
        with manager.tailer("g", name) as tailer:
            records = drain(tailer)
        assert len(records) == 800
        for t in range(4):
            mine = [int(r.message.split(b":")[1]) for r in records if r.key == f"t{t}"]
            assert mine == list(range(200))
        for rs in by_partition(records).values():
            assert [r.offset for r in rs] == list(range(len(rs)))


class TestTailerReads:
    def test_reads_everything_exactly_once(self, manager: LogManager, new_log: NewLog) -> None:
        name = new_log(3)
        app = manager.appender(name)
        sent = {app.append(f"k{i}", f"m{i}".encode()).partition.partition for i in range(100)}
        assert sent == {0, 1, 2}
        with manager.tailer("g", name) as tailer:
            assert tailer.assignments == [LogPartition.of(name, p) for p in range(3)]
            records = drain(tailer)
            assert tailer.read(0) is None
        assert sorted(r.message for r in records) == sorted(f"m{i}".encode() for i in range(100))
        for p, rs in by_partition(records).items():
            assert [r.offset for r in rs] == list(range(manager.end_offsets(name)[p]))

    def test_record_fields(self, manager: LogManager, new_log: NewLog) -> None:
        name = new_log(2)
        before = time.time_ns() // 1_000_000
        off = manager.appender(name).append_to(1, "the-key", b"value")
        after = time.time_ns() // 1_000_000
        with manager.tailer("g", name) as tailer:
            rec = tailer.read(1)
        assert rec is not None
        assert (rec.message, rec.key, rec.offset) == (b"value", "the-key", 0)
        assert rec.partition == LogPartition.of(name, 1)
        assert rec.log_offset == off
        assert before <= rec.timestamp <= after

    def test_iteration_stops_at_the_end(self, manager: LogManager, new_log: NewLog) -> None:
        name = new_log(2)
        fill(manager, name, {0: 5, 1: 5})
        with manager.tailer("g", name) as tailer:
            assert len(list(tailer)) == 10
            assert list(tailer) == []

    def test_tailer_of_chosen_partitions(self, manager: LogManager, new_log: NewLog) -> None:
        name = new_log(3)
        fill(manager, name, {0: 2, 1: 3, 2: 4})
        chosen = [LogPartition.of(name, 2), LogPartition.of(name, 0)]
        with manager.tailer("g", chosen) as tailer:
            assert tailer.assignments == chosen
            counts = {p: len(rs) for p, rs in by_partition(drain(tailer)).items()}
        assert counts == {0: 2, 2: 4}
        with manager.tailer("g", LogPartition.of(name, 1)) as tailer:
            assert [r.message for r in drain(tailer)] == [b"p1-0", b"p1-1", b"p1-2"]

    def test_tailer_over_several_logs(self, manager: LogManager, new_log: NewLog) -> None:
        a, b = new_log(1), new_log(2)
        fill(manager, a, {0: 2})
        fill(manager, b, {1: 3})
        parts = [LogPartition.of(a, 0), LogPartition.of(b, 1)]
        with manager.tailer("g", parts) as tailer:
            records = drain(tailer)
            tailer.commit()
        assert sorted((str(r.partition.name), r.offset) for r in records) == [
            (a, 0),
            (a, 1),
            (b, 0),
            (b, 1),
            (b, 2),
        ]
        assert manager.committed(a, "g") == [2]
        assert manager.committed(b, "g") == [None, 3]

    def test_read_batch(self, manager: LogManager, new_log: NewLog) -> None:
        name = new_log(1)
        fill(manager, name, {0: 10})
        with manager.tailer("g", name) as tailer:
            first = tailer.read_batch(4)
            assert [r.offset for r in first] == [0, 1, 2, 3]
            assert tailer.position(LogPartition.of(name, 0)) == 4
            assert tailer.read(0).offset == 4
            assert [r.offset for r in tailer.read_batch(1)] == [5]
            rest = tailer.read_batch(100)
            assert [r.offset for r in rest] == [6, 7, 8, 9]
            assert tailer.read_batch(100, timeout=0.05) == []

    def test_read_batch_spans_batches_and_partitions(
        self, manager: LogManager, new_log: NewLog
    ) -> None:
        name = new_log(2)
        fill(manager, name, {0: 5, 1: 5})
        with manager.tailer("g", name) as tailer:
            got = tailer.read_batch(8)
            assert len(got) == 8
            assert len(tailer.read_batch(8)) == 2
            assert len({(r.partition, r.offset) for r in got}) == 8

    def test_read_batch_rejects_non_positive_size(
        self, manager: LogManager, new_log: NewLog
    ) -> None:
        name = new_log(1)
        fill(manager, name, {0: 1})
        with (
            manager.tailer("g", name) as tailer,
            pytest.raises(ValueError, match="max_records must be at least 1, got 0"),
        ):
            tailer.read_batch(0)

    def test_read_batch_with_codec(self, manager: LogManager, new_log: NewLog, json_codec) -> None:
        name = new_log(1)
        manager.appender(name, json_codec).append_batch([("k", i) for i in range(5)], partition=0)
        with manager.tailer("g", name, codec=json_codec) as tailer:
            assert [r.message for r in tailer.read_batch(10)] == [0, 1, 2, 3, 4]

    def test_read_timeout_returns_none_after_the_timeout(
        self, manager: LogManager, new_log: NewLog
    ) -> None:
        name = new_log(2)
        with manager.tailer("g", name) as tailer:
            start = time.monotonic()
            assert tailer.read(0.2) is None
            elapsed = time.monotonic() - start
        assert 0.19 <= elapsed < 0.6

    def test_read_zero_timeout_returns_at_once(self, manager: LogManager, new_log: NewLog) -> None:
        name = new_log(1)
        with manager.tailer("g", name) as tailer:
            start = time.monotonic()
            assert tailer.read(0) is None
            assert time.monotonic() - start < 0.05

    def test_read_returns_a_record_appended_during_the_wait(
        self, manager: LogManager, new_log: NewLog
    ) -> None:
        name = new_log(2)
        app = manager.appender(name)
        appended_at: list[float] = []

        def later() -> None:
            time.sleep(0.15)
            appended_at.append(time.monotonic())
            app.append_to(1, "late", b"arrived")

        with manager.tailer("g", name) as tailer:
            thread = threading.Thread(target=later)
            start = time.monotonic()
            thread.start()
            rec = tailer.read(timeout=20)
            got_at = time.monotonic()
            thread.join()
        assert rec is not None
        assert (rec.key, rec.message) == ("late", b"arrived")
        assert got_at - start >= 0.14
        # Woken by the record, not by the end of the wait: how soon after the append depends on
        # the machine's load (a loaded broker took 0.74 s), so the bound is half the timeout.
        assert got_at - appended_at[0] < 10

    def test_read_after_close(self, manager: LogManager, new_log: NewLog) -> None:
        name = new_log(1)
        fill(manager, name, {0: 3})
        tailer = manager.tailer("g", name)
        assert tailer.read(1) is not None
        tailer.close()
        assert tailer.closed
        with pytest.raises(LogClosedError, match="tailer of group 'g' is closed"):
            tailer.read(0)
        with pytest.raises(LogClosedError, match="tailer of group 'g' is closed"):
            tailer.read_batch(10)
        tailer.close()  # idempotent


class TestReadArrow:
    def test_columns_and_equality_with_read(self, manager: LogManager, new_log: NewLog) -> None:
        pa = pytest.importorskip("pyarrow")
        name = new_log(2)
        app = manager.appender(name)
        app.append_batch([(f"k{i}", f"v{i}".encode()) for i in range(30)])
        app.append_to(0, "é", b"\x00")
        with manager.tailer("rows", name) as tailer:
            rows = sorted(
                (r.partition.partition, r.offset, r.timestamp, r.key, r.message)
                for r in drain(tailer)
            )
        got = []
        with manager.tailer("arrow", name) as tailer:
            while (batch := tailer.read_arrow(max_records=7)) is not None:
                assert batch.schema.names == ["partition", "offset", "timestamp", "key", "value"]
                assert batch.schema.field("key").type == pa.string()
                assert batch.schema.field("value").type == pa.binary()
                assert batch.schema.field("offset").type == pa.int64()
                assert batch.schema.field("timestamp").type == pa.int64()
                assert 0 < batch.num_rows <= 7
                got += [tuple(row.values()) for row in batch.to_pylist()]
            tailer.commit()
        assert sorted(got) == rows
        assert manager.committed(name, "arrow") == manager.end_offsets(name)

    def test_read_arrow_timeout(self, manager: LogManager, new_log: NewLog) -> None:
        pytest.importorskip("pyarrow")
        name = new_log(1)
        with manager.tailer("g", name) as tailer:
            start = time.monotonic()
            assert tailer.read_arrow(timeout=0.1) is None
            assert 0.09 <= time.monotonic() - start < 0.5

    def test_read_arrow_after_read_continues_where_read_stopped(
        self, manager: LogManager, new_log: NewLog
    ) -> None:
        pytest.importorskip("pyarrow")
        name = new_log(1)
        fill(manager, name, {0: 10})
        with manager.tailer("g", name) as tailer:
            assert [tailer.read(0).offset for _ in range(3)] == [0, 1, 2]
            offsets = []
            while (batch := tailer.read_arrow()) is not None:
                offsets += batch.column("offset").to_pylist()
            assert offsets == list(range(3, 10))
            assert tailer.position(LogPartition.of(name, 0)) == 10
            assert tailer.read(0) is None


class TestCommitAndPositions:
    def test_committed_is_the_next_offset(self, manager: LogManager, new_log: NewLog) -> None:
        name = new_log(2)
        fill(manager, name, {0: 5, 1: 2})
        p0, p1 = LogPartition.of(name, 0), LogPartition.of(name, 1)
        assert manager.committed(name, "g") == [None, None]
        with manager.tailer("g", p0) as tailer:
            for _ in range(3):
                tailer.read(0)
            assert tailer.commit() == {p0: 3}
        assert manager.committed(name, "g") == [3, None]
        with manager.tailer("g", [p0, p1]) as tailer:
            drain(tailer)
            assert tailer.commit_partition(p1) == LogOffset(p1, 2)
            assert manager.committed(name, "g") == [3, 2]
            assert tailer.commit() == {p0: 5, p1: 2}
        assert manager.committed(name, "g") == [5, 2]

    def test_new_tailer_resumes_from_committed_and_rereads_uncommitted(
        self, manager: LogManager, new_log: NewLog
    ) -> None:
        name = new_log(1)
        fill(manager, name, {0: 10})
        with manager.tailer("g", name) as tailer:
            assert [tailer.read(0).offset for _ in range(4)] == [0, 1, 2, 3]
            tailer.commit()
            assert [tailer.read(0).offset for _ in range(3)] == [4, 5, 6]  # never committed
        with manager.tailer("g", name) as tailer:
            assert [r.offset for r in drain(tailer)] == list(range(4, 10))

    def test_other_group_starts_from_the_beginning(
        self, manager: LogManager, new_log: NewLog
    ) -> None:
        name = new_log(1)
        fill(manager, name, {0: 5})
        with manager.tailer("g1", name) as tailer:
            drain(tailer)
            tailer.commit()
        with manager.tailer("g2", name) as tailer:
            assert [r.offset for r in drain(tailer)] == [0, 1, 2, 3, 4]
        assert manager.committed(name, "g2") == [None]

    def test_seek_and_position(self, manager: LogManager, new_log: NewLog, backend: str) -> None:
        name = new_log(2)
        fill(manager, name, {0: 10, 1: 3})
        p0, p1 = LogPartition.of(name, 0), LogPartition.of(name, 1)
        with manager.tailer("g", name) as tailer:
            assert tailer.position(p0) == 0
            tailer.seek(LogOffset(p0, 7))
            assert tailer.position(p0) == 7
            rec = tailer.read(0)
            others = []
            if backend == "kafka":  # partitions interleave in fetch order: p1 may come first
                while rec.partition != p0:
                    others.append(rec)
                    rec = tailer.read(0)
            assert all(r.partition == p1 for r in others)
            assert (rec.partition, rec.offset, rec.message) == (p0, 7, b"p0-7")
            assert tailer.position(p0) == 8
            tailer.seek(LogOffset(p0, 2))
            records = others + drain(tailer)
            assert [r.offset for r in records if r.partition == p0] == list(range(2, 10))
            assert [r.offset for r in records if r.partition == p1] == [0, 1, 2]
            assert (tailer.position(p0), tailer.position(p1)) == (10, 3)

    def test_seek_while_records_are_pending(self, manager: LogManager, new_log: NewLog) -> None:
        name = new_log(1)
        fill(manager, name, {0: 10})
        p0 = LogPartition.of(name, 0)
        with manager.tailer("g", name) as tailer:
            assert tailer.read(0).offset == 0  # the rest of the fetched chunk is pending
            tailer.seek(LogOffset(p0, 5))
            assert [r.offset for r in drain(tailer)] == [5, 6, 7, 8, 9]
            tailer.seek(LogOffset(p0, 9))
            assert tailer.read(0).offset == 9

    def test_seek_past_the_end_waits_for_that_offset(
        self, manager: LogManager, new_log: NewLog
    ) -> None:
        name = new_log(1)
        fill(manager, name, {0: 2})
        p0 = LogPartition.of(name, 0)
        with manager.tailer("g", name) as tailer:
            tailer.seek(LogOffset(p0, 4))
            assert tailer.read(0) is None
            app = manager.appender(name)
            for i in range(2, 6):
                app.append_to(0, "k", f"p0-{i}".encode())
            assert [r.offset for r in drain(tailer)] == [4, 5]

    def test_to_start_to_end_to_last_committed(self, manager: LogManager, new_log: NewLog) -> None:
        name = new_log(2)
        fill(manager, name, {0: 6, 1: 4})
        p0, p1 = LogPartition.of(name, 0), LogPartition.of(name, 1)
        with manager.tailer("g", name) as tailer:
            tailer.seek(LogOffset(p0, 2))
            tailer.seek(LogOffset(p1, 1))
            tailer.commit()
            tailer.to_end()
            assert (tailer.position(p0), tailer.position(p1)) == (6, 4)
            assert tailer.read(0) is None
            tailer.to_last_committed()
            assert (tailer.position(p0), tailer.position(p1)) == (2, 1)
            assert len(drain(tailer)) == 4 + 3
            tailer.to_start()
            assert (tailer.position(p0), tailer.position(p1)) == (0, 0)
            assert len(drain(tailer)) == 10
            manager.appender(name).append_to(1, "k", b"new")
            tailer.to_end()
            assert tailer.position(p1) == 5
        assert manager.committed(name, "g") == [2, 1]

    def test_position_of_unassigned_partition(self, manager: LogManager, new_log: NewLog) -> None:
        name = new_log(2)
        with manager.tailer("g", LogPartition.of(name, 0)) as tailer:
            with pytest.raises(ValueError, match=r"-01 is not assigned to this tailer"):
                tailer.position(LogPartition.of(name, 1))
            with pytest.raises(ValueError, match="is not assigned"):
                tailer.seek(LogOffset(LogPartition.of(name, 1), 0))

    def test_reset_commits_the_beginning(self, manager: LogManager, new_log: NewLog) -> None:
        name = new_log(2)
        fill(manager, name, {0: 3, 1: 3})
        p1 = LogPartition.of(name, 1)
        with manager.tailer("g", name) as tailer:
            drain(tailer)
            tailer.commit()
            assert manager.committed(name, "g") == [3, 3]
            tailer.reset(p1)
            assert manager.committed(name, "g") == [3, 0]
            assert tailer.position(p1) == 0
            assert [r.partition for r in drain(tailer)] == [p1, p1, p1]
            tailer.reset()
            assert manager.committed(name, "g") == [0, 0]
        with manager.tailer("g", name) as tailer:
            assert len(drain(tailer)) == 6

    def test_committed_positions_are_per_group(self, manager: LogManager, new_log: NewLog) -> None:
        name = new_log(1)
        fill(manager, name, {0: 4})
        for group, n in (("a", 1), ("b", 3)):
            with manager.tailer(group, name) as tailer:
                for _ in range(n):
                    tailer.read(0)
                tailer.commit()
        assert manager.committed(name, "a") == [1]
        assert manager.committed(name, "b") == [3]

    def test_wait_for(self, manager: LogManager, new_log: NewLog) -> None:
        name = new_log(1)
        app = manager.appender(name)
        offset = app.append("k", b"v")
        assert app.wait_for(offset, "g", 0.05) is False
        with manager.tailer("g", name) as tailer:
            tailer.read(0)
            tailer.commit()
        assert app.wait_for(offset, "g", 1.0) is True
        second = app.append("k", b"w")
        assert app.wait_for(second, "g", 0.05) is False


class TestOffsetForTimestamp:
    def test_earliest_offset_at_or_after(self, manager: LogManager, new_log: NewLog) -> None:
        name = new_log(1)
        app = manager.appender(name)
        for i in range(6):
            app.append_to(0, "k", bytes([i]))
            if i % 2:
                time.sleep(0.003)
        p0 = LogPartition.of(name, 0)
        with manager.tailer("g", name) as tailer:
            records = drain(tailer)
            stamps = [r.timestamp for r in records]
            assert stamps == sorted(stamps)
            assert len(set(stamps)) >= 3
            for ts in sorted(set(stamps)):
                expected = stamps.index(ts)
                assert tailer.offset_for_timestamp(p0, ts) == LogOffset(p0, expected)
                if ts - 1 not in stamps and expected > 0:
                    assert tailer.offset_for_timestamp(p0, ts - 1) == LogOffset(p0, expected)
            assert tailer.offset_for_timestamp(p0, 0) == LogOffset(p0, 0)
            assert tailer.offset_for_timestamp(p0, stamps[-1] + 1) is None

    def test_empty_partition(self, manager: LogManager, new_log: NewLog) -> None:
        name = new_log(1)
        with manager.tailer("g", name) as tailer:
            assert tailer.offset_for_timestamp(LogPartition.of(name, 0), 0) is None

    def test_seek_to_offset_for_timestamp(self, manager: LogManager, new_log: NewLog) -> None:
        name = new_log(1)
        app = manager.appender(name)
        app.append_to(0, "old", b"1")
        time.sleep(0.01)
        cut = time.time_ns() // 1_000_000 + 1
        time.sleep(0.01)
        app.append_to(0, "new", b"2")
        p0 = LogPartition.of(name, 0)
        with manager.tailer("g", name) as tailer:
            tailer.seek(tailer.offset_for_timestamp(p0, cut))
            assert [r.key for r in drain(tailer)] == ["new"]


class TestLagAndLatency:
    def test_lag_per_partition_and_aggregated(self, manager: LogManager, new_log: NewLog) -> None:
        name = new_log(3)
        fill(manager, name, {0: 3, 1: 5})
        assert manager.lag_per_partition(name, "g") == [
            LogLag(0, 3, 3),
            LogLag(0, 5, 5),
            LogLag(0, 0, 0),
        ]
        with manager.tailer("g", LogPartition.of(name, 0)) as tailer:
            tailer.read(0)
            tailer.read(0)
            tailer.commit()
        assert manager.lag_per_partition(name, "g") == [
            LogLag(2, 3, 1),
            LogLag(0, 5, 5),
            LogLag(0, 0, 0),
        ]
        assert manager.lag(name, "g") == LogLag(pos=2, end=8, lag=6, lost=0)
        with manager.tailer("g", name) as tailer:
            drain(tailer)
            tailer.commit()
        assert manager.lag(name, "g") == LogLag(8, 8, 0)
        assert [lag.lag for lag in manager.lag_per_partition(name, "g")] == [0, 0, 0]

    def test_latency_is_zero_without_lag(self, manager: LogManager, new_log: NewLog) -> None:
        name = new_log(1)
        fill(manager, name, {0: 2})
        with manager.tailer("g", name) as tailer:
            drain(tailer)
            tailer.commit()
        (latency,) = manager.latency_per_partition(name, "g", now_ms=10**13)
        assert latency.lag == LogLag(2, 2, 0)
        assert latency.latency_ms == 0
        assert manager.latency(name, "g").latency_ms == 0

    def test_latency_is_now_minus_last_processed_append_time(
        self, manager: LogManager, new_log: NewLog
    ) -> None:
        name = new_log(2)
        app = manager.appender(name)
        app.append_to(0, "first", b"1")
        app.append_to(0, "second", b"2")
        with manager.tailer("g", LogPartition.of(name, 0)) as tailer:
            processed = tailer.read(0)
            tailer.commit()
        now = processed.timestamp + 12_345
        lat0, lat1 = manager.latency_per_partition(name, "g", now_ms=now)
        assert lat0 == Latency(processed.timestamp, now, LogLag(1, 2, 1), "first")
        assert lat0.latency_ms == 12_345
        assert lat1.latency_ms == 0  # nothing to process
        assert manager.latency(name, "g").latency_ms >= 0
        assert manager.latency(name, "g").lower == processed.timestamp

    def test_latency_without_commit_is_zero_not_huge(
        self, manager: LogManager, new_log: NewLog
    ) -> None:
        name = new_log(1)
        fill(manager, name, {0: 3})
        (latency,) = manager.latency_per_partition(name, "never", now_ms=10**13)
        assert latency.lag.lag == 3
        assert latency.lower == 0
        assert latency.latency_ms == 0


class TestTailerConflicts:
    def test_one_live_tailer_per_group_and_partition(
        self, manager: LogManager, new_log: NewLog
    ) -> None:
        name = new_log(2)
        first = manager.tailer("g", name)
        with pytest.raises(TailerConflictError, match=r"a tailer of group 'g' already reads"):
            manager.tailer("g", name)
        with pytest.raises(TailerConflictError, match=r"-01; close it first|-01 in this process"):
            manager.tailer("g", LogPartition.of(name, 1))
        other = manager.tailer("other", name)  # another group is fine
        other.close()
        first.close()
        again = manager.tailer("g", name)
        assert again.assignments == first.assignments
        again.close()

    def test_different_partitions_of_one_group(self, manager: LogManager, new_log: NewLog) -> None:
        name = new_log(2)
        fill(manager, name, {0: 1, 1: 1})
        a = manager.tailer("g", LogPartition.of(name, 0))
        b = manager.tailer("g", LogPartition.of(name, 1))
        assert a.read(0).partition.partition == 0
        assert b.read(0).partition.partition == 1
        a.close()
        b.close()

    def test_failed_tailer_creation_leaves_no_claim(
        self, manager: LogManager, new_log: NewLog
    ) -> None:
        name = new_log(2)
        holder = manager.tailer("g", LogPartition.of(name, 1))
        with pytest.raises(TailerConflictError):
            manager.tailer("g", name)
        manager.tailer("g", LogPartition.of(name, 0)).close()  # partition 0 was not claimed
        holder.close()

    def test_manager_close_closes_tailers(self, manager: LogManager, new_log: NewLog) -> None:
        name = new_log(1)
        tailer = manager.tailer("g", name)
        manager.close()
        assert tailer.closed
        with pytest.raises(LogClosedError):
            manager.tailer("g2", name)


class TestBackendNeutralAccess:
    """`commit_position` and `describe`: what Spark jobs use on any manager (read_arrow is
    covered with the other reads above)."""

    def test_commit_position_without_a_tailer(self, manager: LogManager, new_log: NewLog) -> None:
        name = new_log(2)
        fill(manager, name, {0: 6, 1: 2})
        manager.commit_position(LogPartition.of(name, 0), "g", 4)
        assert manager.committed(name, "g") == [4, None]
        manager.commit_position(LogPartition.of(name, 0), "g", 1)  # backwards too
        with manager.tailer("g", LogPartition.of(name, 0)) as tailer:
            assert [r.offset for r in drain(tailer)] == [1, 2, 3, 4, 5]

    def test_describe(self, manager: LogManager, new_log: NewLog, backend: str) -> None:
        import pickle

        name = new_log(3)
        if backend_type(backend).description() is None:  # no other process opens its logs
            with pytest.raises(ConfigError, match="memory backend, which lives in one process"):
                manager.describe(name)
            return
        description = manager.describe(name)
        assert (description.backend, description.name, description.partitions) == (
            backend,
            Name.of(name).urn,
            3,
        )
        assert pickle.loads(pickle.dumps(description)) == description

    def test_describe_missing_log(self, manager: LogManager, unique_name) -> None:
        with pytest.raises(LogNotFoundError):
            manager.describe(unique_name("missing"))
