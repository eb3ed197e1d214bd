"""The Spark building blocks of bulk actions (jobs/spark/bulk) on the shared local session, with
real Delta tables read back by delta-rs: the scroll and its buckets, the exactly-once MERGE of a
batch (update and delete), the CSV export, and the importer's MERGE leaving the system columns
that bulk actions set."""

from __future__ import annotations

import csv
import io
import json
import shutil
import zipfile
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from repository_support import document_id as _id
from repository_support import document_row as _row
from repository_support import write_repository
from spark_session import delta_version, read_delta

from streamcore.codecs import SchemaStore
from streamcore.config import load_config
from streamcore.errors import TableError
from streamcore.tables import DOCUMENT_SCHEMA

pytestmark = pytest.mark.spark


@pytest.fixture
def catalog(spark, clean_env: pytest.MonkeyPatch, tmp_path: Path):
    from jobs.spark.delta.catalog import Catalog

    return Catalog(spark, load_config(home=tmp_path))


@pytest.fixture
def repository(spark, catalog) -> str:
    """`repository` with 20 documents: ids 0..19 in id order, odd ones Notes."""
    return write_repository(spark, catalog, [_row(i) for i in range(20)])


def _table(path: str) -> dict[str, dict[str, Any]]:
    """The table's rows by id, read by delta-rs."""
    return {r["id"]: r for r in read_delta(path).to_pylist()}


