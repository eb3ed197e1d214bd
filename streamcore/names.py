"""`Name`: the identity of a log (or a consumer group), as a URN `namespace/name` or an id
`namespace-name`.

The rules are Nuxeo's (`org.nuxeo.lib.stream.log.Name`): the namespace matches
`[A-Za-z][A-Za-z0-9_]*` and so never holds `-`, which makes the id form reversible (split on the
first `-`). A name with a namespace matches `[A-Za-z0-9][A-Za-z0-9_-]*`; a name without one,
`[A-Za-z0-9][A-Za-z0-9_]*`, and then its URN and id are the same string. The id names folders,
Kafka topics and consumer groups.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from streamcore.errors import InvalidNameError

__all__ = ["NO_NAMESPACE", "Name"]


NO_NAMESPACE = "_GLOBAL_"
_NAMESPACE = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
_NAME_IN_NS = re.compile(r"[A-Za-z0-9][A-Za-z0-9_\-]*")
_NAME_GLOBAL = re.compile(r"[A-Za-z0-9][A-Za-z0-9_]*")
_MAX_LENGTH = 200


@dataclass(frozen=True, slots=True)
class Name:
    """A validated stream (or group) name. Equality and hashing follow the URN."""

    namespace: str
    name: str

    def __post_init__(self) -> None:
        if self.namespace == NO_NAMESPACE:
            if not _NAME_GLOBAL.fullmatch(self.name):
                raise InvalidNameError(
                    f"invalid name {self.name!r}: a name without namespace must match "
                    "[A-Za-z0-9][A-Za-z0-9_]* (use 'namespace/name' to allow '-')"
                )
        else:
            if not _NAMESPACE.fullmatch(self.namespace):
                raise InvalidNameError(
                    f"invalid namespace {self.namespace!r}: it must match [A-Za-z][A-Za-z0-9_]* "
                    "(no '-', no leading digit), e.g. 'audit/entries'"
                )
            if not _NAME_IN_NS.fullmatch(self.name):
                raise InvalidNameError(
                    f"invalid name {self.name!r} in namespace {self.namespace!r}: it must match "
                    "[A-Za-z0-9][A-Za-z0-9_-]*, e.g. 'bulk/command'"
                )
        if len(self.urn) > _MAX_LENGTH:
            raise InvalidNameError(f"name {self.urn[:40]!r}... is longer than {_MAX_LENGTH} chars")

    @classmethod
    def of(cls, value: str | Name) -> Name:
        """Parse a URN (`ns/name`), or return a Name unchanged. Plain `name` has no namespace."""
        if isinstance(value, Name):
            return value
        if not isinstance(value, str) or not value:
            raise InvalidNameError(f"a name must be a non-empty string, got {value!r}")
        if "/" in value:
            namespace, _, name = value.partition("/")
            return cls(namespace, name)
        return cls(NO_NAMESPACE, value)

    of_urn = of

    @classmethod
    def of_id(cls, value: str) -> Name:
        """Parse the id form (`ns-name`), as found in folder and topic names."""
        if "-" in value:
            namespace, _, name = value.partition("-")
            return cls(namespace, name)
        return cls(NO_NAMESPACE, value)

    @property
    def urn(self) -> str:
        return self.name if self.namespace == NO_NAMESPACE else f"{self.namespace}/{self.name}"

    @property
    def id(self) -> str:
        return self.name if self.namespace == NO_NAMESPACE else f"{self.namespace}-{self.name}"

    def __str__(self) -> str:
        return self.urn

    def __repr__(self) -> str:
        return f"Name({self.urn!r})"
