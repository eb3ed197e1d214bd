"""`SchemaStore`: every known Avro schema, by full name and by fingerprint.

An Avro single-object message only carries the 64-bit fingerprint of its writer schema; to read
it with schema evolution the reader must find that writer schema. The store is where it looks:
every `*.avsc` of `include/schemas` (or the given directories), plus whatever `add` was given.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from streamcore.codecs.fingerprint import fingerprint_bytes, format_fingerprint
from streamcore.codecs.parsed_schema import ParsedSchema, load_schema
from streamcore.errors import CodecError, SchemaNotFoundError

__all__ = ["SchemaStore"]

logger = logging.getLogger(__name__)


class SchemaStore:
    """Schemas loaded from `.avsc` directories, indexed by full name and by fingerprint.

    Name lookups return the *current* version of a name: the first one loaded (directories in
    the order given, files sorted by name within one), so keep the current schema in
    `include/schemas` and older or newer versions in later directories. Fingerprint lookups find
    every version. `add(schema)` registers one more version; `add(schema, current=True)` also
    makes it the current one for its name.
    """

    def __init__(self, dirs: str | Path | Iterable[str | Path] | None = None) -> None:
        if dirs is None:
            from streamcore.config import load_config

            dirs = [load_config().schemas_dir]
        elif isinstance(dirs, (str, Path)):
            dirs = [dirs]
        self.dirs: tuple[Path, ...] = tuple(Path(d) for d in dirs)
        self._by_fp: dict[int, ParsedSchema] = {}
        self._by_name: dict[str, ParsedSchema] = {}
        self._lock = threading.Lock()
        for directory in self.dirs:
            self._load_dir(directory)

    def _load_dir(self, directory: Path) -> None:
        if not directory.is_dir():
            logger.warning(
                "schema directory %s does not exist; no schemas loaded from it", directory
            )
            return
        count = 0
        for path in sorted(directory.glob("*.avsc")):
            schema = load_schema(path, source=str(path))
            self._index(schema, current=False)
            count += 1
        logger.debug("loaded %d schemas from %s", count, directory)

    def _index(self, schema: ParsedSchema, *, current: bool) -> None:
        with self._lock:
            known = self._by_fp.get(schema.fingerprint)
            if known is not None and known.canonical != schema.canonical:
                # Two different canonical forms with one 64-bit fingerprint: never silently mix.
                raise CodecError(
                    "avro",
                    f"fingerprint collision: {schema.source or 'a schema'} and "
                    f"{known.source or 'another schema'} share "
                    f"{format_fingerprint(schema.fingerprint)}",
                )
            if known is None:
                self._by_fp[schema.fingerprint] = schema
            else:
                schema = known  # one object per fingerprint
            if schema.fullname:
                if current or schema.fullname not in self._by_name:
                    self._by_name[schema.fullname] = schema
                elif self._by_name[schema.fullname].fingerprint != schema.fingerprint:
                    logger.debug(
                        "%s: another version of %s, reachable by fingerprint only",
                        schema.source or "schema",
                        schema.fullname,
                    )

    def add(self, schema: Any, *, current: bool = False) -> ParsedSchema:
        """Register a schema (dict, JSON text, .avsc path or `ParsedSchema`); returns it parsed.

        Adding the same schema twice is harmless. The name index keeps its current version unless
        `current=True` or the name is new.
        """
        parsed = load_schema(schema)
        self._index(parsed, current=current)
        return self._by_fp[parsed.fingerprint]

    def by_fingerprint(self, fp: int, *, codec: str = "avro") -> ParsedSchema:
        """The schema with that CRC-64-AVRO fingerprint, or `SchemaNotFoundError`."""
        schema = self._by_fp.get(fp)
        if schema is None:
            raise SchemaNotFoundError(
                codec,
                f"unknown writer schema fingerprint {format_fingerprint(fp)} "
                f"(wire bytes {fingerprint_bytes(fp).hex(' ')}); add the writer's .avsc file to "
                f"include/schemas (searched: {', '.join(str(d) for d in self.dirs) or 'nothing'})",
            )
        return schema

    def by_name(self, fullname: str, *, codec: str = "avro") -> ParsedSchema:
        """The current schema of a full name such as `org.nuxeo.lib.stream.computation.Record`."""
        schema = self._by_name.get(fullname)
        if schema is None:
            known = ", ".join(sorted(self._by_name)) or "none"
            raise SchemaNotFoundError(
                codec,
                f"no schema named {fullname!r}; add its .avsc file to include/schemas "
                f"(known names: {known})",
            )
        return schema

    def get(self, fullname: str) -> ParsedSchema | None:
        """The current schema of a name, or None."""
        return self._by_name.get(fullname)

    def names(self) -> list[str]:
        return sorted(self._by_name)

    def __contains__(self, fp: object) -> bool:
        return fp in self._by_fp

    def __iter__(self) -> Iterator[ParsedSchema]:
        return iter(list(self._by_fp.values()))

    def __len__(self) -> int:
        return len(self._by_fp)

    def __repr__(self) -> str:
        return f"SchemaStore({[str(d) for d in self.dirs]}, {len(self)} schemas)"
