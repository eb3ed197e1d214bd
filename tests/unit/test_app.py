"""The front door: `streamcore.Streamcore` built from a configuration file opens a real local log
under that configuration's home, codecs, a topology and a stream processor over it, and an
outbox; `import streamcore` stays cheap and names its version."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

import streamcore
from streamcore import Computation, Record, Settings, Streamcore
from streamcore.codecs import JsonCodec, RecordCodec
from streamcore.config import project_root


class Double(Computation):
    def __init__(self) -> None:
        super().__init__("double", inputs=1, outputs=1)

    def process_record(self, context, input_stream, record) -> None:
        context.produce_record("o1", record.key, b"%d" % (2 * int(record.data)))
        context.ask_for_checkpoint()


@pytest.fixture
def app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("STREAMCORE_LOG_BACKEND", raising=False)
    monkeypatch.delenv("STREAMCORE_OUTBOX_URL", raising=False)
    config = tmp_path / "streamcore.toml"
    config.write_text('[log.configs.default]\ntype = "local"\n')
    with Streamcore.from_config(config, home=tmp_path / "home") as sc:
        yield sc


def test_from_config_reads_the_file_and_overrides(app: Streamcore, tmp_path: Path) -> None:
    assert app.config.source == tmp_path / "streamcore.toml"
    assert app.config.home == tmp_path / "home"
    assert repr(app) == f"Streamcore(home={str(tmp_path / 'home')!r})"


def test_a_topology_runs_over_the_local_log_under_home(app: Streamcore, tmp_path: Path) -> None:
    assert app.logs is app.logs  # one manager, opened once
    app.logs.create("app/in", 2)
    codec = app.codec()
    assert isinstance(codec, RecordCodec)
    records = [(f"k{i}", Record.of(f"k{i}", b"%d" % i)) for i in range(20)]
    app.logs.appender("app/in", codec).append_batch(records)
    topology = app.topology().add_computation(Double, ["i1:app/in", "o1:app/doubled"]).build()
    with app.stream_processor(topology, Settings(drain_quiet=0.2)) as processor:
        assert processor.manager is app.logs
        assert processor.drain_and_stop(timeout=60)
    with app.logs.tailer("test/reader", "app/doubled", codec) as tailer:
        doubled = sorted(int(r.message.data) for r in tailer)
    assert doubled == [2 * i for i in range(20)]
    assert (tmp_path / "home" / "log").is_dir()  # the configured home, not the default one


def test_codec_with_a_schema_and_json(app: Streamcore) -> None:
    assert isinstance(app.codec("json", {}), JsonCodec)
    schema = {"type": "record", "name": "Point", "fields": [{"name": "x", "type": "int"}]}
    codec = app.codec("avro", schema)
    assert codec.decode(codec.encode({"x": 3})) == {"x": 3}


def test_outbox_defaults_to_sqlite_under_home(app: Streamcore, tmp_path: Path) -> None:
    outbox = app.outbox(workers=1)
    try:
        assert outbox.engine.url.database == str(tmp_path / "home" / "outbox.db")
        assert outbox.workers == 1
        outbox.create_schema()
    finally:
        outbox.close()
    assert (tmp_path / "home" / "outbox.db").is_file()


def test_close_closes_the_log_manager_and_a_new_one_opens_after(app: Streamcore) -> None:
    first = app.logs
    app.close()
    assert app.logs is not first


def test_version_from_the_metadata_else_from_pyproject(monkeypatch: pytest.MonkeyPatch) -> None:
    assert streamcore.__version__ == metadata.version("streamcore")

    def not_installed(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", not_installed)
    pyproject = tomllib.loads((project_root() / "pyproject.toml").read_text())
    assert streamcore._version() == pyproject["project"]["version"]


def test_the_package_face() -> None:
    assert sorted(streamcore.__all__) == sorted([*streamcore._EXPORTS, "__version__"])
    for name in streamcore.__all__:
        assert getattr(streamcore, name) is not None, name
    assert set(streamcore.__all__) <= set(dir(streamcore))
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        streamcore.nothing  # noqa: B018


def test_import_streamcore_loads_nothing_else() -> None:
    code = (
        "import sys, streamcore; "
        "print(sorted(m for m in sys.modules if m.startswith('streamcore.')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "['streamcore.lazy_exports']"  # the faces' helper, no dependency
