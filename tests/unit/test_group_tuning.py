"""`[groups]` (streamcore.log.tuning; docs/operating.md): the timings of the local and memory
logs' groups and tailers from the configuration, the environment and `streamcore run --group`,
each wrong key or value refused naming it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from streamcore.config import LogDefaults, StreamcoreConfig
from streamcore.errors import ConfigError, LogError
from streamcore.log.cursor.membership import GroupMember
from streamcore.log.local.manager import LocalLogManager
from streamcore.log.memory.groups import MemoryGroupStore
from streamcore.log.tuning import GroupTuning


def config(tmp_path: Path, groups: dict[str, Any]) -> StreamcoreConfig:
    return StreamcoreConfig(home=tmp_path, log=LogDefaults(), table={"groups": groups})


def test_durations_with_units_or_seconds(tmp_path: Path) -> None:
    tuning = config(
        tmp_path,
        {"heartbeat_interval": "500ms", "session_timeout": 4, "max_poll_interval": "2m"},
    ).groups
    assert (tuning.heartbeat_interval, tuning.session_timeout) == (0.5, 4.0)
    assert tuning.max_poll_interval == 120.0
    assert tuning.poll_interval_max == GroupTuning().poll_interval_max  # defaults elsewhere


def test_the_environment_wins_over_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STREAMCORE_GROUPS_SESSION_TIMEOUT", "30s")
    assert config(tmp_path, {"session_timeout": "4s"}).groups.session_timeout == 30.0


@pytest.mark.parametrize(
    ("groups", "message"),
    [
        ({"sesion_timeout": "4s"}, "unknown key(s) ['sesion_timeout'] in [groups]; the keys are"),
        ({"session_timeout": "soon"}, "invalid groups.session_timeout 'soon'"),
        ({"session_timeout": 0}, "groups.session_timeout must be a duration > 0"),
        ({"heartbeat_interval": "10s"}, "groups.heartbeat_interval (10.0 s) must be below"),
        ({"poll_interval_min": "1s"}, "groups.poll_interval_min (1.0 s) must be below"),
        ({"rebalance_backoff": True}, "groups.rebalance_backoff must be a duration"),
    ],
)
def test_wrong_settings_are_refused_naming_the_key(
    tmp_path: Path, groups: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        config(tmp_path, groups).groups  # noqa: B018 (reading it parses it)
    assert message in str(caught.value)


def test_the_local_log_takes_its_groups_and_tailers_timings_from_the_config(
    tmp_path: Path,
) -> None:
    groups = {
        "heartbeat_interval": "1s",
        "session_timeout": "4s",
        "max_poll_interval": "1m",
        "poll_interval_min": "2ms",
        "poll_interval_max": "20ms",
    }
    manager = LocalLogManager(tmp_path / "log", config=config(tmp_path, groups))
    manager.create("test/in", 1)
    tailer = manager.subscribe("test/group", ["test/in"])
    member = tailer.member  # type: ignore[attr-defined]
    assert (member.heartbeat_interval, member.session_timeout, member.max_poll_interval) == (
        1.0,
        4.0,
        60.0,
    )
    assert (tailer.poll_interval_min, tailer.poll_interval_max) == (0.002, 0.02)  # type: ignore[attr-defined]
    static = manager.tailer("test/other", "test/in")
    assert static.poll_interval_max == 0.02  # type: ignore[attr-defined]
    tailer.close()
    static.close()
    manager.close()


class Contended(MemoryGroupStore):
    """A group state every other member always changes first."""

    def swap(self, state: dict[str, Any], expected_version: int) -> bool:
        return False


def test_a_member_gives_up_a_contended_change_after_the_rebalance_timeout() -> None:
    tuning = GroupTuning(
        rebalance_timeout=0.05, rebalance_backoff=0.001, rebalance_backoff_max=0.01
    )
    member = GroupMember(Contended("test/g", ["test/in"]), ["p-00"], tuning=tuning)
    with pytest.raises(LogError, match=r"in 0.05 s \(groups.rebalance_timeout\)"):
        member.refresh()


def test_a_busy_member_gives_partitions_up_after_the_rebalance_wait() -> None:
    """A member whose reads stay busy (a slow handler) past `rebalance_wait` while another joins:
    its heartbeat gives the joiner's share up, uncommitted; the busy member drops it when it
    reads again. Without the bound the joiner would wait for the member's max poll interval."""
    from streamcore.log.memory import MemoryLogManager

    manager = MemoryLogManager(
        GroupTuning(heartbeat_interval=0.1, session_timeout=5.0, rebalance_wait=0.3)
    )
    manager.create("test/in", 2)
    appender = manager.appender("test/in")
    appender.append_batch([(f"k{i}", b"v") for i in range(20)], partition=0)
    appender.append_batch([(f"k{i}", b"v") for i in range(20)], partition=1)
    busy = manager.subscribe("test/slow", ["test/in"])
    record = busy.read(timeout=5)
    assert record is not None and len(busy.assignments) == 2
    busy.mark(record)  # processed, not committed: the handover must not commit it
    # ... and now its handler is slow: it does not read while another member joins.
    joiner = manager.subscribe("test/slow", ["test/in"])
    deadline_reads = 0
    while len(joiner.assignments) != 1:
        joiner.read(timeout=0.05)
        deadline_reads += 1
        assert deadline_reads < 2000, "the joiner never got its share"
    given = joiner.assignments[0]
    assert manager.committed("test/in", "test/slow")[given.partition] is None
    busy.read(timeout=0.1)  # back from its slow batch: drops what it gave up
    assert len(busy.assignments) == 1 and busy.assignments[0] != given
    busy.commit_marked()  # refused for the partition it gave up
    assert manager.committed("test/in", "test/slow")[given.partition] is None
    busy.close()
    joiner.close()
    manager.close()
