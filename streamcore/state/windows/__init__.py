"""Windows on event time over state stores (docs/state.md, "Windows"): window specs with an
explicit grace, window and session stores laid out over a `KeyValueStore` (its changelog,
checkpoint and restore included), and the per-record aggregation a windowed DSL step runs.

- `specs`: `TumblingWindows`, `HoppingWindows`, `SlidingWindows`, `SessionWindows`: which
  windows a record belongs to, when a window closes on stream time, retention, lateness.
- `store`: `TimeWindowStore` and `SessionStore`: the key layout, fetches, closing and expiry.
- `aggregate`: `aggregate_windowed` and `aggregate_session`: update a record's windows or say it
  is late (`LateRecord`), never dropping it silently.
- `keys`: the sortable text of times and record keys the window layouts share.
- `cache`: `WindowCache`, tumbling and hopping aggregates kept decoded in memory and written to
  their store once per checkpoint.
"""

from streamcore.state.windows.aggregate import (
    LateRecord,
    SessionUpdate,
    aggregate_session,
    aggregate_windowed,
)
from streamcore.state.windows.cache import WindowCache
from streamcore.state.windows.specs import (
    HoppingWindows,
    SessionWindows,
    SlidingWindows,
    TimeWindowSpec,
    TumblingWindows,
    Window,
    WindowSpec,
)
from streamcore.state.windows.store import SessionStore, TimeWindowStore, WindowedValue

__all__ = [
    "HoppingWindows",
    "LateRecord",
    "SessionStore",
    "SessionUpdate",
    "SessionWindows",
    "SlidingWindows",
    "TimeWindowSpec",
    "TimeWindowStore",
    "TumblingWindows",
    "Window",
    "WindowCache",
    "WindowSpec",
    "WindowedValue",
    "aggregate_session",
    "aggregate_windowed",
]
