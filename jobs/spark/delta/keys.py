"""Whether the keys of a batch are unique (every row has one, no two the same), so a MERGE on
that key can take the rows as they are instead of shuffling whole rows to keep one per key.

The question rides a pass over the batch that computes more (`unique_key_aggregates`, read back
with `read_unique_keys`), or takes one Spark job of its own (`keys_unique`). It compares 64-bit
hashes of the keys, which shuffle and compare in a third less time than the keys: distinct
hashes prove distinct keys, and a collision (about once in 30 million batches of 1M keys) only
costs the dedup step.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

__all__ = ["COLLECT_KEYS_UP_TO", "keys_unique", "read_unique_keys", "unique_key_aggregates"]

# A distinct count regroups every other aggregate of its pass by the counted value (in the
# importer's row-check pass, 60 sums per key hash: 1.7-2.3 s more per million rows); up to this
# many rows, collecting the hashes into one array (8 bytes each) and deduplicating it costs a
# third of that.
COLLECT_KEYS_UP_TO = 10_000_000


def unique_key_aggregates(
    key: str, keep: Column | None = None, *, rows: int | None = None
) -> list[Column]:
    """The aggregates `read_unique_keys` reads, over the rows `keep` holds for. `rows`: how many
    rows the pass reads at most, if known (up to `COLLECT_KEYS_UP_TO`, one collected array)."""

    def kept(column: Column) -> Column:
        return column if keep is None else F.when(keep, column)

    hashes = kept(F.xxhash64(key))
    if rows is not None and rows <= COLLECT_KEYS_UP_TO:
        distinct = F.size(F.array_distinct(F.collect_list(hashes)))
    else:
        distinct = F.count_distinct(hashes)
    return [
        F.count(kept(F.lit(1))).alias(f"_{key}_rows"),
        F.count(kept(F.col(key))).alias(f"_{key}_keys"),  # a null key hashes to a value
        distinct.alias(f"_{key}_hashes"),
    ]


def read_unique_keys(row: Mapping[str, Any], key: str) -> bool:
    return bool(row[f"_{key}_rows"] == row[f"_{key}_keys"] == row[f"_{key}_hashes"])


def keys_unique(df: DataFrame, key: str) -> bool:
    """Whether every row of `df` has a `key` and no two the same, in one Spark job."""
    return read_unique_keys(df.agg(*unique_key_aggregates(key)).first().asDict(), key)
