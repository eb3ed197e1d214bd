"""Custom codecs by name: a codec of your own, registered under a name, is accepted wherever a
codec name is (docs/codecs.md, "Custom codecs by name"): `get_codec(name)`, `Settings.set_codec`,
the CLI's `--codec`, the DSL's value codecs and the outbox's `codec=`.

Three ways to register one, looked up in this order:

1. `register_codec(name, factory)` in the process;
2. the configuration: `[codec.custom]` maps names to `"module:factory"`;
3. the installed packages' entry points of group `streamcore.codecs` (name = factory).

A factory takes no argument and returns a `Codec`; it is called once per name and process (the
codec is kept). As a stream's codec (`Settings.set_codec`, `--codec`) a custom codec encodes and
decodes `Record`s; as a DSL value codec or an outbox codec, the values themselves. A name of a
built-in codec cannot be taken.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from importlib import metadata
from typing import TYPE_CHECKING, Any

from streamcore.codecs.base import Codec
from streamcore.errors import ConfigError, InvalidArgumentError

if TYPE_CHECKING:
    from streamcore.config import StreamcoreConfig

__all__ = ["ENTRY_POINT_GROUP", "custom_codec", "custom_codec_names", "register_codec"]

ENTRY_POINT_GROUP = "streamcore.codecs"
# Built-in names (streamcore.codecs.CODEC_NAMES, the DSL's "bytes", the CLI's "raw"): not to take.
RESERVED = ("json", "avro", "avro-binary", "avro-json", "avro-confluent", "bytes", "raw")

Factory = Callable[[], Codec[Any]]
_registered: dict[str, Factory] = {}
_made: dict[str, Codec[Any]] = {}
_lock = threading.Lock()


def register_codec(name: str, factory: Factory) -> None:
    """Make `name` mean the codec `factory()` returns, in this process."""
    if not isinstance(name, str) or not name or name in RESERVED:
        raise InvalidArgumentError(
            f"cannot register a codec named {name!r}: pick a name that is not one of the "
            f"built-in ones ({', '.join(RESERVED)})"
        )
    with _lock:
        _registered[name] = factory
        _made.pop(name, None)


def _configured(config: StreamcoreConfig | None) -> dict[str, str]:
    if config is None:
        from streamcore.config import load_config

        config = load_config()
    section = config.table.get("codec", {}).get("custom", {})
    if not isinstance(section, dict):
        raise ConfigError(f"[codec.custom] must map names to 'module:factory', got {section!r}")
    return {str(k): str(v) for k, v in section.items()}


def _entry_points() -> dict[str, Any]:
    return {ep.name: ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}


def _import(name: str, spec: str) -> Factory:
    module_name, sep, attr = spec.partition(":")
    if not sep:
        raise ConfigError(f"[codec.custom] {name} = {spec!r}: give the factory as module:function")
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"[codec.custom] {name} = {spec!r} does not load: {exc}") from None
    return factory  # type: ignore[no-any-return]


def custom_codec_names(config: StreamcoreConfig | None = None) -> tuple[str, ...]:
    """Every custom codec name known: registered, configured, or from entry points."""
    names = {*_registered, *_configured(config), *_entry_points()}
    return tuple(sorted(names - set(RESERVED)))


def custom_codec(name: str, config: StreamcoreConfig | None = None) -> Codec[Any] | None:
    """The custom codec called `name`, or None when there is none."""
    made = _made.get(name)
    if made is not None or name in RESERVED:
        return made
    factory = _registered.get(name)
    if factory is None:
        spec = _configured(config).get(name)
        if spec is not None:
            factory = _import(name, spec)
        else:
            found = _entry_points().get(name)
            if found is None:
                return None
            factory = found.load()
    codec = factory()
    if not isinstance(codec, Codec):
        raise ConfigError(
            f"the factory of codec {name!r} returned {type(codec).__name__}, not a "
            "streamcore.codecs.Codec"
        )
    with _lock:
        return _made.setdefault(name, codec)
