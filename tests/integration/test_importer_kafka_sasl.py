"""The importer on the broker's SASL/PLAIN listener, with the credentials only in the streamcore
TOML file that STREAMCORE_CONFIG names: the Python client (topics, offsets, positions) and Spark's
Kafka sink and source (executors, through the description's `kafka.*` options) both log in. A
wrong password fails within the config's timeout with an error naming authentication. A password
the file takes from the environment (`"${...}"`) logs in too (Spark-free: the log's own clients,
and the description's Spark options carry the resolved value)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from kafka_broker import SASL_PASSWORD, SASL_USER, scratch_prefix
from spark_session import FAST, read_delta, run_importer

from streamcore.config import load_config
from streamcore.errors import BrokerAuthenticationError, ConfigError
from streamcore.log import open_log_manager

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(1200)]
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


@pytest.mark.spark
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


def test_password_from_an_environment_variable(
    kafka_sasl_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`"sasl.password" = "${...}"`: the broker accepts the value of the variable, which the file
    never holds; the description (what a Spark driver sends executors) carries it, reprs don't."""
    for variable in ENV_OVERRIDES:
        monkeypatch.delenv(variable, raising=False)
    variable = "STREAMCORE_TEST_SASL_PASSWORD"
    config = _config_file(tmp_path, kafka_sasl_bootstrap, "${" + variable + "}")
    assert SASL_PASSWORD not in config.read_text()
    monkeypatch.setenv("STREAMCORE_CONFIG", str(config))
    monkeypatch.setenv(variable, SASL_PASSWORD)
    with open_log_manager(load_config()) as manager:
        manager.create("import/env-secret", 1)
        manager.appender("import/env-secret").append("k", b"authenticated")
        with manager.tailer("import/env-reader", "import/env-secret") as tailer:
            record = tailer.read(10)
        assert record is not None and bytes(record.message) == b"authenticated"
        description = manager.describe("import/env-secret")
        backend = manager.log_config.configs["secured"]
        assert SASL_PASSWORD not in repr(description) + repr(backend) + repr(manager)
    jaas = description.spark_options()["kafka.sasl.jaas.config"]
    assert f'password="{SASL_PASSWORD}"' in jaas
    # unset: the config is routed to, so loading it names the variable and the property
    monkeypatch.delenv(variable)
    with pytest.raises(ConfigError, match=rf'"sasl.password" takes \$\{{{variable}\}}.*not set'):
        open_log_manager(load_config())
