"""Windowed faults: a DSL tumbling-window count with `emit="final"` in a processor SIGKILLed at
random records, 20 times on the local log and 6 times on Kafka, some restarts without the local
stores (full restores from the changelog), then drained. Every final window the run emitted
carries the reference count of its records (no loss, no double count: outputs may repeat a window
after a crash, never with another value), every window the input closes is emitted, and a replay
of the whole input from the log's start by a fresh computation emits exactly the same final
records per key, byte for byte (docs/aggregations.md, "Windows")."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import killed_child
import pytest

from streamcore.codecs import get_codec
from streamcore.computation import Settings, StreamProcessor, Topology
from streamcore.config import LogDefaults, StreamcoreConfig
from streamcore.log import LogManager
from streamcore.log.local.manager import LocalLogManager
from streamcore.record import Record
from streamcore.state.windows import TumblingWindows
from streamcore.watermark import Watermark

IN, OUT = "app/clicks", "app/minutes"
PARTITIONS, READ_BATCH = 2, 20
SIZE, GRACE = 10_000, 3_000
CODEC = get_codec("avro")

CHILD = """
import sys, threading
from streamcore.config import LogDefaults, StreamcoreConfig
from streamcore.log.local.manager import LocalLogManager
sys.path[:0] = [sys.argv[3], sys.argv[3] + "/.."]
from test_windowed_faults import windowed_processor

root, state, kafka_prefix = sys.argv[1], sys.argv[2], sys.argv[4]
if kafka_prefix:
    from kafka_broker import ensure_broker
    from log_fixtures import KAFKA_TEST_CONFIG
    from streamcore.log.kafka import KafkaLogManager

    manager = KafkaLogManager(ensure_broker(), topic_prefix=kafka_prefix, config=KAFKA_TEST_CONFIG)
else:
    manager = LocalLogManager(root + "/log", config=StreamcoreConfig(home=root, log=LogDefaults()))
    manager.heartbeat_interval, manager.session_timeout = 0.1, 0.8  # a killed member leaves fast
processor = windowed_processor(manager, state, announce=True).start()
print("ready", flush=True)
threading.Event().wait()
"""


def _announce(key, value) -> None:
    print("rec", flush=True)


def windowed_topology(name: str, out: str, announce: bool = False) -> Topology:
    builder = Topology.builder()
    stream = builder.stream(IN, codec="json", name=name)
    if announce:
        stream = stream.peek(_announce)
    (
        stream.group_by_key()
        .windowed_by(TumblingWindows(SIZE, grace_ms=GRACE))
        .count(emit="final", late=f"{name}-late")
        .to_stream()
        .to(out, codec="json")
    )
    return builder.build()


def windowed_processor(
    manager: LogManager,
    state: str | Path,
    announce: bool = False,
    name: str = "app/minutes-count",
    out: str = OUT,
) -> StreamProcessor:
    settings = Settings(state_dir=state, read_batch=READ_BATCH, drain_quiet=0.3)
    settings.set_partitions(IN, PARTITIONS)
    return StreamProcessor(manager, windowed_topology(name, out, announce), settings)


def run_until_killed(root: Path, state: Path, kill_at: int, kafka_prefix: str) -> None:
    """Start the child processor and SIGKILL it at its `kill_at`-th record."""
    here = str(Path(__file__).parent)
    killed_child.run_until_killed(
        root, CHILD, [str(root), str(state), here, kafka_prefix], ("rec", kill_at)
    )


def reference(events: list[tuple[str, int]], partitions: dict[str, int]) -> dict:
    """Per (key, window start): the count of the window's on-time records, for the windows closed
    by their partition's final stream time (stream time is per task: per partition here)."""
    stream_time: dict[int, int] = {}
    counts: dict[tuple[str, int], int] = {}
    for key, t in events:
        task = partitions[key]
        now = stream_time[task] = max(stream_time.get(task, -1), t)
        start = t - t % SIZE
        if start + SIZE + GRACE > now:  # on time
            counts[key, start] = counts.get((key, start), 0) + 1
    return {
        window: n
        for window, n in counts.items()
        if window[1] + SIZE + GRACE <= stream_time[partitions[window[0]]]
    }


