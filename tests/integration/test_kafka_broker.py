"""`scripts/kafka.sh` and the `kafka_bootstrap` fixture: the shared test broker answers, a private
broker on other ports goes through start / status / idempotent start / stop, start-up failures
say what is wrong, and a manager whose broker goes away raises within its timeout."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

import pytest

from streamcore.errors import BrokerUnavailableError
from streamcore.log import LogPartition
from streamcore.log.kafka import KafkaLogManager

pytestmark = pytest.mark.kafka
ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "kafka.sh"


def run(command: str, env: dict[str, str] | None = None, timeout: float = 90):
    return subprocess.run(
        [str(SCRIPT), command],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def private_broker(tmp_path: Path) -> tuple[dict[str, str], str]:
    """Environment for `scripts/kafka.sh` of a second broker on free ports in a temporary home,
    and its address."""
    port = free_port()
    env = {
        "STREAMCORE_KAFKA_PORT": str(port),
        "STREAMCORE_KAFKA_CONTROLLER_PORT": str(free_port()),
        "STREAMCORE_KAFKA_SASL_PORT": str(free_port()),
        "STREAMCORE_KAFKA_HOME": str(tmp_path / "kafka"),
    }
    return env, f"127.0.0.1:{port}"


def test_fixture_broker_answers(kafka_bootstrap: str) -> None:
    from confluent_kafka.admin import AdminClient

    assert kafka_bootstrap == f"127.0.0.1:{os.environ.get('STREAMCORE_KAFKA_PORT', '9092')}"
    md = AdminClient({"bootstrap.servers": kafka_bootstrap}).list_topics(timeout=10)
    assert len(md.brokers) == 1
    status = run("status")
    assert status.returncode == 0
    assert "running (pid " in status.stdout and kafka_bootstrap in status.stdout


def test_start_when_running_is_a_no_op(kafka_bootstrap: str) -> None:
    before = run("status").stdout
    started = time.monotonic()
    result = run("start")
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - started < 10
    assert "already running" in result.stdout
    assert result.stdout.strip().splitlines()[-1] == kafka_bootstrap
    assert run("status").stdout == before  # same pid


def test_private_broker_lifecycle_and_broker_loss(tmp_path: Path) -> None:
    """Start a second broker on free ports in a temporary home, use it, stop it under a manager."""
    env, address = private_broker(tmp_path)
    port, controller = env["STREAMCORE_KAFKA_PORT"], env["STREAMCORE_KAFKA_CONTROLLER_PORT"]
    sasl = env["STREAMCORE_KAFKA_SASL_PORT"]
    assert run("status", env).returncode == 3
    started = time.monotonic()
    result = run("start", env)
    try:
        assert result.returncode == 0, result.stdout + result.stderr
        assert time.monotonic() - started < 30
        assert result.stdout.strip().splitlines()[-1] == address
        config = (tmp_path / "kafka" / "server.properties").read_text()
        for line in (
            "process.roles=broker,controller",
            f"listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller},"
            f"SASL_PLAINTEXT://127.0.0.1:{sasl}",
            "auto.create.topics.enable=false",
            "log.retention.hours=168",
            "num.partitions=1",
            "offsets.topic.replication.factor=1",
            "group.initial.rebalance.delay.ms=0",
        ):
            assert line in config.splitlines()
        assert (tmp_path / "kafka" / "data" / "meta.properties").is_file()
        assert (tmp_path / "kafka" / "kafka.pid").is_file()
        status = run("status", env)
        assert status.returncode == 0 and address in status.stdout
        again = run("start", env)
        assert again.returncode == 0 and "already running" in again.stdout

        manager = KafkaLogManager(address, topic_prefix="lifecycle-", timeout=3.0)
        manager.create("test/a", 2)
        appender = manager.appender("test/a")
        assert appender.append_to(1, "k", b"v").offset == 0
        with pytest.raises(Exception, match="topic"):  # auto-creation is off
            KafkaLogManager(address, topic_prefix="lifecycle-", timeout=3.0).size("test/nope")
        tailer = manager.tailer("g", "test/a")
        assert tailer.read(5).message == b"v"
    finally:
        stopped = run("stop", env)
    assert stopped.returncode == 0, stopped.stderr
    assert "stopped" in stopped.stdout
    assert run("status", env).returncode == 3
    assert not (tmp_path / "kafka" / "kafka.pid").exists()

    # The broker is gone under a live manager, appender and tailer: errors within the timeout.
    for call in (
        lambda: appender.append_to(0, "k", b"lost"),
        lambda: manager.end_offsets("test/a"),
        lambda: tailer.read(0),
        lambda: tailer.commit(),
    ):
        started = time.monotonic()
        with pytest.raises(BrokerUnavailableError, match=rf"Kafka at {address} did not answer"):
            call()
        assert time.monotonic() - started < 3.0 + 2.0
    tailer.close()
    manager.close()


def test_start_without_jars_says_make_jars(tmp_path: Path) -> None:
    env = {
        "STREAMCORE_JARS": str(tmp_path / "no-jars"),
        "STREAMCORE_KAFKA_HOME": str(tmp_path / "kafka"),
        "STREAMCORE_KAFKA_PORT": str(free_port()),
        "STREAMCORE_KAFKA_CONTROLLER_PORT": str(free_port()),
    }
    result = run("start", env)
    assert result.returncode == 1
    assert "no Kafka broker jars" in result.stderr and "make jars" in result.stderr


def test_start_on_a_busy_port_says_so(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        env = {
            "STREAMCORE_KAFKA_HOME": str(tmp_path / "kafka"),
            "STREAMCORE_KAFKA_PORT": str(busy.getsockname()[1]),
            "STREAMCORE_KAFKA_CONTROLLER_PORT": str(free_port()),
        }
        result = run("start", env)
    assert result.returncode == 1
    assert "is used by another process" in result.stderr
    assert "STREAMCORE_KAFKA_PORT" in result.stderr


def test_stop_and_status_when_stopped(tmp_path: Path) -> None:
    env = {"STREAMCORE_KAFKA_HOME": str(tmp_path / "kafka"), "STREAMCORE_KAFKA_PORT": "1"}
    status = run("status", env)
    assert status.returncode == 3 and "stopped (127.0.0.1:1)" in status.stdout
    stop = run("stop", env)
    assert stop.returncode == 0 and "not running" in stop.stdout


def test_unknown_command() -> None:
    result = run("restart")
    assert result.returncode == 2 and "usage" in result.stderr


def test_unreachable_broker_fails_fast_and_clearly() -> None:
    address = f"127.0.0.1:{free_port()}"  # nothing listens there
    manager = KafkaLogManager(address, timeout=1.5)
    calls = {
        "exists": lambda: manager.exists("test/a"),
        "create": lambda: manager.create("test/a", 1),
        "list_logs": manager.list_logs,
        "appender": lambda: manager.appender("test/a"),
        "tailer": lambda: manager.tailer("g", "test/a"),
        "committed": lambda: manager.committed("test/a", "g"),
    }
    for what, call in calls.items():
        started = time.monotonic()
        with pytest.raises(BrokerUnavailableError) as info:
            call()
        elapsed = time.monotonic() - started
        assert elapsed < 1.5 + 1.5, f"{what} took {elapsed:.1f} s"
        message = str(info.value)
        assert f"Kafka at {address} did not answer within 1.5 s" in message, what
        assert "make kafka" in message, what
    manager.close()


def test_a_broker_that_cannot_start_fails_the_tests_never_skips(
    pytester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makeconftest(
        f"import sys\nsys.path.insert(0, {str(ROOT / 'tests')!r})\n"
        "pytest_plugins = ['kafka_broker']\n"
    )
    pytester.makepyfile(
        "def test_needs_kafka(kafka_bootstrap):\n    pass\n"
        "def test_needs_it_too(kafka_bootstrap):\n    pass\n"
    )
    env = {
        "STREAMCORE_JARS": str(tmp_path / "no-jars"),
        "STREAMCORE_KAFKA_HOME": str(tmp_path / "kafka"),
        "STREAMCORE_KAFKA_PORT": str(free_port()),
        "STREAMCORE_KAFKA_CONTROLLER_PORT": str(free_port()),
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(errors=2)
    result.stdout.fnmatch_lines(["*the local Kafka broker could not start*", "*make jars*"])


def test_group_positions_read_while_the_coordinator_loads(tmp_path: Path) -> None:
    """Read group positions at once on a brand-new broker and right after a restart, while the
    group coordinator loads its offsets: the window in which librdkafka's admin offset call
    crashed the process (now read through a consumer handle). Positions survive the restart."""
    env, address = private_broker(tmp_path)
    try:
        assert run("start", env).returncode == 0
        with KafkaLogManager(address, topic_prefix="coord-", timeout=20.0) as manager:
            manager.create("test/coord", 2)
            for n in range(5):  # new groups: each needs the coordinator
                assert manager.committed("test/coord", f"app/fresh-{n}") == [None, None]
            manager.commit_position(LogPartition.of("test/coord", 1), "app/kept", 7)
        assert run("stop", env).returncode == 0
        assert run("start", env).returncode == 0
        with KafkaLogManager(address, topic_prefix="coord-", timeout=20.0) as manager:
            assert manager.committed("test/coord", "app/kept") == [None, 7]
            assert manager.list_groups("test/coord") == ["app/kept"]
    finally:
        run("stop", env)
