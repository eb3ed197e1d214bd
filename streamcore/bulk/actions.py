"""Bulk actions: `BulkAction` (a name, a JSON schema for its params, a kind, `apply`) and the
built-ins (docs/bulk.md, "Actions").

`apply(docs, params, F)` turns a batch of `repository` rows into what the job writes: for an
`update` action rows of `id` and the columns to set (MERGEd into the table), for `delete` the ids
to delete, for `export` the rows to write as CSV. `docs` is a Spark DataFrame and `F` is
`pyspark.sql.functions`, both handed in by the job: streamcore never imports pyspark
(docs/design.md, "Top-level layout and boundaries"). Params only ever reach Spark as literals
(`F.lit`), never as SQL text.
"""

from __future__ import annotations

import abc
import copy
import inspect
from collections.abc import Mapping
from typing import Any, ClassVar

import jsonschema

from streamcore.bulk.columns import repository_columns
from streamcore.bulk.errors import BulkParamsError

__all__ = [
    "BUILT_INS",
    "KINDS",
    "BulkAction",
    "CsvExport",
    "Delete",
    "SetProperties",
    "SetSystemProperties",
    "Trash",
    "Untrash",
]


KINDS = ("update", "delete", "export")
DEFAULT_BUCKET_SIZE = 100_000
DEFAULT_BATCH_SIZE = 100_000
# Nuxeo's csvExport defaultQueryLimit: an export is a file someone downloads.
EXPORT_QUERY_LIMIT = 100_000


class BulkAction(abc.ABC):
    """An action run by bulk commands. Subclasses set `name`, `params_schema` (a JSON schema of
    the params object), optionally `kind`, `exclusive` and the size defaults, write a docstring
    (its `description`) and implement `apply`."""

    name: ClassVar[str] = ""
    params_schema: ClassVar[dict[str, Any]] = {"type": "object"}
    kind: ClassVar[str] = "update"
    exclusive: ClassVar[bool] = False
    bucket_size: ClassVar[int] = DEFAULT_BUCKET_SIZE
    batch_size: ClassVar[int] = DEFAULT_BATCH_SIZE
    query_limit: ClassVar[int] = 0

    @property
    def description(self) -> str:
        """The class docstring: what the action does."""
        return inspect.getdoc(type(self)) or ""

    def check_params(self, params: Mapping[str, Any] | None) -> dict[str, Any]:
        """`params` checked against `params_schema`, with the schema's top-level defaults
        filled in; `BulkParamsError` names the field at fault and the fix."""
        checked = copy.deepcopy(dict(params or {}))
        validator = jsonschema.Draft202012Validator(self.params_schema)
        error = jsonschema.exceptions.best_match(validator.iter_errors(checked))
        if error is not None:
            where = "/".join(str(part) for part in error.absolute_path)
            field = f"params/{where}" if where else "params"
            raise BulkParamsError(
                f"action {self.name}: {field}: {error.message}; give params matching "
                f"{self._shape()}",
                where,
            )
        for key, spec in self.params_schema.get("properties", {}).items():
            if key not in checked and "default" in spec:
                checked[key] = copy.deepcopy(spec["default"])
        return checked

    def _shape(self) -> str:
        """The params schema, short, for messages."""
        properties = self.params_schema.get("properties", {})
        if not properties:
            closed = self.params_schema.get("additionalProperties") is False
            return "{} (the action takes no params)" if closed else "the action's params_schema"
        shown = ", ".join(f"{k}: {v.get('type', 'any')}" for k, v in properties.items())
        required = self.params_schema.get("required", [])
        return "{" + shown + "}" + (f" (required: {', '.join(required)})" if required else "")

    @abc.abstractmethod
    def apply(self, docs: Any, params: dict[str, Any], F: Any) -> Any:
        """The rows the job writes for the batch `docs` (a Spark DataFrame of repository rows),
        built with DataFrame methods and `F` (pyspark.sql.functions) only."""


