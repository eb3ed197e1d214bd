"""Input file formats of document imports (no pyspark import: checked before Spark starts)."""

from __future__ import annotations

from pathlib import Path

from streamcore.errors import StreamcoreError

__all__ = ["FILE_FORMATS", "DocumentInputError", "detect_format"]

FILE_FORMATS = ("jsonl", "csv", "parquet", "avro")
_EXTENSIONS = {
    ".jsonl": "jsonl",
    ".json": "jsonl",
    ".ndjson": "jsonl",
    ".csv": "csv",
    ".parquet": "parquet",
    ".avro": "avro",
}


class DocumentInputError(StreamcoreError):
    """Input files cannot become Documents (unknown format, missing or invalid columns...)."""


def detect_format(path: str | Path) -> str:
    """The file format of `path` from its extension (or that of the files in a folder)."""
    p = Path(path)
    candidates = [p] if p.is_file() else sorted(x for x in p.glob("*") if x.is_file())
    for candidate in candidates:
        fmt = _EXTENSIONS.get(candidate.suffix.lower())
        if fmt:
            return fmt
    raise DocumentInputError(
        f"cannot tell the format of {path} from its extension; pass --format "
        f"{'|'.join(FILE_FORMATS)}"
    )
