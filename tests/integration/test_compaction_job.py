"""jobs/retention.py compact on a local log the configuration compacts (`compact = true`): the
archive keeps every version, the hot log the latest per key at its offset, a dry run changes
nothing, and the Spark source reads offset ranges across the gaps compaction left (also ranges
that begin or end in one)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from spark_session import ROOT
from test_retention_job import _archived, _run, _write_history

from streamcore.config import load_config
from streamcore.log import open_log_manager
from streamcore.log.local.reader import PartitionCursor

pytestmark = pytest.mark.spark

STREAM = "hist/prices"


@pytest.fixture(autouse=True)
def compacted_hist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The project's configuration, with the logs of namespace hist compacted."""
    config = tmp_path / "streamcore.toml"
    config.write_text(
        (ROOT / "include" / "streamcore.toml").read_text()
        + '\n[[log.match]]\nnamespace = "hist"\nconfig = "default"\ncompact = true\n'
    )
    monkeypatch.setenv("STREAMCORE_CONFIG", str(config))


def _hot(stream: str) -> dict[int, list[tuple[int, str, bytes]]]:
    """(offset, key, value) of every record the local log holds, per partition."""
    manager = open_log_manager(load_config())
    try:
        local = manager.backend_for(stream)
        out = {}
        for p in range(local.size(stream)):
            cursor = PartitionCursor(
                local.partition_folder(local.resolve_partitions(stream)[p]), ""
            )
            rows = []
            while batch := cursor.next_records(1000):
                rows += [(o, k, v) for o, _, k, v in batch]
            assert cursor.lost == 0
            cursor.close()
            out[p] = rows
        return out
    finally:
        manager.close()


def test_compact_keeps_the_latest_per_key_and_spark_reads_across_the_gaps(spark: Any) -> None:
    from jobs.spark.logs.streams import read_stream

    written = _write_history(STREAM, segment_bytes=2048)  # keys k0..k12, 140 records
    code, archived = _run("archive", "--streams", STREAM, "--horizon", "1d")
    assert code == 0, archived
    before = _hot(STREAM)
    folder = Path(os.environ["STREAMCORE_HOME"]) / "log" / "hist-prices"
    files = {p: p.read_bytes() for p in folder.rglob("*.log")}

    code, dry = _run("compact", "--dry-run")
    assert code == 0 and dry["dry_run"], dry
    assert {p: p.read_bytes() for p in folder.rglob("*.log")} == files
    assert _hot(STREAM) == before

    code, done = _run("compact")
    assert code == 0, done
    result = done["streams"][STREAM]
    assert result["records_removed"] == dry["streams"][STREAM]["records_removed"] > 0
    assert result["keys_compacted"] >= 13 and result["bytes_after"] < result["bytes_before"]
    after = _hot(STREAM)
    assert (
        sum(map(len, before.values())) - sum(map(len, after.values())) == result["records_removed"]
    )
    for p, rows in after.items():
        originals = {o: (k, v) for o, k, v in before[p]}
        assert all(originals[o] == (k, v) for o, k, v in rows)  # survivors kept their offsets
        assert {k for _, k, _ in rows} == {k for _, k, _ in before[p]}  # every key still there
    assert len(_archived(STREAM)) == archived["archived"]  # the archive keeps every version

    manager = open_log_manager(load_config())
    try:
        ends = manager.end_offsets(STREAM)
        full = read_stream(spark, manager, STREAM, {p: (0, e) for p, e in enumerate(ends)})
        got = sorted((r["partition"], r["offset"]) for r in full.collect())
        assert got == sorted((p, o) for p, rows in after.items() for o, _, _ in rows)
        kept = [o for o, _, _ in after[0]]
        first = kept[0]
        assert first > 2  # the oldest versions went
        starts_in_gap = read_stream(spark, manager, STREAM, {0: (first - 2, first + 2)})
        assert [r["offset"] for r in starts_in_gap.collect()] == kept[:2]
        only_gap = read_stream(spark, manager, STREAM, {0: (0, first)})
        assert only_gap.collect() == []
    finally:
        manager.close()

    code, again = _run("compact", "--streams", STREAM)
    assert code == 0 and again["streams"][STREAM]["records_removed"] == 0, again
    assert len(after[0]) + len(after[1]) < len(written)


def test_a_stream_the_configuration_does_not_compact_is_skipped(
    spark: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("STREAMCORE_CONFIG")
    _write_history("plain/events", days=1)
    code, summary = _run("compact", "--streams", "plain/events")
    assert code == 0, summary
    assert "compact = true" in summary["streams"]["plain/events"]["skipped"]
    assert summary["records_removed"] == 0
