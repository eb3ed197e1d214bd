"""Actions: the built-ins' metadata and params, the registry and `[bulk] actions`. Their `apply`
runs on Spark and is tested with the bulk job."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from streamcore.bulk import (
    ActionRegistry,
    BulkAction,
    BulkError,
    BulkParamsError,
    UnknownActionError,
    actions_for,
)
from streamcore.config import load_config

BUILT_INS = ["csvExport", "delete", "setProperties", "setSystemProperties", "trash", "untrash"]


@pytest.fixture
def registry() -> ActionRegistry:
    return actions_for(load_config())


def test_built_ins_and_their_metadata(registry: ActionRegistry) -> None:
    assert registry.names() == BUILT_INS
    kinds = {name: registry.get(name).kind for name in BUILT_INS}
    assert kinds == {
        "csvExport": "export",
        "delete": "delete",
        "setProperties": "update",
        "setSystemProperties": "update",
        "trash": "update",
        "untrash": "update",
    }
    for name in BUILT_INS:
        action = registry.get(name)
        assert action.name == name and not action.exclusive
        assert (action.bucket_size, action.batch_size) == (100_000, 100_000)
        assert action.description and action.description[0].isupper()
    assert registry.get("csvExport").query_limit == 100_000
    assert registry.get("trash").query_limit == 0


def test_unknown_action_lists_the_known(registry: ActionRegistry) -> None:
    with pytest.raises(
        UnknownActionError, match="unknown bulk action 'nope'; known actions: csvExport"
    ):
        registry.get("nope")


@pytest.mark.parametrize(
    ("action", "params", "checked"),
    [
        ("setProperties", {"properties": {"dc:source": "x", "old": None}}, None),
        ("setSystemProperties", {"lifecycleState": "deleted"}, None),
        ("setSystemProperties", {"isTrashed": True, "lifecycleState": "project"}, None),
        ("trash", None, {}),
        ("untrash", {}, {}),
        ("delete", None, {}),
        (
            "csvExport",
            None,
            {
                "columns": ["id", "parentPath", "type", "title", "creator", "created", "modified"],
                "sort": True,
                "zip": True,
            },
        ),
        ("csvExport", {"columns": ["id", "isTrashed"], "zip": False}, None),
    ],
)
def test_params_accepted(
    registry: ActionRegistry, action: str, params: Any, checked: dict[str, Any] | None
) -> None:
    result = registry.get(action).check_params(params)
    if checked is None:
        assert {k: result[k] for k in params} == params
    else:
        assert result == checked


@pytest.mark.parametrize(
    ("action", "params", "field", "message"),
    [
        ("setProperties", {}, "", "'properties' is a required property"),
        ("setProperties", {"properties": {}}, "properties", "should be non-empty"),
        (
            "setProperties",
            {"properties": {"k": 1}},
            "properties/k",
            "1 is not of type 'string', 'null'",
        ),
        ("setProperties", {"properties": {"k": "v"}, "x": 1}, "", "('x' was unexpected)"),
        ("setSystemProperties", {}, "", "should be non-empty"),
        (
            "setSystemProperties",
            {"isTrashed": "yes"},
            "isTrashed",
            "'yes' is not of type 'boolean'",
        ),
        ("setSystemProperties", {"lifecycleState": ""}, "lifecycleState", "should be non-empty"),
        ("trash", {"force": True}, "", "the action takes no params"),
        ("untrash", {"force": True}, "", "('force' was unexpected)"),
        ("delete", {"force": True}, "", "('force' was unexpected)"),
        ("csvExport", {"columns": []}, "columns", "should be non-empty"),
        ("csvExport", {"columns": ["id", "id"]}, "columns", "non-unique"),
        ("csvExport", {"sort": "yes"}, "sort", "'yes' is not of type 'boolean'"),
        ("csvExport", {"columns": ["id", "nope"]}, "columns", "names 'nope', which the repository"),
    ],
)
def test_params_refused(
    registry: ActionRegistry, action: str, params: dict[str, Any], field: str, message: str
) -> None:
    with pytest.raises(BulkParamsError) as caught:
        registry.get(action).check_params(params)
    assert caught.value.field == field
    assert message in str(caught.value)
    assert str(caught.value).startswith(f"action {action}: params")


class Archive(BulkAction):
    """Move the matching documents under one folder."""

    name = "archive"
    exclusive = True
    bucket_size = 10
    batch_size = 5
    params_schema = {
        "type": "object",
        "properties": {"folder": {"type": "string", "pattern": "^/"}},
        "required": ["folder"],
        "additionalProperties": False,
    }

    def apply(self, docs: Any, params: dict[str, Any], F: Any) -> Any:
        return docs.select("id", F.lit(params["folder"]).alias("parentPath"))


def test_register_a_custom_action() -> None:
    registry = ActionRegistry()
    assert registry.register(Archive) is Archive
    registry.register(Archive)  # the same class again is harmless
    archive = registry.get("archive")
    assert archive.description == "Move the matching documents under one folder."
    assert archive.check_params({"folder": "/a"}) == {"folder": "/a"}
    with pytest.raises(BulkParamsError, match="params/folder: 'a' does not match"):
        archive.check_params({"folder": "a"})


def test_register_refuses_bad_actions() -> None:
    registry = ActionRegistry()
    registry.register(Archive)

    class Other(Archive):
        """Same name."""

    with pytest.raises(BulkError, match=r"action name archive is taken by .*Archive"):
        registry.register(Other)

    class NoName(Archive):
        """No name."""

        name = ""

    with pytest.raises(BulkError, match="set `name` to an identifier"):
        registry.register(NoName)

    class BadKind(Archive):
        """Bad kind."""

        name = "bad"
        kind = "move"

    with pytest.raises(BulkError, match="kind 'move'"):
        registry.register(BadKind)

    class BadSizes(Archive):
        """Batch bigger than bucket."""

        name = "sizes"
        batch_size = 20

    with pytest.raises(BulkError, match="bucket_size >= batch_size > 0"):
        registry.register(BadSizes)

    class BadSchema(Archive):
        """Invalid schema."""

        name = "schema"
        params_schema = {"type": "nonsense"}

    with pytest.raises(BulkError, match="not a valid JSON schema"):
        registry.register(BadSchema)
    with pytest.raises(BulkError, match="not a BulkAction subclass"):
        registry.register(dict)  # type: ignore[arg-type]


def _config(tmp_path: Path, actions: str) -> Any:
    path = tmp_path / "streamcore.toml"
    path.write_text(f"[bulk]\nactions = {actions}\n")
    return load_config(path)


def test_actions_for_adds_configured_classes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "myactions.py").write_text(
        "from streamcore.bulk import BulkAction\n\n"
        "class Archive(BulkAction):\n"
        '    """Archive."""\n'
        '    name = "archive"\n'
        "    def apply(self, docs, params, F):\n"
        '        return docs.select("id")\n'
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "myactions", raising=False)
    registry = actions_for(_config(tmp_path, '["myactions:Archive"]'))
    assert registry.names() == sorted([*BUILT_INS, "archive"])


@pytest.mark.parametrize(
    ("actions", "message"),
    [
        ('"myactions:Archive"', "must be a list of 'module:Class' strings"),
        ('["nomodule"]', "is not 'module:Class'"),
        ('["no_such_module_xyz:A"]', "cannot import no_such_module_xyz"),
        ('["streamcore.bulk:Nothing"]', "streamcore.bulk has no Nothing"),
    ],
)
def test_actions_for_refuses_bad_entries(tmp_path: Path, actions: str, message: str) -> None:
    with pytest.raises(BulkError, match=message):
        actions_for(_config(tmp_path, actions))
