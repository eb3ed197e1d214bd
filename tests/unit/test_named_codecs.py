"""Custom codecs by name (streamcore.codecs.named; docs/codecs.md, "Custom codecs by name"):
registered in the process, in the configuration or by an entry point, and accepted by
`get_codec`, `Settings`, the CLI's `--codec` and the DSL."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from streamcore.codecs import Codec, get_codec, register_codec
from streamcore.codecs import named as named_module
from streamcore.computation import Settings
from streamcore.computation.dsl_values import resolve_value_codec
from streamcore.config import LogDefaults, StreamcoreConfig
from streamcore.errors import CodecError, ConfigError, InvalidArgumentError, TopologyError
from streamcore.record import Record


class Upper(Codec[str]):
    """Text values, upper-cased on the way in (a value codec)."""

    name = "upper"

    def encode(self, message: str) -> bytes:
        return message.upper().encode()

    def decode(self, data: bytes) -> str:
        return data.decode()


class Pipe(Codec[Record]):
    """Records as `key|data` (a stream's codec)."""

    name = "pipe"

    def encode(self, message: Record) -> bytes:
        return message.key.encode() + b"|" + message.data

    def decode(self, data: bytes) -> Record:
        key, _, body = data.partition(b"|")
        return Record.of(key.decode(), body)


@pytest.fixture(autouse=True)
def clean_registry() -> Iterator[None]:
    yield
    named_module._registered.clear()
    named_module._made.clear()


def test_a_registered_codec_is_accepted_wherever_a_codec_name_is() -> None:
    register_codec("upper", Upper)
    register_codec("pipe", Pipe)
    assert get_codec("upper").encode("hi") == b"HI"
    assert get_codec("upper") is get_codec("upper")  # made once
    Settings().set_codec("app/in", "pipe")  # a stream's codec
    codec = resolve_value_codec("upper", where="stream app/in")  # a DSL value codec
    assert codec.encode("x") == b"X"
    with pytest.raises(CodecError, match="a custom codec takes no schema"):
        get_codec("upper", {"type": "string"})


def test_the_cli_reads_and_writes_with_a_configured_codec(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from streamcore.cli.main import main

    (tmp_path / "pipe_codecs.py").write_text(
        textwrap.dedent(
            """
            from streamcore.codecs import Codec
            from streamcore.record import Record

            class Pipe(Codec):
                name = "pipe"

                def encode(self, message):
                    return message.key.encode() + b"|" + message.data

                def decode(self, data):
                    key, _, body = data.partition(b"|")
                    return Record.of(key.decode(), body)
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    config = tmp_path / "streamcore.toml"
    config.write_text('[codec.custom]\npipe = "pipe_codecs:Pipe"\n')
    from streamcore.config import load_config
    from streamcore.log import open_log_manager

    with open_log_manager(load_config(config)) as manager:
        manager.create("app/piped", 1)
        manager.appender("app/piped").append("k1", b"k1|hello")
    assert main(["--config", str(config), "cat", "-l", "app/piped", "--codec", "pipe"]) == 0
    assert "hello" in capsys.readouterr().out
    assert main(["--config", str(config), "cat", "-l", "app/piped", "--codec", "nope"]) == 2
    assert "unknown codec 'nope'; use one of json, avro" in capsys.readouterr().err


def test_an_entry_point_codec_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    class EntryPoint:
        name = "upper"

        def load(self) -> Any:
            return Upper

    def entry_points(group: str) -> list[Any]:
        return [EntryPoint()] if group == "streamcore.codecs" else []

    monkeypatch.setattr(named_module.metadata, "entry_points", entry_points)
    assert isinstance(get_codec("upper"), Upper)


def test_bad_names_and_factories_are_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="cannot register a codec named 'avro'"):
        register_codec("avro", Upper)
    with pytest.raises(TopologyError, match="unknown codec 'nope'; use one of json"):
        Settings().set_codec("app/in", "nope")
    register_codec("broken", lambda: "not a codec")  # type: ignore[arg-type,return-value]
    with pytest.raises(ConfigError, match=r"returned str, not a streamcore\.codecs\.Codec"):
        get_codec("broken")
    bad = StreamcoreConfig(
        home=tmp_path, log=LogDefaults(), table={"codec": {"custom": {"x": "y"}}}
    )
    with pytest.raises(ConfigError, match="give the factory as module:function"):
        named_module.custom_codec("x", bad)
