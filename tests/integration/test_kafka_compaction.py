"""Key compaction on Kafka is the broker's (`cleanup.policy=compact`): a log LogConfig marks
`compact = true` becomes a compacted topic, the broker's log cleaner keeps the latest record per
key at its offset and removes deleted keys, and streamcore's readers (the tailer and the Spark
source) read across the gaps it leaves without taking them for a loss."""

from __future__ import annotations

import time
import tomllib
from pathlib import Path

import pytest
from kafka_broker import scratch_prefix

from streamcore.config import LogDefaults, StreamcoreConfig
from streamcore.log.config import LogConfig
from streamcore.log.unified import UnifiedLogManager

pytestmark = [pytest.mark.kafka, pytest.mark.spark]

NAME = "state/prices"
# Small segments that roll fast and a cleaner that takes any dirty segment, so the broker
# compacts within seconds; a tombstone stays readable for delete.retention.ms after that: 10 s,
# several polls of the loop below even on a loaded machine (at 100 ms a CI run under load read
# the log before that compaction and next after the tombstone had gone).
FAST_CLEANING = {
    "segment.ms": "300",
    "min.cleanable.dirty.ratio": "0.01",
    "min.compaction.lag.ms": "0",
    "delete.retention.ms": "10000",
}


def _manager(home: Path, bootstrap: str) -> UnifiedLogManager:
    text = f"""
[log.configs.default]
type = "local"
[log.configs.kafka]
type = "kafka"
bootstrap_servers = "{bootstrap}"
topic_prefix = "{scratch_prefix()}"
timeout = "10s"
[[log.match]]
namespace = "state"
config = "kafka"
compact = true
"""
    config = StreamcoreConfig(home=home, log=LogDefaults(partitions=1), table=tomllib.loads(text))
    return UnifiedLogManager(config, LogConfig.from_settings(config, environ={}))


def _read_all(manager: UnifiedLogManager, group: str) -> list[tuple[int, str, bytes]]:
    out = []
    with manager.tailer(group, NAME) as tailer:
        tailer.to_start()
        while (record := tailer.read(2.0)) is not None:
            out.append((record.offset, record.key, record.message))
    return out


@pytest.mark.timeout(300)
def test_the_broker_compacts_a_log_the_configuration_compacts(
    kafka_bootstrap: str, tmp_path: Path, spark
) -> None:
    from jobs.spark.logs.streams import read_stream

    manager = _manager(tmp_path, kafka_bootstrap)
    try:
        manager.create(NAME, 1, topic_config=FAST_CLEANING)
        kafka = manager.backend_for(NAME)
        assert kafka.topic_config(NAME)["cleanup.policy"] == "compact"
        assert kafka.describe(NAME).compacted
        appender = manager.appender(NAME)
        written = []
        for round_ in range(20):
            for k in range(5):
                value = f"k{k}-v{round_}".encode()
                (at,) = appender.append_batch([(f"k{k}", value)], partition=0)
                written.append((at.offset, f"k{k}", value))
            time.sleep(0.05)
        (gone,) = appender.append_batch([("k4", b"")], partition=0)  # a tombstone
        written.append((gone.offset, "k4", b""))
        appender.flush()
        deadline = time.monotonic() + 120
        seen = []
        while True:
            time.sleep(1.0)
            # A record after segment.ms rolls the segment holding the history, so the
            # cleaner may take it; "filler" keys never repeat.
            appender.append_batch([(f"filler-{time.monotonic_ns()}", b"x")], partition=0)
            appender.flush()
            found = _read_all(manager, f"test/reader-{time.monotonic_ns()}")
            history = [r for r in found if not r[1].startswith("filler")]
            seen.append(history)
            if "k4" not in {k for _, k, _ in history} or time.monotonic() > deadline:
                break
        by_offset = {o: (k, v) for o, k, v in written}
        latest = {k: v for _, k, v in written}
        # Compacted first with the tombstone still readable (delete.retention.ms), then without.
        newest = sorted({k: o for o, k, _ in written}.values())  # k4's is the tombstone
        assert newest in [[o for o, _, _ in h] for h in seen], seen
        assert all(by_offset[o] == (k, v) for o, k, v in history), "offsets kept their records"
        assert {k: v for _, k, v in history} == {k: v for k, v in latest.items() if v}, history

        ends = manager.end_offsets(NAME)
        rows = read_stream(spark, manager, NAME, {0: (0, ends[0])}).collect()
        assert [r["offset"] for r in rows] == [o for o, _, _ in found]  # across the gaps
    finally:
        manager.close()
