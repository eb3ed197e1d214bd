"""streamcore: partitioned append-only logs, codecs, computations and a transactional outbox.

The front door is `Streamcore.from_config()` (docs/api.md): one object built from the
configuration that opens the logs, codecs, topologies, stream processors and the outbox. The
other names here are the parts it hands out, for callers that build them directly; each package
(`streamcore.log`, `streamcore.codecs`, `streamcore.computation`, `streamcore.outbox`) has the
rest of its API in its own `__all__`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from streamcore.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from streamcore.app import Streamcore
    from streamcore.codecs import Codec, get_codec
    from streamcore.computation import Computation, Settings, StreamProcessor, Topology
    from streamcore.config import StreamcoreConfig, load_config
    from streamcore.log import open_log_manager
    from streamcore.outbox import Outbox
    from streamcore.record import Record

# Exports are imported on first use (PEP 562), so `import streamcore` (and every
# `import streamcore.x`, which runs this file first) loads nothing else.
_EXPORTS = {
    "Streamcore": "app",
    "Codec": "codecs",
    "get_codec": "codecs",
    "Computation": "computation",
    "Settings": "computation",
    "StreamProcessor": "computation",
    "Topology": "computation",
    "StreamcoreConfig": "config",
    "load_config": "config",
    "open_log_manager": "log",
    "Outbox": "outbox",
    "Record": "record",
}
__all__ = [  # written out for the linters; tests/unit/test_app.py keeps it equal to _EXPORTS
    "Codec",
    "Computation",
    "Outbox",
    "Record",
    "Settings",
    "StreamProcessor",
    "Streamcore",
    "StreamcoreConfig",
    "Topology",
    "__version__",
    "get_codec",
    "load_config",
    "open_log_manager",
]


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("streamcore")
    except metadata.PackageNotFoundError:
        # A source checkout used without installing (PYTHONPATH=.): the version pyproject.toml
        # declares, else an explicit unknown rather than an error at import.
        import tomllib

        from streamcore.config import project_root

        try:
            text = (project_root() / "pyproject.toml").read_text()
            return str(tomllib.loads(text)["project"]["version"])
        except (OSError, KeyError, tomllib.TOMLDecodeError):
            return "0+unknown"


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals(), {"__version__": _version})
