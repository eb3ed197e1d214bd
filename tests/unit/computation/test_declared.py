"""Processors and logs declared in the configuration (streamcore.computation.declared;
docs/operating.md, "Declared processors and logs"), run by `streamcore run --processor NAME`."""

from __future__ import annotations

import itertools
import json
import re
import textwrap
from pathlib import Path

import pytest

from streamcore.cli.main import main
from streamcore.codecs import get_codec
from streamcore.computation.declared import declared_logs, declared_processors, ensure_logs
from streamcore.config import load_config
from streamcore.errors import ConfigError
from streamcore.log import open_log_manager
from streamcore.record import Record

APP = textwrap.dedent(
    """
    from streamcore.computation import Computation, Settings, Topology

    def configurable(suffix=""):
        class Tag(Computation):
            def __init__(self):
                super().__init__("tag", 1, 1)

            def process_record(self, context, input_stream, record):
                if record.data == b"bad":
                    raise ValueError("cannot tag")
                context.produce_record("o1", record.key, record.data + suffix.encode())
                context.ask_for_checkpoint()

        topology = Topology.builder().add_computation(Tag, ["i1:decl/in", "o1:decl/out"]).build()
        return topology, Settings(drain_quiet=0.2)
    """
)
_names = itertools.count()


def write_config(tmp_path: Path, module: str, extra: str = "") -> Path:
    path = tmp_path / "streamcore.toml"
    path.write_text(
        textwrap.dedent(
            f"""
            [logs."decl/in"]
            partitions = 3
            retention = "2d"

            [processors.tagger]
            topology = "{module}:configurable"
            concurrency = 2
            [processors.tagger.options]
            suffix = "!"
            [processors.tagger.policy]
            max_retries = 0
            dlq = "decl/dlq"
            """
        )
        + extra
    )
    return path


@pytest.fixture
def app(tmp_path: Path) -> tuple[str, str]:
    name = f"declared_app_{next(_names)}"
    (tmp_path / f"{name}.py").write_text(APP)
    return name, str(tmp_path)


def test_a_declared_processor_runs_with_its_options_concurrency_and_policy(
    app, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    module, folder = app
    config_path = write_config(tmp_path, module)
    config = load_config(config_path)
    with open_log_manager(config=config) as manager:
        assert ensure_logs(manager, declared_logs(config)) == ["decl/in"]
        assert ensure_logs(manager, declared_logs(config)) == []  # only when missing
        assert manager.size("decl/in") == 3
        records = [Record.of(f"k{i}", b"v") for i in range(9)] + [Record.of("x", b"bad")]
        manager.appender("decl/in", get_codec("avro")).append_batch([(r.key, r) for r in records])
    argv = ["--config", str(config_path), "run", "--app-dir", folder, "--drain", "--json"]
    assert main([*argv, "--processor", "tagger", "--timeout", "60"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["processors"] == ["tagger"] and report["drained"] is True
    (row,) = report["computations"]
    # concurrency 2 from the declaration; the bad record dead-lettered by the declared policy
    assert (row["computation"], row["units"], row["processed"]) == ("tag", 2, 10)
    assert (row["dead_lettered"], row["produced"]) == (1, 10)
    with open_log_manager(config=config) as manager:
        tailer = manager.tailer("decl/check", "decl/out", get_codec("avro"))
        outputs = [tailer.read(timeout=5) for _ in range(9)]
        assert sorted(r.message.data for r in outputs if r is not None) == [b"v!"] * 9
        tailer.close()


def test_the_environment_overrides_a_declaration(
    app, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module, _ = app
    config = load_config(write_config(tmp_path, module))
    monkeypatch.setenv("STREAMCORE_PROCESSORS_TAGGER_CONCURRENCY", "4")
    monkeypatch.setenv("STREAMCORE_PROCESSORS_TAGGER_POLICY_MAX_RETRIES", "7")
    declared = declared_processors(config)["tagger"]
    assert (declared.concurrency, declared.policy["max_retries"]) == (4, 7)
    _, settings = declared.load(str(tmp_path))
    assert settings.concurrency("tag") == 4 and settings.policy("tag").max_retries == 7
    assert settings.policy("tag").dlq == "decl/dlq"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("color = 'red'\n", "unknown key(s) ['color'] in [processors.tagger]; the keys are"),
        ("start = 'middle'\n", "processors.tagger.start must be one of earliest, latest"),
        ("concurrency = 0\n", None),
    ],
)
def test_wrong_declarations_are_refused_naming_the_key(
    app, tmp_path: Path, extra: str, message: str | None
) -> None:
    module, _ = app
    text = write_config(tmp_path, module).read_text()
    if extra.startswith("concurrency"):
        text = text.replace("concurrency = 2", "concurrency = 0")
        message = "processors.tagger.concurrency must be an integer >= 1, got 0"
    else:
        text = text.replace("[processors.tagger.options]", extra + "[processors.tagger.options]")
    (tmp_path / "bad.toml").write_text(text)
    with pytest.raises(ConfigError) as caught:
        declared_processors(load_config(tmp_path / "bad.toml"))
    assert message in str(caught.value)


def test_bad_policies_logs_names_and_options_are_refused(
    app, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    module, folder = app
    text = write_config(tmp_path, module).read_text()
    (tmp_path / "policy.toml").write_text(text.replace("max_retries = 0", "max_retries = -1"))
    with pytest.raises(
        ConfigError, match=re.escape("processors.tagger.policy.max_retries must be")
    ):
        declared_processors(load_config(tmp_path / "policy.toml"))
    (tmp_path / "log.toml").write_text(text.replace("partitions = 3", "partitions = 'many'"))
    with pytest.raises(
        ConfigError, match=re.escape('logs."decl/in".partitions must be an integer')
    ):
        declared_logs(load_config(tmp_path / "log.toml"))
    config_path = write_config(tmp_path, module)
    argv = ["--config", str(config_path), "run", "--app-dir", folder]
    assert main([*argv, "--processor", "nobody"]) == 2
    assert "--processor nobody: not declared; the configuration declares tagger" in (
        capsys.readouterr().err
    )
    (tmp_path / "options.toml").write_text(text.replace('suffix = "!"', 'prefix = "!"'))
    argv = ["--config", str(tmp_path / "options.toml"), "run", "--app-dir", folder]
    assert main([*argv, "--processor", "tagger"]) == 2
    assert "does not take the options ['prefix']" in capsys.readouterr().err


def test_a_declared_log_routes_to_its_backend_and_is_compacted_by_exact_name() -> None:
    from streamcore.log.config import LogConfig

    document = {
        "log": {"configs": {"scratch": {"type": "memory"}}},
        "logs": {
            "decl/events": {"backend": "scratch", "compact": True},
            "decl/plain": {"partitions": 2},
        },
    }
    routing = LogConfig.parse(document, environ={})
    assert routing.route("decl/events").config == "scratch"
    assert routing.route("decl/events").reason == '[logs."decl/events"]'
    assert routing.compacted("decl/events") and not routing.compacted("decl/plain")
    assert routing.route("decl/events-2").config == "default"  # the exact name only
    document["logs"] = {"decl/events": {"backend": "nowhere"}}
    with pytest.raises(ConfigError, match=r"backend is 'nowhere', but no \[log.configs.nowhere\]"):
        LogConfig.parse(document, environ={})
