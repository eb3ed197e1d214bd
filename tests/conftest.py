"""Suite-wide rules. In CI (CI=true) a skipped test is a failure: a missing broker, server or jar
must break the build, never silently shrink it."""

from __future__ import annotations

import os

import pytest

pytest_plugins = (
    "pytester",
    "kafka_broker",
    "postgres_server",
    "outbox_databases",
    "spark_session",
    "log_fixtures",
)
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    outcome = yield
    report = outcome.get_result()
    if IN_CI and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"skipped in CI, which counts as a failure: {reason}"


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    """No test writes under the developer's ./data: STREAMCORE_HOME points to a temp folder."""
    monkeypatch.setenv("STREAMCORE_HOME", str(tmp_path_factory.mktemp("home")))
