"""Where document imports may read files from: the allowed import roots (setting `import.roots`,
`STREAMCORE_IMPORT_ROOTS`; default the home). No pyspark import: checked before Spark starts, by
the job's argument checks and by the DAG's validate task through them."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from streamcore.errors import StreamcoreError

__all__ = ["ImportPathError", "check_import_path"]


class ImportPathError(StreamcoreError):
    """An import path (or a file in an import folder) is outside the allowed import roots."""


def check_import_path(path: str | Path, roots: Sequence[Path]) -> Path:
    """`path` resolved (symlinks and `..`), after checking that it and, for a folder, everything
    in it resolve under one of `roots`. Raises ImportPathError naming the path, the roots and
    how to allow it."""
    allowed = [Path(r).resolve() for r in roots]
    resolved = Path(path).resolve()
    _check_within(Path(path), resolved, allowed)
    if resolved.is_dir():
        seen: set[str] = set()
        # Spark reads what a folder's links point to, so every entry is checked, links followed.
        for folder, dirs, files in os.walk(resolved, followlinks=True):
            real = os.path.realpath(folder)
            if real in seen:  # a link loop
                dirs[:] = []
                continue
            seen.add(real)
            for name in dirs + files:
                entry = Path(folder) / name
                _check_within(entry, entry.resolve(), allowed)
    return resolved


def _check_within(given: Path, resolved: Path, roots: list[Path]) -> None:
    if any(resolved.is_relative_to(root) for root in roots):
        return
    shown = os.pathsep.join(str(r) for r in roots)
    target = f"{given} (resolved: {resolved})" if Path(given) != resolved else str(resolved)
    raise ImportPathError(
        f"{target} is outside the allowed import roots {shown}: the importer reads only files "
        "under them. Move the files under a root, or allow their folder with "
        f"STREAMCORE_IMPORT_ROOTS={shown}{os.pathsep}<folder> (or `roots` in the [import] section "
        "of include/streamcore.toml)"
    )
