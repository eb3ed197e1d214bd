"""`StoreSpec`: a state store as a topology declares it (Kafka Streams' `StoreBuilder`): its name,
how its values are encoded, and which engine keeps it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from streamcore.errors import TopologyError

__all__ = ["StoreSpec"]

_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}\Z")


@dataclass(frozen=True)
class StoreSpec:
    """A key-value store of a computation, one instance per task.

    `codec`: how values are stored: `"json"` (default), `"bytes"`, an Avro mode with `schema`, or
    a `streamcore.codecs.Codec` (never pickle). `engine`: `"memory"`, the persistent engine's
    name, or None for the processor's configured default (`[state] engine`). `cache`: how many
    keys keep their decoded value for reads (`KeyValueStore`; 0: none). The name is part of the
    changelog stream's name, `<namespace>/<computation>-<name>-changelog`."""

    name: str
    codec: Any = "json"
    schema: Any = None
    engine: str | None = None
    cache: int = 100_000

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise TopologyError(
                f"state store name {self.name!r} is not valid: use 1-64 letters, digits and '_', "
                "starting with a letter (no '-': the name is part of the changelog stream's "
                "name, whose parts '-' separates)"
            )
        if type(self.cache) is not int or self.cache < 0:
            raise TopologyError(
                f"state store {self.name!r}: cache is {self.cache!r}; give a number of keys >= 0 "
                "(0 turns the read cache off)"
            )

    @classmethod
    def of(cls, spec: str | StoreSpec) -> StoreSpec:
        """`spec` itself, or a JSON store named `spec`."""
        if isinstance(spec, StoreSpec):
            return spec
        if isinstance(spec, str):
            return cls(spec)
        raise TopologyError(
            f"a state store is declared by its name or a StoreSpec, got {type(spec).__name__}"
        )
