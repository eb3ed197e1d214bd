"""streamcore.arrivals: a stream's new records for a group, reported once per new end, on every
backend (memory, local, Kafka: the same log API); the per-DAG `runs_on` switch."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from streamcore.arrivals import Arrivals, runs_on
from streamcore.config import load_config
from streamcore.errors import ConfigError
from streamcore.log import LogPartition
from streamcore.log.api import LogManager
from streamcore.names import Name

GROUP = "test/landing"


def _append(manager: LogManager, name: str, partition: int, count: int) -> None:
    appender = manager.appender(name)
    for n in range(count):
        appender.append_to(partition, f"k{n}", b"v")


def _commit(manager: LogManager, name: str, positions: dict[int, int]) -> None:
    for partition, offset in positions.items():
        manager.commit_position(LogPartition(Name.of(name), partition), GROUP, offset)


def test_reports_new_records_once_per_new_end(
    manager: LogManager, new_log: Callable[..., str]
) -> None:
    name = new_log(partitions=2)
    arrivals = Arrivals(name, GROUP, manager)
    assert arrivals.poll() is None  # empty
    _append(manager, name, 0, 3)
    found = arrivals.poll()
    assert found is not None
    assert (found["records"], found["ends"], found["committed"]) == (
        3,
        {"0": 3, "1": 0},
        {"0": 0, "1": 0},
    )
    # The run that lands those 3 has not committed yet: nothing new, no second report.
    assert arrivals.poll() is None
    _append(manager, name, 1, 2)
    found = arrivals.poll()
    assert found is not None and (found["records"], found["ends"]) == (2, {"0": 3, "1": 2})
    _commit(manager, name, {0: 3, 1: 2})
    assert arrivals.poll() is None  # landed, and nothing arrived since
    assert arrivals.polls == 5


def test_a_backlog_is_reported_at_the_first_poll_and_committed_records_never(
    manager: LogManager, new_log: Callable[..., str]
) -> None:
    name = new_log(partitions=1)
    _append(manager, name, 0, 5)
    _commit(manager, name, {0: 5})
    assert Arrivals(name, GROUP, manager).poll() is None
    _append(manager, name, 0, 1)
    found = Arrivals(name, GROUP, manager).poll()  # a restarted trigger
    assert found is not None and found["records"] == 1


def test_a_missing_stream_reports_nothing(manager: LogManager) -> None:
    arrivals = Arrivals("test/never-created", GROUP, manager)
    assert arrivals.poll() is None
    assert arrivals.polls == 1


def test_runs_on_is_read_per_dag_section(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "streamcore.toml"
    path.write_text('[audit]\nruns_on = "records"\nwatch_interval = "500ms"\n')
    config = load_config(path, home=tmp_path)
    audit = runs_on(config, "audit", "schedule")
    assert (audit.records, audit.watch_interval_s) == (True, 0.5)
    importer = runs_on(config, "importer", "manual")
    assert (importer.mode, importer.records, importer.watch_interval_s) == ("manual", False, 2.0)
    monkeypatch.setenv("STREAMCORE_IMPORTER_RUNS_ON", "records")
    assert runs_on(config, "importer", "manual").records
    monkeypatch.setenv("STREAMCORE_AUDIT_RUNS_ON", "cron")
    with pytest.raises(ConfigError, match=r"'schedule'.*'records'"):
        runs_on(config, "audit", "schedule")
    monkeypatch.setenv("STREAMCORE_AUDIT_RUNS_ON", "records")
    monkeypatch.setenv("STREAMCORE_AUDIT_WATCH_INTERVAL", "10ms")
    with pytest.raises(ConfigError, match="at least 100ms"):
        runs_on(config, "audit", "schedule")