def final_records(manager: LogManager, stream: str) -> list[tuple[str, bytes]]:
    with manager.tailer("test/reader", stream, CODEC) as tailer:
        return [(rec.message.key, rec.message.data) for rec in tailer]


def kill_trials(manager: LogManager, tmp_path: Path, trials: int, kafka_prefix: str = "") -> None:
    rng = random.Random(2028)
    manager.create(IN, PARTITIONS)
    appender = manager.appender(IN, CODEC)
    state = tmp_path / "state"
    events: list[tuple[str, int]] = []
    partitions: dict[str, int] = {}  # the partition of each key (a stable partitioner)
    t = 1_000_000
    for trial in range(trials):
        batch = []
        for _ in range(60):
            t += rng.randrange(0, 700)
            at = t - rng.randrange(0, 5_000)  # out of order, some beyond the grace
            key = f"u{rng.randrange(6)}"
            batch.append((key, Record(key, b"1", Watermark.of(at).value)))
            events.append((key, at))
        for (key, _record), offset in zip(batch, appender.append_batch(batch), strict=True):
            partitions[key] = offset.partition.partition
        if trial % 4 == 3 and state.exists():
            shutil.rmtree(state)  # a new machine: the next start restores from the changelog
        run_until_killed(tmp_path, state, rng.randint(1, 55), kafka_prefix)
    with windowed_processor(manager, state) as processor:
        assert processor.drain_and_stop(120.0)
    expected = reference(events, partitions)
    live = final_records(manager, OUT)
    seen: dict[tuple[str, int], bytes] = {}
    first_order: list[tuple[str, bytes]] = []
    for key, data in live:
        window = (key, json.loads(data)["start"])
        if window in seen:
            assert seen[window] == data, f"window {window} emitted with two values"
            continue
        seen[window] = data
        first_order.append((key, data))
    assert {w: json.loads(d)["value"] for w, d in seen.items()} == expected
    # A replay from the log's start, by a fresh computation (its own group and stores).
    with windowed_processor(
        manager, tmp_path / "replay-state", name="app/minutes-replay", out="app/minutes-replay"
    ) as replay:
        assert replay.drain_and_stop(120.0)
    # Byte for byte per key: the order across keys depends on how the tasks' reads interleave.
    assert per_key(final_records(manager, "app/minutes-replay")) == per_key(first_order)


def per_key(records: list[tuple[str, bytes]]) -> dict[str, list[bytes]]:
    out: dict[str, list[bytes]] = {}
    for key, data in records:
        out.setdefault(key, []).append(data)
    return out


def test_a_windowed_count_survives_20_kills_and_replays_byte_for_byte(tmp_path: Path) -> None:
    manager = LocalLogManager(
        tmp_path / "log", config=StreamcoreConfig(home=tmp_path, log=LogDefaults())
    )
    manager.heartbeat_interval, manager.session_timeout = 0.1, 0.8
    kill_trials(manager, tmp_path, 20)
    manager.close()


@pytest.mark.kafka
def test_a_windowed_count_on_kafka_survives_6_kills_and_replays_byte_for_byte(
    tmp_path: Path,
) -> None:
    from kafka_broker import ensure_broker, scratch_prefix
    from log_fixtures import KAFKA_TEST_CONFIG

    from streamcore.log.kafka import KafkaLogManager

    prefix = scratch_prefix()
    manager = KafkaLogManager(
        ensure_broker(), topic_prefix=prefix, config=KAFKA_TEST_CONFIG, timeout=10.0
    )
    kill_trials(manager, tmp_path, 6, prefix)
    manager.close()
