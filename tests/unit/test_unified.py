"""UnifiedLogManager over a mixed local + memory configuration: routing of every call, a
representative part of the log contract through the router, the conflicts it refuses, lazy
backends and close; the kafka wiring with the class replaced by a recorder; and the CLI on a
mixed configuration given with --config."""

from __future__ import annotations

import json
import sys
import tomllib
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from streamcore.cli.context import backend_with, require_backend
from streamcore.cli.main import main
from streamcore.config import LogDefaults, StreamcoreConfig, load_config
from streamcore.errors import (
    ConfigError,
    LogClosedError,
    LogNotFoundError,
    StreamcoreError,
    TailerConflictError,
)
from streamcore.log import LogLag, LogPartition, RebalanceListener, open_log_manager
from streamcore.log.capabilities import Purgeable
from streamcore.log.config import LogConfig
from streamcore.log.kafka.backend import kafka_kwargs
from streamcore.log.local.manager import LocalLogManager
from streamcore.log.memory import MemoryLogManager
from streamcore.log.unified import UnifiedLogManager
from streamcore.names import Name

MIXED = """
[log.configs.default]
type = "local"

[log.configs.mem]
type = "memory"

[log.configs.kafka]
type = "kafka"  # defined, used by no rule: never built

[[log.match]]
namespace = "fast"
config = "mem"
[[log.match]]
group = "ext/"
config = "mem"
"""
WITH_KAFKA = MIXED + '[[log.match]]\nnamespace = "bulk"\nconfig = "kafka"\n'


def settings(home: Path, text: str = MIXED) -> StreamcoreConfig:
    return StreamcoreConfig(home=home, log=LogDefaults(partitions=2), table=tomllib.loads(text))


def unified(home: Path, text: str = MIXED, **env: str) -> UnifiedLogManager:
    config = settings(home, text)
    return UnifiedLogManager(config, LogConfig.from_settings(config, environ=env))


@pytest.fixture
def um(tmp_path: Path) -> Iterator[UnifiedLogManager]:
    manager = unified(tmp_path)
    yield manager
    manager.close()


# -- routing ----------------------------------------------------------------------------------
def test_backends_are_built_lazily_and_kafka_never_when_unused(um: UnifiedLogManager) -> None:
    assert um.built == {}
    um.create("app/a", 1)
    assert list(um.built) == ["default"]
    assert isinstance(um.built["default"], LocalLogManager)
    um.create("fast/a", 1)
    assert isinstance(um.built["mem"], MemoryLogManager)
    assert sorted(um.built) == ["default", "mem"]


def test_names_route_by_namespace_and_default_to_local(
    um: UnifiedLogManager, tmp_path: Path
) -> None:
    assert um.create("fast/events", 3) is True
    assert um.create("app/events", 2) is True
    assert um.route("fast/events").config == "mem"
    assert um.route("app/events").config == "default"
    assert um.route("bulk/command").config == "default"
    assert isinstance(um.backend_for("fast/events"), MemoryLogManager)
    assert isinstance(um.backend_for("app/events"), LocalLogManager)
    assert (tmp_path / "log" / "app-events" / "metadata.json").is_file()
    assert not (tmp_path / "log" / "fast-events").exists()
    assert um.backend_for("fast/events").size("fast/events") == 3
    assert not um.backend_for("app/events").exists("fast/events")
    assert um.log_config.config_for("fast/x").label == "memory:mem"


@pytest.mark.parametrize("name", ["fast/orders", "app/orders"], ids=["memory", "local"])
def test_contract_through_the_router(um: UnifiedLogManager, name: str) -> None:
    """append / read / commit / lag / latency / offsets / groups / delete on each backend."""
    assert um.create(name, 2) is True
    assert um.create(name) is False
    assert um.exists(name) and um.size(name) == 2
    assert um.incarnation(name) == um.backend_for(name).incarnation(name) is not None
    with um.appender(name) as appender:
        offsets = [appender.append(f"k{i}", b"v%d" % i) for i in range(10)]
        batch = appender.append_batch([("x", b"1"), ("x", b"2")], partition=1)
    assert [o.partition.partition for o in batch] == [1, 1]
    assert batch[1].offset == batch[0].offset + 1
    assert sum(um.end_offsets(name)) == 12
    assert um.start_offsets(name) == [0, 0]
    key, value, ts = um.record_at(offsets[0].partition, offsets[0].offset)
    assert (key, value) == ("k0", b"v0") and ts > 0
    assert um.committed(name, "app/g") == [None, None]
    assert um.lag(name, "app/g") == LogLag(0, 12, 12)

    with um.tailer("app/g", name) as tailer:
        got = []
        while (rec := tailer.read(0.5)) is not None:
            got.append(rec)
            if len(got) == 5:
                tailer.commit()
        assert len(got) == 12
    lags = um.lag_per_partition(name, "app/g")
    assert sum(x.pos for x in lags) > 0 and sum(x.lag for x in lags) > 0
    assert um.list_groups(name) == ["app/g"]
    assert um.latency(name, "app/g").lag.lag == sum(x.lag for x in lags)
    assert len(um.latency_per_partition(name, "app/g")) == 2

    with um.tailer("app/g", name) as tailer:  # resumes from the committed positions
        assert len(list(tailer)) == 12 - sum(x.pos for x in lags)
        tailer.commit()
    assert um.lag(name, "app/g").lag == 0
    assert um.committed(name, "app/g") == um.end_offsets(name)
    assert Name.of(name) in um.list_logs()
    assert um.delete(name) is True
    assert not um.exists(name)


