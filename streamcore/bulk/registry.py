"""`ActionRegistry`: the actions a process knows by name; `actions_for(config)`: the built-ins plus
the classes `[bulk] actions = ["module:Class"]` lists."""

from __future__ import annotations

import importlib
import re
from typing import cast

import jsonschema

from streamcore.bulk.actions import BUILT_INS, KINDS, BulkAction
from streamcore.bulk.errors import BulkError, UnknownActionError
from streamcore.config import StreamcoreConfig, load_config

__all__ = ["ActionRegistry", "actions_for"]


_ACTION_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


class ActionRegistry:
    """Actions by name, one instance each."""

    def __init__(self) -> None:
        self._actions: dict[str, BulkAction] = {}

    def register(self, cls: type[BulkAction]) -> type[BulkAction]:
        """Add `cls` (returned, so this works as a class decorator); `BulkError` if it is not a
        well-formed action or its name is taken by another class."""
        if not (isinstance(cls, type) and issubclass(cls, BulkAction)):
            raise BulkError(f"{cls!r} is not a BulkAction subclass; subclass BulkAction")
        where = f"{cls.__module__}.{cls.__qualname__}"
        if not _ACTION_NAME.match(cls.name or ""):
            raise BulkError(
                f"action class {where} has name {cls.name!r}; set `name` to an identifier such "
                "as 'archive'"
            )
        if cls.kind not in KINDS:
            raise BulkError(f"action {cls.name} has kind {cls.kind!r}; use one of {KINDS}")
        if not 0 < cls.batch_size <= cls.bucket_size or cls.query_limit < 0:
            raise BulkError(
                f"action {cls.name} has bucket_size {cls.bucket_size}, batch_size "
                f"{cls.batch_size}, query_limit {cls.query_limit}; bucket_size >= batch_size > 0 "
                "and query_limit >= 0"
            )
        try:
            jsonschema.Draft202012Validator.check_schema(cls.params_schema)
        except jsonschema.SchemaError as exc:
            raise BulkError(
                f"action {cls.name}: params_schema is not a valid JSON schema: {exc.message}"
            ) from None
        existing = self._actions.get(cls.name)
        if existing is not None and type(existing) is not cls:
            raise BulkError(
                f"action name {cls.name} is taken by {type(existing).__module__}."
                f"{type(existing).__qualname__}; give {where} another name"
            )
        self._actions[cls.name] = cls()
        return cls

    def get(self, name: str) -> BulkAction:
        action = self._actions.get(name)
        if action is None:
            raise UnknownActionError(
                f"unknown bulk action {name!r}; known actions: {', '.join(self.names())} (add "
                "yours to [bulk] actions in streamcore.toml)"
            )
        return action

    def names(self) -> list[str]:
        return sorted(self._actions)


def actions_for(config: StreamcoreConfig | None = None) -> ActionRegistry:
    """The built-in actions and those `[bulk] actions` of `config` names as `module:Class`."""
    config = config or load_config()
    registry = ActionRegistry()
    for cls in BUILT_INS:
        registry.register(cls)
    section = config.table.get("bulk", {})
    listed = section.get("actions", []) if isinstance(section, dict) else None
    if not isinstance(listed, list) or not all(isinstance(item, str) for item in listed):
        raise BulkError(f"[bulk] actions must be a list of 'module:Class' strings, got {listed!r}")
    for item in listed:
        registry.register(_load(item))
    return registry


def _load(spec: str) -> type[BulkAction]:
    module_name, _, class_name = spec.partition(":")
    if not module_name or not class_name:
        raise BulkError(
            f"[bulk] actions entry {spec!r} is not 'module:Class', e.g. 'myapp:Archive'"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise BulkError(
            f"[bulk] actions entry {spec!r}: cannot import {module_name} ({exc}); check the "
            "module is installed in this environment"
        ) from None
    cls = getattr(module, class_name, None)
    if cls is None:
        raise BulkError(f"[bulk] actions entry {spec!r}: {module_name} has no {class_name}")
    return cast("type[BulkAction]", cls)  # ActionRegistry.register checks that it is one
