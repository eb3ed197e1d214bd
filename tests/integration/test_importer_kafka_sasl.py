"""The importer on the broker's SASL/PLAIN listener, with the credentials only in the streamcore
TOML file that STREAMCORE_CONFIG names: the Python client (topics, offsets, positions) and Spark's
Kafka sink and source (executors, through the description's `kafka.*` options) both log in. A
wrong password fails within the config's timeout with an error naming authentication."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from kafka_broker import SASL_PASSWORD, SASL_USER, scratch_prefix
from spark_session import FAST, read_delta, run_importer

from streamcore.config import load_config
from streamcore.errors import BrokerAuthenticationError
from streamcore.log import open_log_manager

pytestmark = [pytest.mark.spark, pytest.mark.kafka, pytest.mark.timeout(1200)]
# They would override the file's routing and listener.
ENV_OVERRIDES = (
    "STREAMCORE_LOG_BACKEND",
    "STREAMCORE_KAFKA_BOOTSTRAP_SERVERS",
    "STREAMCORE_KAFKA_TOPIC_PREFIX",
)


def _config_file(tmp_path: Path, address: str, password: str) -> Path:
    path = tmp_path / f"streamcore-{password}.toml"
    path.write_text(
        f"""
[log.configs.secured]
type = "kafka"
bootstrap_servers = "{address}"
topic_prefix = "{scratch_prefix()}"
timeout = "10s"

[log.configs.secured.properties]
"security.protocol" = "SASL_PLAINTEXT"
"sasl.mechanisms" = "PLAIN"
"sasl.username" = "{SASL_USER}"
"sasl.password" = "{password}"

[[log.match]]
namespace = "import"
config = "secured"
"""
    )
    return path


def test_importer_through_sasl(
    spark, kafka_sasl_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for variable in ENV_OVERRIDES:
        monkeypatch.delenv(variable, raising=False)
    config = _config_file(tmp_path, kafka_sasl_bootstrap, SASL_PASSWORD)
    monkeypatch.setenv("STREAMCORE_CONFIG", str(config))
    code, produced = run_importer("produce", "--count", "120", "--partitions", "2", "--seed", "3")
    assert code == 0, produced
    code, summary = run_importer("consume", *FAST)
    assert code == 0, summary
    assert (summary["read"], summary["imported"]) == (120, 120)
    table = read_delta(Path(os.environ["STREAMCORE_HOME"]) / "delta" / "repository")
    assert len(set(table.column("id").to_pylist())) == 120
    with open_log_manager(load_config()) as manager:
        assert manager.describe("import/docs").backend == "kafka"
        ends = manager.end_offsets("import/docs")
        assert manager.committed("import/docs", "import/repository") == ends


def test_wrong_password_fails_clearly(
    kafka_sasl_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for variable in ENV_OVERRIDES:
        monkeypatch.delenv(variable, raising=False)
    config = _config_file(tmp_path, kafka_sasl_bootstrap, "not-the-password")
    monkeypatch.setenv("STREAMCORE_CONFIG", str(config))
    with (
        open_log_manager(load_config()) as manager,
        pytest.raises(BrokerAuthenticationError) as info,
    ):
        manager.exists("import/docs")
    message = str(info.value)
    assert "refused to authenticate user streamcore" in message
    assert "sasl.password" in message