def test_list_logs_merges_backends_without_duplicates(um: UnifiedLogManager) -> None:
    um.create("fast/b", 1)
    um.create("app/a", 1)
    um.create("app/c", 1)
    # The same name in a backend it does not route to (e.g. written before a routing change).
    um.backend_manager("mem").create("app/a", 1)
    assert [n.urn for n in um.list_logs()] == ["app/a", "app/c", "fast/b"]
    assert [(n.urn, b.name) for n, b in um.locations()] == [
        ("app/a", "default"),
        ("app/a", "mem"),
        ("app/c", "default"),
        ("fast/b", "mem"),
    ]
    assert "kafka" not in um.built  # defined but used by no rule: not listed, not built


def test_list_logs_reaches_every_used_backend(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_kafka = MemoryLogManager()
    fake_kafka.create("bulk/command", 1)
    monkeypatch.setitem(
        sys.modules,
        "streamcore.log.kafka.manager",
        types.SimpleNamespace(KafkaLogManager=lambda **kwargs: fake_kafka),
    )
    with unified(tmp_path, WITH_KAFKA) as manager:
        manager.create("fast/x", 1)
        manager.create("y/z", 1)
        assert [n.urn for n in manager.list_logs()] == ["bulk/command", "fast/x", "y/z"]
        assert sorted(manager.built) == ["default", "kafka", "mem"]


def test_tailer_over_two_backends_is_refused(um: UnifiedLogManager) -> None:
    um.create("fast/a", 1)
    um.create("app/b", 1)
    parts = [LogPartition.of("fast/a", 0), LogPartition.of("app/b", 0)]
    with pytest.raises(ConfigError) as info:
        um.tailer("app/g", parts)
    message = str(info.value)
    assert message.startswith("a tailer of group app/g cannot read logs of different backends:")
    assert "fast/a -> 'mem' ([[log.match]] #1 (namespace = \"fast\"))" in message
    assert "app/b -> 'default' (no [[log.match]] rule matches" in message
    assert message.endswith("Use one tailer per backend, or route these logs to one config")


def test_tailer_over_several_logs_of_one_backend(um: UnifiedLogManager) -> None:
    for name in ("fast/a", "fast/b"):
        um.create(name, 2)
        with um.appender(name) as appender:
            appender.append("k", name.encode())
    parts = [LogPartition.of(n, p) for n in ("fast/a", "fast/b") for p in range(2)]
    with um.tailer("app/g", parts) as tailer:
        assert sorted(r.message for r in tailer) == [b"fast/a", b"fast/b"]
        with pytest.raises(TailerConflictError):
            um.tailer("app/g", LogPartition.of("fast/a", 0))


def test_group_rule_routes_logs_no_namespace_rule_matches(um: UnifiedLogManager) -> None:
    """A log fed into the memory backend from outside the routing (here: directly) is read by
    the groups the `group = "ext/"` rule sends there; other groups look where the name routes."""
    outside = um.backend_manager("mem")
    outside.create("orders/created", 1)
    with outside.appender("orders/created") as appender:
        appender.append("o1", b"order")
    assert um.route("orders/created", "ext/billing").by_group
    assert um.route("orders/created", "ext/billing").config == "mem"
    assert um.backend_for("orders/created", "ext/billing") is outside
    with um.tailer("ext/billing", "orders/created") as tailer:
        assert [r.message for r in tailer] == [b"order"]
        tailer.commit()
    assert um.lag("orders/created", "ext/billing") == LogLag(1, 1, 0)
    assert um.committed("orders/created", "ext/billing") == [1]
    with pytest.raises(LogNotFoundError):
        um.tailer("app/other", "orders/created")  # default (local): nothing there


def test_group_rule_against_a_log_its_writers_put_elsewhere_is_an_error(
    um: UnifiedLogManager,
) -> None:
    um.create("orders/created", 1)  # unmatched name: lives in default (local)
    with pytest.raises(ConfigError) as info:
        um.tailer("ext/billing", "orders/created")
    message = str(info.value)
    assert message.startswith(
        "group ext/billing reads log orders/created from config 'mem' ([[log.match]] #2 "
        "(group = \"ext/\")), but the log lives in config 'default'"
    )
    assert 'add a [[log.match]] rule with namespace = "orders"' in message
    with pytest.raises(ConfigError):
        um.lag("orders/created", "ext/billing")


def test_namespace_rule_wins_over_group_rule(um: UnifiedLogManager) -> None:
    um.create("app/x", 1)
    um.create("fast/y", 1)
    assert um.route("fast/y", "ext/billing").config == "mem"
    assert um.route("app/x", "ext/billing").config == "mem"  # unmatched: the group rule applies
    assert um.lag("fast/y", "ext/billing") == LogLag(0, 0, 0)


def test_subscribe_routes_to_the_backend_of_its_logs(
    um: UnifiedLogManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[Any, ...]] = []

    def fake_subscribe(
        self: Any, group: str, names: Any, listener: Any, codec: Any, *, start: str
    ) -> str:
        calls.append((type(self).__name__, group, list(names), listener, codec, start))
        return "tailer"

    monkeypatch.setattr(MemoryLogManager, "subscribe", fake_subscribe)
    listener = RebalanceListener()
    um.create("fast/a", 1)
    um.create("fast/b", 1)
    assert um.subscribe("app/g", ["fast/a", "fast/b"], listener, "codec") == "tailer"
    assert calls == [
        ("MemoryLogManager", "app/g", ["fast/a", "fast/b"], listener, "codec", "earliest")
    ]
    um.create("app/c", 1)
    with pytest.raises(ConfigError, match="a subscription of group app/g cannot read logs"):
        um.subscribe("app/g", ["fast/a", "app/c"])
    with pytest.raises(ValueError, match="at least one log name"):
        um.subscribe("app/g", [])


def test_env_backend_memory_forces_everything_in_memory(tmp_path: Path) -> None:
    with unified(tmp_path, STREAMCORE_LOG_BACKEND="memory") as manager:
        for name in ("fast/a", "bulk/command", "app/x"):
            manager.create(name, 1)
            assert manager.route(name).config == "mem"
        assert list(manager.built) == ["mem"]
        assert not (tmp_path / "log").exists()


def test_local_config_options_and_root(tmp_path: Path) -> None:
    text = (
        '[log.configs.archive]\ntype = "local"\nroot = "archive"\nretention = "30d"\n'
        'fsync = "batch"\npartitions = 3\n'
        '[[log.match]]\nnamespace = "arch"\nconfig = "archive"\n'
    )
    with unified(tmp_path, text) as manager:
        manager.create("arch/2024")
        manager.create("app/x")
        meta = json.loads((tmp_path / "archive" / "arch-2024" / "metadata.json").read_text())
        assert (meta["partitions"], meta["retention_ms"], meta["fsync"]) == (
            3,
            30 * 86_400_000,
            "batch",
        )
        default_meta = json.loads((tmp_path / "log" / "app-x" / "metadata.json").read_text())
        assert (default_meta["partitions"], default_meta["fsync"]) == (2, "none")


def test_two_local_configs_on_one_folder_are_refused(tmp_path: Path) -> None:
    text = '[log.configs.other]\ntype = "local"\n[[log.match]]\nnamespace = "o"\nconfig = "other"'
    with pytest.raises(ConfigError) as info:
        unified(tmp_path, text)
    assert str(info.value) == (
        f"log.configs.default and log.configs.other both keep their logs in {tmp_path / 'log'}; "
        'give one of them its own folder, e.g. log.configs.other.root = "log-other"'
    )


def test_close_closes_every_backend_built(um: UnifiedLogManager) -> None:
    um.create("fast/a", 1)
    um.create("app/a", 1)
    tailers = [um.tailer("app/g", "fast/a"), um.tailer("app/g", "app/a")]
    um.close()
    assert all(t.closed for t in tailers)
    assert um.built == {}
    um.close()  # idempotent
    with pytest.raises(LogClosedError, match="the unified log manager is closed"):
        um.exists("app/a")


def test_unknown_backend_manager_name(um: UnifiedLogManager) -> None:
    with pytest.raises(ConfigError, match="no log config named 'nope'"):
        um.backend_manager("nope")


def test_open_log_manager_reads_the_configuration(
    tmp_path: Path, clean_env: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "streamcore.toml"
    path.write_text(MIXED)
    with open_log_manager(load_config(path, home=tmp_path)) as manager:
        assert isinstance(manager, UnifiedLogManager)
        assert manager.route("fast/x").config == "mem"
        manager.create("app/x", 1)
        assert (tmp_path / "log" / "app-x").is_dir()


# -- kafka wiring -----------------------------------------------------------------------------
class RecordingKafka:
    """Stands in for streamcore.log.kafka.KafkaLogManager: records its constructor arguments."""

    made: list[dict[str, Any]] = []

    def __init__(self, **kwargs: Any) -> None:
        RecordingKafka.made.append(kwargs)
        self.closed = False
        self.created: list[str] = []

    def create(self, name: Any, partitions: Any = None, **options: Any) -> bool:
        self.created.append(str(name))
        return True

    def close(self) -> None:
        self.closed = True


def test_kafka_config_builds_the_kafka_manager_with_its_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The KafkaLogManager class is replaced by a recorder (a fake
    `streamcore.log.kafka.manager` module), so this checks the constructor keyword arguments
    without a broker."""
    monkeypatch.setitem(
        sys.modules,
        "streamcore.log.kafka.manager",
        types.SimpleNamespace(KafkaLogManager=RecordingKafka),
    )
    RecordingKafka.made = []
    text = WITH_KAFKA.replace(
        '[log.configs.kafka]\ntype = "kafka"',
        '[log.configs.kafka]\ntype = "kafka"\ntopic_prefix = "t-"\ntimeout = "5s"\n'
        'replication_factor = 3\n[log.configs.kafka.properties]\n"acks" = "all"\n#',
    )
    manager = unified(tmp_path, text, STREAMCORE_KAFKA_BOOTSTRAP_SERVERS="k1:9092,k2:9092")
    assert manager.built == {}
    assert manager.create("bulk/command", 2) is True
    assert RecordingKafka.made == [
        {
            "bootstrap_servers": "k1:9092,k2:9092",
            "topic_prefix": "t-",
            "config": {"acks": "all"},
            "timeout": 5.0,
            "replication_factor": 3,
            "partitions": 2,  # not set on the config: the [log] partitions setting
        }
    ]
    kafka = manager.built["kafka"]
    assert kafka.created == ["bulk/command"]
    manager.create("bulk/status")
    assert len(RecordingKafka.made) == 1  # one manager per config
    manager.close()
    assert kafka.closed


def test_kafka_kwargs_of_the_builtin_defaults(tmp_path: Path) -> None:
    config = LogConfig.parse({}, environ={"STREAMCORE_LOG_BACKEND": "kafka"})
    assert kafka_kwargs(config.configs["kafka"], settings(tmp_path)) == {
        "bootstrap_servers": "127.0.0.1:9092",
        "topic_prefix": "streamcore-",
        "config": {},
        "timeout": 30.0,
        "replication_factor": 1,
        "partitions": 2,
    }


def test_kafka_backend_that_cannot_be_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without confluent-kafka, a configuration naming Kafka still loads and its other backends
    work; opening the Kafka one says what to install."""
    monkeypatch.setitem(sys.modules, "confluent_kafka", None)
    monkeypatch.delitem(sys.modules, "streamcore.log.kafka.manager", raising=False)
    with unified(tmp_path, WITH_KAFKA) as manager:
        with pytest.raises(ConfigError) as info:
            manager.exists("bulk/command")
        assert str(info.value).startswith(
            "log.configs.kafka is a kafka config but the Kafka backend cannot be loaded ("
        )
        assert manager.exists("app/x") is False  # other backends still work


# -- CLI helpers and the CLI on a mixed configuration ----------------------------------------
def test_backend_features_through_the_router(um: UnifiedLogManager) -> None:
    um.create("app/a", 1)
    um.create("fast/a", 1)
    assert backend_with(um, "app/a", Purgeable) is um.backend_for("app/a")
    assert backend_with(um, "fast/a", Purgeable) is None
    with pytest.raises(StreamcoreError) as info:
        require_backend(um, Name.of("fast/a"), Purgeable, "purge command")
    assert str(info.value) == (
        "log fast/a lives in the memory:mem backend, which has no purge command; this command "
        "works on local logs only"
    )
    for name in ("app/a", "fast/a"):
        with um.appender(name) as appender:
            appender.append("k", b"1")
            appender.append("k", b"2")
        um.commit_position(LogPartition.of(name, 0), "app/g", 1)
        assert um.committed(name, "app/g") == [1]


@pytest.fixture
def mixed_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], clean_env: pytest.MonkeyPatch
) -> Callable[..., tuple[int, str, str]]:
    path = tmp_path / "mixed.toml"
    path.write_text(
        MIXED
        + '[[log.match]]\nnamespace = "arch"\nconfig = "arc"\n'
        + '[log.configs.arc]\ntype = "local"\nroot = "archive"\nretention = "30d"\n'
    )

    def run(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        rc = main(["--home", str(tmp_path / "home"), "--config", str(path), *argv])
        out, err = capsys.readouterr()
        return rc, out, err

    return run


def test_cli_logs_shows_the_backend_of_each_log(
    mixed_cli: Callable[..., tuple[int, str, str]], tmp_path: Path
) -> None:
    assert mixed_cli("create", "-l", "app/a", "-p", "2")[0] == 0
    rc, out, _ = mixed_cli("create", "-l", "arch/old", "-p", "1")
    assert (rc, out.strip()) == (0, "created log arch/old (1 partitions, retention 30d)")
    assert (tmp_path / "home" / "archive" / "arch-old" / "metadata.json").is_file()
    # A stale copy where arch/old does not route: listed, and flagged.
    with LocalLogManager(tmp_path / "home" / "log", config=load_config(home=tmp_path)) as stray:
        stray.create("arch/old", 1)
    rc, out, _ = mixed_cli("logs")
    assert rc == 0
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["log", "backend", "partitions"]
    rows = [line.split()[:3] for line in lines[2:] if line and not line.startswith("*")]
    assert rows == [
        ["app/a", "local", "2"],
        ["arch/old", "local", "*"],
        ["arch/old", "local:arc", "1"],
    ]
    assert lines[-1] == (
        "* arch/old in local: the name routes to config 'arc'; commands don't reach this copy"
    )
    doc = json.loads(mixed_cli("logs", "--json")[1])
    found = [(x["log"], x["backend"], x["config"], "note" in x) for x in doc["logs"]]
    assert found == [
        ("app/a", "local", "default", False),
        ("arch/old", "local", "default", True),
        ("arch/old", "local:arc", "arc", False),
    ]


def test_cli_commands_on_a_memory_routed_log(
    mixed_cli: Callable[..., tuple[int, str, str]],
) -> None:
    rc, _, err = mixed_cli("purge", "-l", "fast/x")
    assert rc == 2  # each CLI run is a new process: a memory log never exists there
    assert "log fast/x does not exist in the memory:mem backend;" in err
    rc, out, _ = mixed_cli("logs")
    assert rc == 0
    assert out.startswith("no logs in local under ")
    assert "/home/log, memory:mem, local:arc under " in out


def test_cli_route(mixed_cli: Callable[..., tuple[int, str, str]]) -> None:
    rc, out, _ = mixed_cli("route", "-l", "fast/x")
    assert rc == 0
    assert out.splitlines()[0] == (
        "fast/x -> config 'mem' (memory): [[log.match]] #1 (namespace = \"fast\")"
    )
    doc = json.loads(mixed_cli("route", "-l", "orders/x", "-g", "ext/b", "--json")[1])
    assert (doc["config"], doc["by_group"], doc["group"]) == ("mem", True, "ext/b")
    doc = json.loads(mixed_cli("route", "--json")[1])
    assert [(c["config"], c["type"], c["used"]) for c in doc["configs"]] == [
        ("default", "local", True),
        ("mem", "memory", True),
        ("kafka", "kafka", False),
        ("arc", "local", True),
    ]
    assert [(r["rule"], r["config"]) for r in doc["rules"]] == [(1, "mem"), (2, "mem"), (3, "arc")]
    rc, out, _ = mixed_cli("route")
    assert rc == 0 and "no rule matched: config 'default'" in out


def test_cli_demo_runs_in_memory_when_forced(
    mixed_cli: Callable[..., tuple[int, str, str]], clean_env: pytest.MonkeyPatch
) -> None:
    clean_env.setenv("STREAMCORE_LOG_BACKEND", "memory")
    rc, out, _ = mixed_cli("demo", "--count", "50", "--batch", "20", "--partitions", "2")
    assert rc == 0
    assert "in the memory:mem backend" in out


def test_cli_bad_routing_config_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text('[[log.match]]\nnamespace = "a"\nconfig = "nope"\n')
    rc = main(["--home", str(tmp_path), "--config", str(path), "logs"])
    err = capsys.readouterr().err
    assert rc == 1
    assert "config = 'nope' is not defined; add a [log.configs.nope] table" in err
