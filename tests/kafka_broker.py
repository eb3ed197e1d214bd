"""pytest plugin: the local Kafka broker for tests marked `kafka`.

- `kafka_bootstrap` (session fixture): the bootstrap address of a running broker. If none runs on
  `127.0.0.1:$STREAMCORE_KAFKA_PORT` (default 9092), `scripts/kafka.sh start` starts one, and the
  session stops it at its end; a broker that was already running is left running. A broker that
  cannot start fails the tests that need it (never a skip: CI must not pass without Kafka).
  A broker running with an older config of the script (no SASL listener) is restarted.
- `kafka_sasl_bootstrap` (session fixture): the same broker's SASL_PLAINTEXT listener (mechanism
  PLAIN, user `SASL_USER` / `SASL_PASSWORD`).
- `ensure_broker()`: the same, callable from factories that are not fixtures.
- `scratch_prefix()`: a topic/group prefix unique to one test; every topic and group made with
  it is deleted at the end of the session (`sctest-<session>-<test>-`).

Loaded from tests/conftest.py (`pytest_plugins`).
"""

from __future__ import annotations

import logging
import os
import uuid

import pytest
from scripted_server import ScriptedServer

SCRATCH = "sctest-"
SESSION_PREFIX = f"{SCRATCH}{uuid.uuid4().hex[:8]}-"
logger = logging.getLogger(__name__)

SERVER = ScriptedServer(
    "kafka.sh",
    "Kafka broker",
    "kafka",
    start_timeout=120,
    address=lambda _: f"127.0.0.1:{os.environ.get('STREAMCORE_KAFKA_PORT', '9092')}",
    # A broker started with an older config (e.g. without the SASL listener) counts as not
    # running: `start` restarts it.
    running=lambda status: (
        status.returncode == 0
        and "not answering" not in status.stdout
        and "older configuration" not in status.stdout
    ),
)
# The broker's SASL/PLAIN listener and its user (scripts/kafka.sh writes them into its config).
SASL_USER, SASL_PASSWORD = "streamcore", "streamcore-secret"
_scratch_used = False


def ensure_broker() -> str:
    """The bootstrap address of a running local broker, started if needed (once per session)."""
    return SERVER.ensure()


def scratch_prefix() -> str:
    """A fresh topic and group prefix; its topics and groups go at the end of the session."""
    global _scratch_used
    _scratch_used = True
    return f"{SESSION_PREFIX}{uuid.uuid4().hex[:8]}-"


@pytest.fixture(scope="session")
def kafka_bootstrap() -> str:
    """The bootstrap address of the local test broker (`scripts/kafka.sh`)."""
    return ensure_broker()


@pytest.fixture(scope="session")
def kafka_sasl_bootstrap() -> str:
    """The address of the same broker's SASL_PLAINTEXT listener (PLAIN, user `SASL_USER`)."""
    ensure_broker()
    return f"127.0.0.1:{os.environ.get('STREAMCORE_KAFKA_SASL_PORT', '9094')}"


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


# trylast: after the session fixtures are torn down (pytest's runner does that in this hook),
# so nothing still connected sees its server go away.
@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if SERVER.address is None:
        return
    if _scratch_used:
        try:
            _cleanup(SERVER.address)
        except Exception as exc:  # best effort: never turn a green run red
            logger.warning("scratch Kafka topics not cleaned up: %s", exc)
    SERVER.stop_if_started(60)
