"""pytest plugin: the local Kafka broker for tests marked `kafka`.

- `kafka_bootstrap` (session fixture): the bootstrap address of a running broker. If none runs on
  `127.0.0.1:$STREAMCORE_KAFKA_PORT` (default 9092), `scripts/kafka.sh start` starts one, and the
  session stops it at its end; a broker that was already running is left running. A broker that
  cannot start fails the tests that need it (never a skip: CI must not pass without Kafka).
- `ensure_broker()`: the same, callable from factories that are not fixtures.
- `scratch_prefix()`: a topic/group prefix unique to one test; every topic and group made with
  it is deleted at the end of the session (`sctest-<session>-<test>-`).

Loaded from tests/conftest.py (`pytest_plugins`).
"""

from __future__ import annotations

import logging
import os
import subprocess
import threading
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "kafka.sh"
SCRATCH = "sctest-"
SESSION_PREFIX = f"{SCRATCH}{uuid.uuid4().hex[:8]}-"
logger = logging.getLogger(__name__)

_lock = threading.Lock()
_state: dict[str, object] = {"address": None, "started": False, "error": None, "used": False}


def _address() -> str:
    return f"127.0.0.1:{os.environ.get('STREAMCORE_KAFKA_PORT', '9092')}"


def _run(command: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), command], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )


def ensure_broker() -> str:
    """The bootstrap address of a running local broker, started if needed (once per session)."""
    with _lock:
        if _state["address"] is not None:
            return str(_state["address"])
        if _state["error"] is not None:
            pytest.fail(str(_state["error"]), pytrace=False)
        status = _run("status", 60)
        started = False
        if status.returncode != 0 or "not answering" in status.stdout:
            try:
                result = _run("start", 120)
            except subprocess.TimeoutExpired:
                _state["error"] = "scripts/kafka.sh start did not finish within 120 s"
                pytest.fail(str(_state["error"]), pytrace=False)
            if result.returncode != 0:
                _state["error"] = (
                    "the local Kafka broker could not start (scripts/kafka.sh start, exit "
                    f"{result.returncode}); the tests marked kafka need it.\n{result.stdout}"
                    f"{result.stderr}"
                )
                pytest.fail(str(_state["error"]), pytrace=False)
            started = "already running" not in result.stdout
        _state["address"] = _address()
        _state["started"] = started
        return str(_state["address"])


def scratch_prefix() -> str:
    """A fresh topic and group prefix; its topics and groups go at the end of the session."""
    _state["used"] = True
    return f"{SESSION_PREFIX}{uuid.uuid4().hex[:8]}-"


@pytest.fixture(scope="session")
def kafka_bootstrap() -> str:
    """The bootstrap address of the local test broker (`scripts/kafka.sh`)."""
    return ensure_broker()


def _cleanup(address: str) -> None:
    """Delete the topics and groups this session's scratch prefixes made."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": address, "log_level": 3})
    topics = [t for t in admin.list_topics(timeout=10).topics if t.startswith(SESSION_PREFIX)]
    if topics:
        for future in admin.delete_topics(topics, request_timeout=30).values():
            try:
                future.result(timeout=30)
            except Exception as exc:  # best effort
                logger.warning("scratch topic not deleted: %s", exc)
    listed = admin.list_consumer_groups(request_timeout=10).result(timeout=10)
    groups = [g.group_id for g in listed.valid if g.group_id.startswith(SESSION_PREFIX)]
    # one group per request: that is what the client supports
    for group in groups:
        try:
            admin.delete_consumer_groups([group], request_timeout=10)[group].result(timeout=10)
        except Exception as exc:  # a member may still be alive in a child process
            logger.warning("scratch group %s not deleted: %s", group, exc)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    address = _state["address"]
    if address is None:
        return
    if _state["used"]:
        try:
            _cleanup(str(address))
        except Exception as exc:  # best effort: never turn a green run red
            logger.warning("scratch Kafka topics not cleaned up: %s", exc)
    if _state["started"]:
        _run("stop", 60)
