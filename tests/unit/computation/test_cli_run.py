"""`streamcore run` and `streamcore metrics` in-process, on the local backend."""

from __future__ import annotations

import itertools
import json
import textwrap
from pathlib import Path

import pytest

from streamcore.cli.main import main
from streamcore.codecs import get_codec
from streamcore.log import open_log_manager
from streamcore.record import Record

APP = textwrap.dedent(
    """
    from streamcore.computation import Computation, ComputationPolicy, Settings, Topology

    class Parse(Computation):
        def __init__(self):
            super().__init__("parse", 1, 1)

        def process_record(self, context, input_stream, record):
            if record.data == b"bad":
                raise ValueError("cannot parse")
            context.produce_record("o1", record.key, record.data.upper())
            context.ask_for_checkpoint()

    def topology():
        return Topology.builder().add_computation(Parse, ["i1:cli/in", "o1:cli/out"]).build()

    def with_settings():
        settings = Settings(drain_quiet=0.2).set_policy(
            "parse", ComputationPolicy(max_retries=0, dlq="cli/dlq")
        )
        return topology(), settings

    def fragile():
        return topology(), Settings(drain_quiet=0.2).set_policy("parse", ComputationPolicy.NONE)

    def not_a_topology():
        return 42
    """
)
_names = itertools.count()


@pytest.fixture
def app(tmp_path: Path) -> tuple[str, str]:
    """(module name, folder) of a fresh copy of the app (unique name: modules are cached)."""
    name = f"cli_app_{next(_names)}"
    (tmp_path / f"{name}.py").write_text(APP)
    return name, str(tmp_path)


def feed(records: list[Record]) -> None:
    with open_log_manager() as manager:
        manager.create("cli/in", 2)
        manager.appender("cli/in", get_codec("avro")).append_batch([(r.key, r) for r in records])


def test_run_drains_and_prints_a_summary(app, capsys: pytest.CaptureFixture[str]) -> None:
    module, folder = app
    feed([Record.of(f"k{i}", b"v") for i in range(20)] + [Record.of("x", b"bad")])
    argv = ["run", f"{module}:with_settings", "--app-dir", folder, "--drain", "--timeout", "60"]
    assert main([*argv, "--json", "--concurrency", "parse=2"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["drained"] is True and report["failed"] == []
    (row,) = report["computations"]
    assert (row["computation"], row["units"], row["processed"]) == ("parse", 2, 21)
    assert (row["dead_lettered"], row["lag"], row["produced"]) == (1, 0, 21)
    assert main(["metrics", f"{module}:topology", "--app-dir", folder]) == 0
    text = capsys.readouterr().out
    assert 'streamcore_computation_lag{computation="parse",stream="cli/in"} 0.0' in text
    assert 'streamcore_computation_end_offset{computation="parse",stream="cli/in"} 21.0' in text
    assert main(["metrics", f"{module}:topology", "--app-dir", folder, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["lag"] == 0


def test_run_exits_1_when_a_computation_terminates(app, capsys: pytest.CaptureFixture[str]) -> None:
    module, folder = app
    feed([Record.of("a", b"ok"), Record.of("b", b"bad")])
    assert (
        main(["run", f"{module}:fragile", "--app-dir", folder, "--drain", "--timeout", "30"]) == 1
    )
    captured = capsys.readouterr()
    assert "parse" in captured.out and "terminated" in captured.out
    assert "computation parse terminated: record 'b'" in captured.err


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("nomodule_here:topology", "cannot import 'nomodule_here'"),
        ("{module}:missing", "has no function 'missing'"),
        ("{module}:not_a_topology", "must return a Topology or a (Topology, Settings) tuple"),
        ("{module}", "give the topology factory as module:function"),
    ],
)
def test_run_reports_bad_factories(app, capsys, spec: str, message: str) -> None:
    module, folder = app
    assert main(["run", spec.format(module=module), "--app-dir", folder]) == 2
    assert message in capsys.readouterr().err


def test_run_starts_a_new_group_at_the_end_when_told(app, capsys) -> None:
    module, folder = app
    feed([Record.of(f"k{i}", b"v") for i in range(5)])
    argv = ["run", f"{module}:with_settings", "--app-dir", folder, "--drain", "--timeout", "60"]
    assert main([*argv, "--start", "middle"]) == 2
    assert "--start 'middle': start of default must be one of earliest, latest" in (
        capsys.readouterr().err
    )
    assert main([*argv, "--json", "--start", "parse=latest"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["computations"]
    assert (row["processed"], row["lag"]) == (0, 0)  # the 5 records were there before it started


def test_run_takes_group_timings_and_refuses_wrong_ones(app, capsys) -> None:
    module, folder = app
    feed([Record.of("k", b"v")])
    argv = ["run", f"{module}:with_settings", "--app-dir", folder, "--drain", "--timeout", "60"]
    assert main([*argv, "--group", "sesion_timeout=5s"]) == 2
    assert "--group: unknown key(s) ['sesion_timeout'] in [groups]" in capsys.readouterr().err
    assert main([*argv, "--group", "session_timeout"]) == 2
    assert "use KEY=VALUE" in capsys.readouterr().err
    assert (
        main([*argv, "--json", "--group", "session_timeout=5s", "--group", "heartbeat_interval=1s"])
        == 0
    )
    (row,) = json.loads(capsys.readouterr().out)["computations"]
    assert row["processed"] == 1


def test_metrics_needs_a_target_and_a_running_server(capsys) -> None:
    assert main(["metrics"]) == 2
    assert "give a topology (module:factory), --port or --url" in capsys.readouterr().err
    assert main(["metrics", "--port", "1"]) == 2
    assert "is `streamcore run --metrics-port` running?" in capsys.readouterr().err
