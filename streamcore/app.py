"""`Streamcore`: the front door, one object built from the configuration that hands out the
library's parts (logs, codecs, topologies, stream processors, the outbox).

It adds nothing underneath: each method calls the function a caller would otherwise call with
the same `StreamcoreConfig` (`open_log_manager`, `get_codec`, `Topology.builder`,
`StreamProcessor`, `Outbox` at `default_url`), so the parts stay usable on their own.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from streamcore.config import StreamcoreConfig, load_config

if TYPE_CHECKING:
    from streamcore.codecs import Codec
    from streamcore.computation import Settings, StreamProcessor, Topology, TopologyBuilder
    from streamcore.log import UnifiedLogManager
    from streamcore.outbox import Outbox

__all__ = ["Streamcore"]


class Streamcore:
    """One application's view of streamcore, built from one configuration.

    Named for the library rather than `Application` (Quix Streams' entry object) because it does
    not run the application: Quix's `Application` owns the consume-process-produce loop, while
    this object only opens the parts from one `StreamcoreConfig` and the caller runs them. It owns
    one thing, the log manager `logs` (opened on first use, closed by `close()` or the `with`
    block); what an `open_`/factory method returns (an outbox, a stream processor) the caller
    starts and stops, as when built directly.

    Example::

        with Streamcore.from_config() as sc:
            sc.logs.create("app/in", 2)
            sc.logs.appender("app/in", sc.codec("avro")).append("k", Record.of("k", b"1"))
            topology = sc.topology().add_computation(Double, ["i1:app/in", "o1:app/out"]).build()
            with sc.stream_processor(topology) as processor:
                processor.drain_and_stop(timeout=60)
    """

    # The parts are imported in the methods that open them: an application that only uses the
    # logs does not load SQLAlchemy (the outbox) or the computation runtime.

    def __init__(self, config: StreamcoreConfig) -> None:
        self._config = config
        self._logs: UnifiedLogManager | None = None

    @classmethod
    def from_config(cls, path: str | Path | None = None, **overrides: Any) -> Self:
        """Built from `load_config(path, **overrides)`: the TOML file at `path` (default
        `$STREAMCORE_CONFIG`, else `include/streamcore.toml`) under the `STREAMCORE_*` variables;
        `overrides` are `StreamcoreConfig` fields such as `home=`."""
        return cls(load_config(path, **overrides))

    @property
    def config(self) -> StreamcoreConfig:
        """The configuration every part is opened with."""
        return self._config

    @property
    def logs(self) -> UnifiedLogManager:
        """The log manager (`streamcore.log.open_log_manager`): each log in the backend the
        configuration routes it to. Opened on first use; `close()` closes it."""
        if self._logs is None:
            from streamcore.log import open_log_manager

            self._logs = open_log_manager(self._config)
        return self._logs

    def codec(self, name: str = "avro", schema: Any = None) -> Codec[Any]:
        """`streamcore.codecs.get_codec(name, schema)` with this configuration's schema folder
        and registry: without a schema the `Record` codec of that name."""
        from streamcore.codecs import get_codec

        return get_codec(name, schema, config=self._config)

    @staticmethod
    def topology() -> TopologyBuilder:
        """A new `Topology.builder()`: `add_computation`, `add_processor`, `stream` (the DSL),
        then `build()`."""
        from streamcore.computation import Topology

        return Topology.builder()

    def stream_processor(
        self, topology: Topology, settings: Settings | None = None, **options: Any
    ) -> StreamProcessor:
        """A `StreamProcessor` running `topology` over `logs`, not started: use it as a context
        manager, or `start()` then `stop()` / `drain_and_stop()`. `options` go to the
        constructor (`health_delay=`)."""
        from streamcore.computation import StreamProcessor

        return StreamProcessor(self.logs, topology, settings, **options)

    def outbox(self, url: str | None = None, **options: Any) -> Outbox:
        """An `Outbox` on `url` (default: `$STREAMCORE_OUTBOX_URL`, else SQLite under this
        configuration's home), not started: use it as a context manager, or `start()` and
        `close()`. `options` go to the constructor (`workers=`, `registry=`, ...)."""
        from streamcore.outbox import Outbox
        from streamcore.sql import default_url

        return Outbox(url or default_url(self._config), **options)

    def close(self) -> None:
        """Close the log manager if it was opened; the object can open a new one afterwards."""
        logs, self._logs = self._logs, None
        if logs is not None:
            logs.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Streamcore(home={str(self._config.home)!r})"
