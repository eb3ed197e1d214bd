"""The local log: the embedded, broker-less backend and the default. Segment files under a folder
(`STREAMCORE_HOME/log/` unless configured), one writer per partition across processes, any
number of readers; the layout is in `streamcore.log.local.manager`, the format in
`streamcore.log.local.segment`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from streamcore.lazy_exports import lazy_exports

if TYPE_CHECKING:
    # What __getattr__ hands out, for type checkers ("X as X": `__all__` is computed).
    from streamcore.log.local.appender import LocalAppender as LocalAppender
    from streamcore.log.local.description import LocalLogDescription as LocalLogDescription
    from streamcore.log.local.manager import LocalLogManager as LocalLogManager

# Exports are imported on first use (PEP 562), like every backend folder's.
_EXPORTS = {
    "LocalAppender": "appender",
    "LocalLogDescription": "description",
    "LocalLogManager": "manager",
}
__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