class SetProperties(BulkAction):
    """Set entries of each document's `properties` map: a string value sets its key, null
    removes it."""

    name = "setProperties"
    params_schema = {
        "type": "object",
        "properties": {
            "properties": {
                "type": "object",
                "minProperties": 1,
                "additionalProperties": {"type": ["string", "null"]},
            }
        },
        "required": ["properties"],
        "additionalProperties": False,
    }

    def apply(self, docs: Any, params: dict[str, Any], F: Any) -> Any:
        entries = params["properties"]
        # Every given key leaves the map first: map_concat refuses duplicate keys (Spark's
        # default mapKeyDedupPolicy), so a key set anew must not be there any more.
        given = F.array(*[F.lit(key) for key in entries])
        current = F.coalesce(docs["properties"], F.create_map())
        updated = F.map_filter(current, lambda k, _v: ~F.array_contains(given, k))
        kept = [F.lit(part) for item in entries.items() if item[1] is not None for part in item]
        if kept:
            updated = F.map_concat(updated, F.create_map(*kept))
        return docs.select("id", updated.alias("properties"))


class SetSystemProperties(BulkAction):
    """Set system properties of each document: its lifecycle state and/or its trashed flag."""

    name = "setSystemProperties"
    params_schema = {
        "type": "object",
        "properties": {
            "lifecycleState": {"type": "string", "minLength": 1},
            "isTrashed": {"type": "boolean"},
        },
        "minProperties": 1,
        "additionalProperties": False,
    }

    def apply(self, docs: Any, params: dict[str, Any], F: Any) -> Any:
        return docs.select("id", *[F.lit(value).alias(name) for name, value in params.items()])


class Trash(BulkAction):
    """Put each document in the trash (isTrashed = true)."""

    name = "trash"
    params_schema = {"type": "object", "additionalProperties": False}
    trashed = True

    def apply(self, docs: Any, params: dict[str, Any], F: Any) -> Any:
        return docs.select("id", F.lit(self.trashed).alias("isTrashed"))


class Untrash(Trash):
    """Take each document out of the trash (isTrashed = false)."""

    name = "untrash"
    trashed = False


class Delete(BulkAction):
    """Delete each document from the repository table."""

    name = "delete"
    kind = "delete"
    params_schema = {"type": "object", "additionalProperties": False}

    def apply(self, docs: Any, params: dict[str, Any], F: Any) -> Any:
        return docs.select("id")


class CsvExport(BulkAction):
    """Export columns of the matching documents to one CSV file (RFC 4180 quoting; sorted by id
    unless sort is false; zipped unless zip is false); its path goes to the status result."""

    name = "csvExport"
    kind = "export"
    query_limit = EXPORT_QUERY_LIMIT
    DEFAULT_COLUMNS = ("id", "parentPath", "type", "title", "creator", "created", "modified")
    params_schema = {
        "type": "object",
        "properties": {
            "columns": {
                "type": "array",
                "items": {"type": "string"},
                "minItems": 1,
                "uniqueItems": True,
                "default": list(DEFAULT_COLUMNS),
            },
            "sort": {"type": "boolean", "default": True},
            "zip": {"type": "boolean", "default": True},
        },
        "additionalProperties": False,
    }

    def check_params(self, params: Mapping[str, Any] | None) -> dict[str, Any]:
        checked = super().check_params(params)
        known = repository_columns()
        unknown = [name for name in checked["columns"] if name not in known]
        if unknown:
            raise BulkParamsError(
                f"action {self.name}: params/columns names {', '.join(map(repr, unknown))}, "
                f"which the repository does not have; pick from {', '.join(known)}",
                "columns",
            )
        return checked

    def apply(self, docs: Any, params: dict[str, Any], F: Any) -> Any:
        return docs.select(*params["columns"])


BUILT_INS: tuple[type[BulkAction], ...] = (
    SetProperties,
    SetSystemProperties,
    Trash,
    Untrash,
    Delete,
    CsvExport,
)
