"""The importer with `import/docs` on the real Kafka broker: produced by Spark's Kafka sink, read
back through Spark's Kafka source by offset ranges, positions committed to the Kafka group."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from kafka_broker import scratch_prefix
from spark_session import FAST, read_delta, run_importer

from streamcore.config import load_config
from streamcore.log import open_log_manager

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.timeout(1200)]


def test_importer_on_kafka(spark, kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMCORE_LOG_BACKEND", "kafka")
    monkeypatch.setenv("STREAMCORE_KAFKA_BOOTSTRAP_SERVERS", kafka_bootstrap)
    monkeypatch.setenv("STREAMCORE_KAFKA_TOPIC_PREFIX", scratch_prefix())
    code, produced = run_importer("produce", "--count", "250", "--partitions", "2", "--seed", "9")
    assert code == 0, produced
    assert produced["documents"] == 250
    code, summary = run_importer("consume", *FAST)
    assert code == 0, summary
    assert (summary["read"], summary["imported"]) == (250, 250)
    table = read_delta(Path(os.environ["STREAMCORE_HOME"]) / "delta" / "repository")
    assert len(set(table.column("id").to_pylist())) == 250
    with open_log_manager(load_config()) as manager:
        ends = manager.end_offsets("import/docs")
        assert manager.committed("import/docs", "import/repository") == ends
    code, again = run_importer("consume", *FAST)
    assert code == 0 and again["read"] == 0
