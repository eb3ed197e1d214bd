"""One `dag.test()` of the retention DAG, for real (`dry_run` off): a week of back-dated history
of a compacted stream is archived to Delta, the segments past its 3-day retention are purged
once archived, the other archived segments keep the latest record per key, and `archive` is
optimized; the summary task keeps the per-stream table in the run record. A second stream that
cannot be archived is reported there and fails the run at its end, without stopping the first
stream's purge, compaction and maintenance. The job tasks run on a Spark Connect server
(docs/spark-connect.md)."""

from __future__ import annotations

import json
import time

import pytest
from airflow_harness import ROOT, dag_test, make_airflow_env, spark_connect

from streamcore.codecs import get_codec
from streamcore.config import load_config
from streamcore.log import LogPartition, open_log_manager
from streamcore.log.config import ARCHIVER
from streamcore.record import Record
from streamcore.watermark import Watermark

pytestmark = [pytest.mark.airflow, pytest.mark.spark]

STREAM = "hist/dag"
BROKEN = "hist/broken"
DAY_MS = 86_400_000


@pytest.mark.timeout(900)
def test_a_run_archives_then_purges_then_maintains(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    af = make_airflow_env(
        tmp_path_factory.mktemp("airflow-home"), tmp_path_factory.mktemp("sc-home")
    )
    config = af.streamcore_home / "streamcore.toml"  # the project's, with hist/ compacted
    config.write_text(
        (ROOT / "include" / "streamcore.toml").read_text()
        + '\n[[log.match]]\nnamespace = "hist"\nconfig = "default"\ncompact = true\n'
    )
    af.env["STREAMCORE_CONFIG"] = str(config)
    now = int(time.time() * 1000)
    manager = open_log_manager(load_config(config, home=af.streamcore_home))
    codec = get_codec("avro")
    try:
        manager.create(STREAM, 2, retention="3d", segment_bytes=2048)
        appender = manager.appender(STREAM)
        for n in range(140):  # a week, 20 records a day
            ts = now - 7 * DAY_MS + n * (DAY_MS // 20)
            record = Record(f"k{n % 10}", f"event-{n}".encode(), Watermark.of(ts).value)
            appender.append_batch([(record.key, codec.encode(record))], timestamps=[ts])
        manager.create(BROKEN, 1)
        manager.appender(BROKEN).append_batch([("k", b"x")], timestamps=[now - 2 * DAY_MS])
        # The archiver's position beyond the log's end: its batch is refused.
        manager.commit_position(LogPartition.of(BROKEN, 0), ARCHIVER, 10_000)
    finally:
        manager.close()
    conf = {"dry_run": False, "streams": [BROKEN, STREAM], "horizon": "1d"}
    with spark_connect(af, tmp_path_factory.mktemp("spark-connect")):
        run = dag_test(af, "streamcore_retention", conf)
    assert run["state"] == "failed", run
    steps = ("validate", "archive", "purge", "compact", "maintain", "summary")
    assert run["tasks"] == {**dict.fromkeys(steps, "success"), "archive_failures": "failed"}, run
    (path,) = (af.streamcore_home / "runs" / "retention").glob("*.json")
    record = json.loads(path.read_text())
    assert record["archive"]["failed_streams"] == [BROKEN]
    assert f"archive of {BROKEN} FAILED" in record["report"], record["report"]
    assert "beyond the end" in record["report"]
    archived = record["archive"]["streams"][STREAM]
    purged = record["purge"]["streams"][STREAM]
    compacted = record["compact"]["streams"][STREAM]
    assert not record["archive"]["dry_run"]
    assert all(record[step]["spark_connect"] for step in steps[1:-1]), record
    assert 100 < archived["archived"] < 140  # everything older than a day
    assert compacted["keys_compacted"] == 10 and compacted["records_removed"] > 0, compacted
    assert compacted["bytes_after"] < compacted["bytes_before"]
    assert purged["segments_purged"] > 0 and purged["held_by"] == {}, purged
    assert 0 < purged["records_purged"] <= archived["archived"]  # only what was archived
    optimize = record["maintain"]["tables"]["archive"]["optimize"]
    assert optimize["files_after"] <= optimize["files_before"]
    assert STREAM in record["report"] and "OPTIMIZE" in record["report"]
    assert "10 keys" in record["report"]
