"""State stores of stateful computations (docs/state.md): key-value stores per task and store,
backed by an engine on local disk or in memory, made durable by a changelog stream.

Layers, bottom up:
- `engine`: `StoreEngine`, the bytes layer (sorted keys, one atomic write of a batch of changes
  with its checkpoint); `engines.memory` for tests and the `TopologyTestDriver`, a persistent
  engine on local disk for production.
- `store`: `KeyValueStore`, what a computation reads and writes (str keys, values through a
  codec), buffering its writes until the processor's checkpoint.
- `changelog` and `restore`: every checkpoint's changes appended to the store's changelog with
  the input positions that produced them, and the restore that rebuilds a store from it.
- `windows`: window specs on event time, and the window and session stores laid out over a
  `KeyValueStore` (so they get its changelog and restore), with the per-record aggregation step
  the DSL's windowed aggregations run.
"""

from streamcore.state.engine import StoreEngine
from streamcore.state.store import KeyValueStore

__all__ = ["KeyValueStore", "StoreEngine"]
