"""The columns a bulk query and a CSV export may name: those of a repository-shaped table of the
catalog (streamcore.tables, which lists the system columns `isTrashed` and `lifecycleState` that
bulk actions set), with their portable types."""

from __future__ import annotations

from streamcore.config import StreamcoreConfig, load_config
from streamcore.tables import table_spec

__all__ = ["repository_columns"]


def repository_columns(
    repository: str = "repository", config: StreamcoreConfig | None = None
) -> dict[str, str]:
    """Column name → portable type (`string`, `timestamp`, `map<string,string>`, ...)."""
    spec = table_spec(repository, config or load_config())
    return {column.name: column.type for column in spec.columns}