# -- scroll ---------------------------------------------------------------------------------------
def test_scroll_numbers_the_matching_ids_into_buckets(spark, repository, tmp_path) -> None:
    from jobs.spark.bulk.scroll import Scroll, load_scroll, scroll

    out = str(tmp_path / "scroll")
    assert load_scroll(spark, out) is None
    sizes = {"bucket_size": 3, "batch_size": 2, "query_limit": 0, "out_path": out}
    found = scroll(spark, repository, "type = 'Note'", **sizes)
    assert found == Scroll(total=10, buckets=4, limit_reached=False)
    written = pq.read_table(out).sort_by("id").to_pylist()  # pyarrow skips _scroll too
    notes = [_id(i) for i in range(1, 20, 2)]
    assert written == [
        {"id": n, "bucket": k // 3, "batch": k % 3 // 2} for k, n in enumerate(notes)
    ]
    assert load_scroll(spark, out) == found
    # A rerun rewrites the same scroll; a removed facts folder makes it incomplete.
    assert scroll(spark, repository, "type = 'Note'", **sizes)
    assert pq.read_table(out).sort_by("id").to_pylist() == written
    shutil.rmtree(Path(out) / "_scroll")
    assert load_scroll(spark, out) is None


@pytest.mark.parametrize(
    ("limit", "expected"), [(4, (4, 2, True)), (10, (10, 5, False)), (50, (10, 5, False))]
)
def test_scroll_stops_at_the_query_limit(spark, repository, tmp_path, limit, expected) -> None:
    from jobs.spark.bulk.scroll import load_scroll, scroll

    out = str(tmp_path / "scroll")
    found = scroll(
        spark, repository, "type = 'Note'", bucket_size=2, query_limit=limit, out_path=out
    )
    assert (found.total, found.buckets, found.limit_reached) == expected
    ids = sorted(pq.read_table(out).column("id").to_pylist())
    assert ids == [_id(i) for i in range(1, 20, 2)][: found.total]
    assert load_scroll(spark, out) == found


def test_scroll_matching_nothing(spark, repository, tmp_path) -> None:
    from jobs.spark.bulk.scroll import Scroll, load_scroll, scroll

    out = str(tmp_path / "scroll")
    found = scroll(spark, repository, "title = 'none'", bucket_size=5, query_limit=0, out_path=out)
    assert found == Scroll(0, 0, False) == load_scroll(spark, out)


# Each prefix of Spark's variable substitution, with a name that exists, so a substitution
# would change the text: the job's environment, a JVM property, Spark and Hive confs.
VARIABLES = [
    "${env:PATH}",
    "${system:java.version}",
    "${spark:spark.app.name}",
    "${sparkconf:spark.app.name}",
    "${hiveconf:spark.app.name}",
    "${hivevar:spark.app.name}",
    "${spark.app.name}",
]


@pytest.mark.parametrize("variable", VARIABLES)
def test_sessions_do_not_substitute_variables(spark, repository, tmp_path, variable) -> None:
    """A query that got past the checker reads no secret: the jobs' sessions (this one is built
    by jobs.spark.session like theirs) keep `${...}` as the text it is."""
    from pyspark.sql import functions as F

    from jobs.spark.bulk.scroll import scroll

    literal = spark.range(1).select(F.expr(f"'{variable}'").alias("v")).first()["v"]
    assert literal == variable
    assert spark.sql(f"SELECT '{variable}' AS v").first()["v"] == variable
    # The scroll's filter, as the job runs it: a substituted variable would match no row.
    out = str(tmp_path / "scroll")
    found = scroll(
        spark, repository, f"'{variable}' LIKE '$%'", bucket_size=5, query_limit=0, out_path=out
    )
    assert found.total == 20
    assert spark.conf.get("spark.sql.variable.substitute") == "false"


def test_bucket_docs_are_the_current_rows_of_a_batch(spark, repository, tmp_path) -> None:
    from jobs.spark.bulk.scroll import IdRange, bucket_docs, id_ranges, scroll, whole_bucket

    out = str(tmp_path / "scroll")
    scroll(spark, repository, "id >= ''", bucket_size=8, batch_size=3, query_limit=0, out_path=out)
    spark.sql(f"DELETE FROM delta.`{repository}` WHERE id = '{_id(9)}'")
    spark.sql(f"UPDATE delta.`{repository}` SET title = 'changed' WHERE id = '{_id(10)}'")
    parts = id_ranges(spark, out, 1)
    assert parts == [
        IdRange(1, 0, _id(8), _id(10)),
        IdRange(1, 1, _id(11), _id(13)),
        IdRange(1, 2, _id(14), _id(15)),
    ]
    docs = {r["id"]: r for r in bucket_docs(spark, out, repository, parts[0]).collect()}
    assert sorted(docs) == [_id(8), _id(10)]
    assert docs[_id(10)]["title"] == "changed"
    bucket = whole_bucket(parts)
    assert bucket == IdRange(1, None, _id(8), _id(15))
    assert bucket_docs(spark, out, repository, bucket).count() == 7
    assert [p.batch for p in id_ranges(spark, out, 2)] == [0, 1]
    assert id_ranges(spark, out, 3) == []


def test_batches_skip_the_files_outside_their_range(spark, catalog, tmp_path) -> None:
    """On a table clustered by id (one append per five consecutive ids), a batch reads and
    MERGEs only the files of its range: with the files of ids 0-4 moved away, a batch of ids
    10-14 still lands, and only a MERGE without the range fails on them."""
    from py4j.protocol import Py4JJavaError
    from pyspark.sql import functions as F

    from jobs.spark.bulk.apply import apply_update
    from jobs.spark.bulk.scroll import bucket_docs, id_ranges, scroll

    for start in range(0, 20, 5):
        path = write_repository(spark, catalog, [_row(i) for i in range(start, start + 5)])
    out = str(tmp_path / "scroll")
    scroll(spark, path, "id >= ''", bucket_size=5, query_limit=0, out_path=out)
    first_append = Path(path) / "_delta_log" / f"{delta_version(path) - 3:020d}.json"
    files = [
        Path(path) / json.loads(line)["add"]["path"]
        for line in first_append.read_text().splitlines()
        if '"add"' in line
    ]
    for file in files:
        file.rename(tmp_path / file.name)
    part = id_ranges(spark, out, 2)[0]

    def rows() -> Any:
        docs = bucket_docs(spark, out, path, part)
        return docs.select("id", F.lit("archived").alias("lifecycleState"))

    with pytest.raises(Py4JJavaError, match="FILE_NOT_EXIST"):
        apply_update(spark, path, rows(), app_id="bulk/r", version=0)
    within = (part.first, part.last)
    assert apply_update(spark, path, rows(), app_id="bulk/r", version=1, within=within)
    for file in files:
        (tmp_path / file.name).rename(file)
    states = {i: r["lifecycleState"] for i, r in _table(path).items()}
    assert states == {_id(i): "archived" if 10 <= i < 15 else None for i in range(20)}


# -- apply ----------------------------------------------------------------------------------------
def test_apply_update_sets_columns_exactly_once(spark, repository) -> None:
    from pyspark.sql import functions as F

    from jobs.spark.bulk.apply import apply_update

    base = delta_version(repository)
    rows = spark.createDataFrame(
        [(_id(1), {"k": "v", "new": "é"}), (_id(2), {}), (_id(99), {"x": "y"})],
        "id string, properties map<string,string>",
    ).select(
        "id",
        "properties",
        F.lit(True).alias("isTrashed"),
        F.lit("deleted").alias("lifecycleState"),
    )
    version = apply_update(spark, repository, rows, app_id="bulk/c1", version=0)
    assert version == base + 1
    table = _table(repository)
    assert len(table) == 20 and _id(99) not in table  # never inserted
    assert dict(table[_id(1)]["properties"]) == {"k": "v", "new": "é"}
    assert dict(table[_id(2)]["properties"]) == {}
    assert table[_id(1)]["isTrashed"] is True and table[_id(2)]["lifecycleState"] == "deleted"
    assert table[_id(3)]["isTrashed"] is None and table[_id(3)]["title"] == "doc 3"
    assert table[_id(1)]["title"] == "doc 1"  # columns not in rows are left as they are
    # The same batch again, or an older one, is skipped; the next one lands.
    assert apply_update(spark, repository, rows, app_id="bulk/c1", version=0) is None
    untrash = spark.createDataFrame([(_id(1),)], "id string").select(
        "id", F.lit(None).alias("isTrashed"), F.lit(None).cast("string").alias("lifecycleState")
    )
    assert apply_update(spark, repository, untrash, app_id="bulk/c1", version=0) is None
    assert delta_version(repository) == base + 1
    assert apply_update(spark, repository, untrash, app_id="bulk/c1", version=1) == base + 2
    table = _table(repository)
    assert table[_id(1)]["isTrashed"] is None and table[_id(1)]["lifecycleState"] is None
    # Another command's app id has its own versions.
    assert apply_update(spark, repository, untrash, app_id="bulk/c2", version=0) == base + 3


def test_apply_update_refuses_rows_that_do_not_fit(spark, repository) -> None:
    from jobs.spark.bulk.apply import apply_update

    def frame(ddl: str) -> Any:
        return spark.createDataFrame([], ddl)

    with pytest.raises(TableError, match=r"columns the table does not have: \['nope'\]"):
        apply_update(spark, repository, frame("id string, nope string"), app_id="a", version=0)
    with pytest.raises(TableError, match="no id column"):
        apply_update(spark, repository, frame("title string"), app_id="a", version=0)
    with pytest.raises(TableError, match="set no column besides id"):
        apply_update(spark, repository, frame("id string"), app_id="a", version=0)


def test_apply_delete_exactly_once(spark, repository) -> None:
    from jobs.spark.bulk.apply import apply_delete

    base = delta_version(repository)
    ids = spark.createDataFrame([(_id(i), "x") for i in (0, 5, 77)], "id string, other string")
    assert apply_delete(spark, repository, ids, app_id="bulk/d", version=3) == base + 1
    assert sorted(_table(repository)) == [_id(i) for i in range(20) if i not in (0, 5)]
    assert apply_delete(spark, repository, ids, app_id="bulk/d", version=3) is None
    assert delta_version(repository) == base + 1
    # A batch whose documents are all gone still commits, so its version is recorded.
    gone = spark.createDataFrame([(_id(0),)], "id string")
    assert apply_delete(spark, repository, gone, app_id="bulk/d", version=4) == base + 2


# -- CSV export -----------------------------------------------------------------------------------
def test_csv_export_round_trips_through_the_csv_module(spark, repository, tmp_path) -> None:
    from jobs.spark.bulk.csv_export import finish_csv, write_csv_part
    from jobs.spark.bulk.scroll import bucket_docs, id_ranges, scroll, whole_bucket

    awkward = {
        _id(1): 'a, "quoted"\r\nline',
        _id(3): "naïve café, 東京",
        _id(5): "two\nlines",
    }
    for doc_id, title in awkward.items():
        escaped = title.replace("\\", "\\\\").replace("'", "\\'")
        spark.sql(f"UPDATE delta.`{repository}` SET title = '{escaped}' WHERE id = '{doc_id}'")
    spark.sql(
        f"UPDATE delta.`{repository}` SET properties = map('z', '1', 'a', 'é,\"') "
        f"WHERE id = '{_id(7)}'"
    )
    scrolled = str(tmp_path / "scroll")
    found = scroll(
        spark, repository, "type = 'Note'", bucket_size=3, query_limit=0, out_path=scrolled
    )
    columns = ["id", "title", "properties", "created", "isTrashed", "blobSize"]
    out = tmp_path / "export" / "cmd-9"

    def docs(bucket: int) -> Any:
        return bucket_docs(
            spark, scrolled, repository, whole_bucket(id_ranges(spark, scrolled, bucket))
        )

    for bucket in reversed(range(found.buckets)):  # any order: the merge sorts
        assert write_csv_part(docs(bucket).select(*columns), out, bucket) == min(3, 10 - 3 * bucket)
    part = (out / "parts" / "part-000000.csv").read_bytes()
    write_csv_part(docs(0).select(*columns), out, 0)
    assert (out / "parts" / "part-000000.csv").read_bytes() == part  # a rerun, the same bytes
    path = finish_csv(out, columns)
    assert path == out / "cmd-9.zip"
    with zipfile.ZipFile(path) as archive:
        text = archive.read("cmd-9.csv").decode("utf-8")
    rows = list(csv.reader(io.StringIO(text, newline="")))
    assert rows[0] == columns
    assert [r[0] for r in rows[1:]] == [_id(i) for i in range(1, 20, 2)]
    by_id = {r[0]: dict(zip(columns, r, strict=True)) for r in rows[1:]}
    for doc_id, title in awkward.items():
        assert by_id[doc_id]["title"] == title
    assert by_id[_id(7)]["properties"] == '{"a": "é,\\"", "z": "1"}'
    assert by_id[_id(9)] == {
        "id": _id(9),
        "title": "doc 9",
        "properties": '{"k": "v"}',
        "created": "2026-11-01T08:30:00Z",
        "isTrashed": "",
        "blobSize": "",
    }
    assert finish_csv(out, columns).read_bytes() == path.read_bytes()


# -- the importer's MERGE and the system columns ---------------------------------------------------
def test_importer_merge_keeps_the_system_columns(spark, catalog, repository) -> None:
    """A re-imported trashed document stays trashed (its Document fields and source columns are
    updated); a new one is inserted with null system columns. Both MERGE shapes: the upsert, and
    the backfill's newer-only one."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import IntegerType, LongType

    from jobs.spark.bulk.apply import apply_update
    from jobs.spark.documents.repository import merge_documents

    trash = spark.createDataFrame([(_id(1),), (_id(2),)], "id string").select(
        "id", F.lit(True).alias("isTrashed"), F.lit("deleted").alias("lifecycleState")
    )
    apply_update(spark, repository, trash, app_id="bulk/t", version=0)
    document = SchemaStore(catalog.config.schemas_dir).by_name(DOCUMENT_SCHEMA).raw
    fields = [f["name"] for f in document["fields"]]
    # Decoded records as the importer's landing gives them: the fields and stream columns.
    schema = spark.read.format("delta").load(repository).select(*fields).schema
    schema.add("watermark", LongType()).add("partition", IntegerType()).add("offset", LongType())

    def batch(*docs: dict[str, Any]) -> Any:
        rows = [
            {**{f: d[f] for f in fields}, "watermark": 100 + n, "partition": 0, "offset": 100 + n}
            for n, d in enumerate(docs)
        ]
        return spark.createDataFrame(rows, schema)

    good = batch(_row(1, title="again"), _row(40, title="new"))
    merge_documents(catalog, "repository", good, fields, 7).execute()
    table = _table(repository)
    assert table[_id(1)]["title"] == "again" and table[_id(1)]["import_batch"] == 7
    assert table[_id(1)]["isTrashed"] is True and table[_id(1)]["lifecycleState"] == "deleted"
    assert table[_id(40)]["title"] == "new"
    assert table[_id(40)]["isTrashed"] is None and table[_id(40)]["lifecycleState"] is None
    newer = batch(_row(2, title="replayed"))
    merge_documents(catalog, "repository", newer, fields, 8, newer_only=True).execute()
    table = _table(repository)
    assert table[_id(2)]["title"] == "replayed" and table[_id(2)]["isTrashed"] is True
