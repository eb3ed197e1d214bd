"""`run_demo`: writes then consumes records on the local log and reports what it measured."""

from __future__ import annotations

from pathlib import Path

from streamcore.codecs import get_codec
from streamcore.config import LogDefaults, StreamcoreConfig
from streamcore.demo import DEMO_GROUP, DEMO_LOG, run_demo
from streamcore.log import LogPartition
from streamcore.log.local.manager import LocalLogManager


def test_run_demo_counts_rates_and_lag(tmp_path: Path) -> None:
    config = StreamcoreConfig(home=tmp_path, log=LogDefaults())
    calls: list[tuple[str, int, int]] = []
    summary = run_demo(
        20_000,
        4,
        batch=5_000,
        config=config,
        progress=lambda phase, done, total, elapsed: calls.append((phase, done, total)),
    )
    assert summary["written"] == summary["read"] == 20_000
    assert summary["lag_before"] == {"pos": 0, "end": 20_000, "lag": 20_000}
    assert summary["lag_after"] == {"pos": 20_000, "end": 20_000, "lag": 0}
    assert summary["key_mismatches"] == 0
    assert summary["log"] == "demo/records" and summary["codec"] == "avro"
    assert summary["write_records_per_s"] > 0 and summary["read_records_per_s"] > 0
    assert summary["write_mb_per_s"] > 0 and summary["read_mb_per_s"] > 0
    assert summary["encoded_bytes"] > 20_000 * 100
    assert summary["path"] == str(tmp_path / "log" / "demo-records")
    assert summary["disk_bytes"] >= summary["encoded_bytes"]
    # the final progress report of each phase is always made
    assert ("write", 20_000, 20_000) in calls and ("read", 20_000, 20_000) in calls

    m = LocalLogManager(config=config)
    try:
        assert m.end_offsets(DEMO_LOG) and sum(m.end_offsets(DEMO_LOG)) == 20_000
        assert m.list_groups(DEMO_LOG) == [DEMO_GROUP]
        key, raw, _ = m.record_at(LogPartition(DEMO_LOG, 0), 0)
        record = get_codec("avro").decode(raw)
        assert record.key == key and key.startswith("doc-")
        assert len(record.data) == 100 and record.data.startswith(key.encode() + b":")
    finally:
        m.close()


def test_run_demo_recreates_the_log(tmp_path: Path) -> None:
    config = StreamcoreConfig(home=tmp_path, log=LogDefaults())
    run_demo(1_000, 2, batch=300, config=config)
    summary = run_demo(500, 3, batch=300, config=config, codec="json")
    assert summary["written"] == summary["read"] == 500
    assert summary["lag_before"]["end"] == 500  # not 1500: the log was recreated
    assert summary["partitions"] == 3
    m = LocalLogManager(config=config)
    try:
        assert m.size(DEMO_LOG) == 3
    finally:
        m.close()
