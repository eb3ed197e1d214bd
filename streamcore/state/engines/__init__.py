"""The engines under key-value stores: `memory` (tests, the `TopologyTestDriver`) and the
persistent one on local disk. Nothing is re-exported here, so the memory engine does not load
the persistent one's library."""
