"""A topology named as `module:function`, the way `streamcore run` and the backfill job take it.

    topology, settings = load_topology("myapp.topologies:orders")

The function returns a `Topology` or a `(Topology, Settings)` tuple; `app_dir` goes on the
import path first, so an application's package loads from its folder.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping
from typing import Any

from streamcore.computation.settings import Settings
from streamcore.computation.topology import Topology
from streamcore.errors import TopologyError

__all__ = ["TopologySpecError", "load_topology"]


class TopologySpecError(TopologyError):
    """`module:function` does not name a topology factory (malformed, not importable, not a
    function, or returning something else). Fix the name or the import path; retrying does
    not help."""


def load_topology(
    spec: str, app_dir: str = ".", options: Mapping[str, Any] | None = None
) -> tuple[Topology, Settings]:
    """(Topology, Settings) from `module:factory` (Settings default when the factory returns a
    Topology only), the factory called with `options` as keyword arguments."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise TopologySpecError(f"{spec!r}: give the topology factory as module:function")
    if app_dir not in sys.path:
        sys.path.insert(0, app_dir)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise TopologySpecError(
            f"cannot import {module_name!r} ({exc}); run from the folder holding it or pass "
            "--app-dir"
        ) from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise TopologySpecError(f"{module_name} has no function {attr!r}")
    try:
        result = factory(**(options or {}))
    except TypeError as exc:
        if not options:
            raise
        raise TopologySpecError(
            f"{spec} does not take the options {sorted(options)} ({exc}); fix the options or "
            "the function's parameters"
        ) from None
    topology, settings = result if isinstance(result, tuple) else (result, None)
    if not isinstance(topology, Topology) or not isinstance(settings, Settings | None):
        raise TopologySpecError(
            f"{spec}() returned {type(result).__name__}; it must return a Topology or a "
            "(Topology, Settings) tuple"
        )
    return topology, settings or Settings()
