"""The Spark helpers of jobs/spark one by one, on the shared local session: the local-log Data
Source, Record envelopes, Avro payload decoding with schema evolution, the log writer layouts,
expectation predicates against Great Expectations' own verdicts, batch planning and recovery of
the exactly-once Delta sink."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from spark_session import ROOT, read_delta

from streamcore.codecs import SchemaStore, get_codec
from streamcore.config import load_config
from streamcore.errors import LogError, StreamcoreError
from streamcore.log import LocalLogManager, LogPartition
from streamcore.log.partitioner import partition_for_key
from streamcore.record import Record

pytestmark = pytest.mark.spark

DOCUMENT = "org.streamcore.importer.Document"


def _doc(i: int, **changes) -> dict:
    doc = {
        "id": f"{i:08x}-0000-4000-8000-000000000000",
        "parentPath": "/ws",
        "type": "File",
        "title": f"doc {i}",
        "description": None,
        "language": "en_US",
        "creator": "alice",
        "created": 1_700_000_000_000,
        "modified": 1_700_000_100_000,
        "properties": {"k": "v"},
        "blobName": "a.pdf",
        "blobSize": 10,
    }
    doc.update(changes)
    return doc


@pytest.fixture
def store() -> SchemaStore:
    return SchemaStore(load_config().schemas_dir)


@pytest.fixture
def local(tmp_path: Path):
    manager = LocalLogManager(tmp_path / "log")
    yield manager
    manager.close()


def _append_docs(manager, name: str, docs: list[dict], store: SchemaStore, partition=None) -> None:
    payload = get_codec("avro", store.by_name(DOCUMENT), store=store)
    records = get_codec("avro", store=store)
    with manager.appender(name, records) as appender:
        for doc in docs:
            record = Record.of(doc["id"], payload.encode(doc))
            if partition is None:
                appender.append(doc["id"], record)
            else:
                appender.append_to(partition, doc["id"], record)


def test_submit_config_imports_no_pyspark() -> None:
    code = (
        "import sys, json; from jobs.spark.submit import submit_config; c = submit_config(); "
        "print(json.dumps([('pyspark' in sys.modules), c['jars'], c['env_vars'], c['conf']]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    imported, jars, env, conf = json.loads(out.stdout)
    assert imported is False
    names = [Path(j).name for j in jars.split(",")]
    assert any(n.startswith("delta-spark_") for n in names)
    assert any(n.startswith("spark-avro_") for n in names)
    assert any(n.startswith("spark-sql-kafka-") for n in names)
    assert env["PYSPARK_PYTHON"].endswith("python")
    assert conf["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"


def test_local_source_reads_exact_ranges_one_spark_partition_per_log_partition(
    spark, local, store
) -> None:
    from jobs.spark.logs.streams import read_raw, read_stream

    local.create("test/docs", 3)
    for p in range(3):
        _append_docs(local, "test/docs", [_doc(p * 100 + i) for i in range(10)], store, p)
    ranges = {0: (2, 7), 2: (0, 10), 1: (4, 4)}
    raw = read_raw(spark, local, "test/docs", ranges)
    assert raw.rdd.getNumPartitions() == 3
    rows = read_stream(spark, local, "test/docs", ranges).collect()
    got = sorted((r.partition, r.offset) for r in rows)
    assert got == [(0, o) for o in range(2, 7)] + [(2, o) for o in range(10)]
    first = next(r for r in rows if (r.partition, r.offset) == (0, 2))
    assert first.stream == "test/docs" and first.key == _doc(2)["id"]
    assert first.record_error is None and first.watermark > 0 and first.flags == 1
    # A long range is read by several tasks: 2 + 1 (empty) + 4 Spark partitions of <= 3 records.
    split = read_stream(spark, local, "test/docs", ranges, split_records=3)
    assert split.rdd.getNumPartitions() == 7
    assert sorted((r.partition, r.offset, r.data) for r in split.collect()) == sorted(
        (r.partition, r.offset, r.data) for r in rows
    )
    assert get_codec("avro", store.by_name(DOCUMENT), store=store).decode(first.data) == {
        **_doc(2),
        "created": first_ts(1_700_000_000_000),
        "modified": first_ts(1_700_000_100_000),
    }


def first_ts(ms: int):
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ms / 1000, UTC)


def test_local_source_refuses_a_range_past_the_end(spark, local, store) -> None:
    from jobs.spark.logs.streams import read_raw

    local.create("test/short", 1)
    _append_docs(local, "test/short", [_doc(i) for i in range(3)], store)
    with pytest.raises(Exception, match="ends at offset 3, before the requested end 9"):
        read_raw(spark, local, "test/short", {0: (0, 9)}).collect()


def test_read_range_reports_records_purged_by_retention(local, store) -> None:
    from jobs.spark.logs.local_source import LogRange, read_range

    local.create("test/purged", 1)
    _append_docs(local, "test/purged", [_doc(i) for i in range(3)], store)
    folder = local.folder("test/purged")
    (folder / "P-00" / f"{0:020d}.log").rename(folder / "P-00" / f"{2:020d}.log")
    with pytest.raises(LogError, match="purged by retention"):
        list(read_range(LogRange(local.describe("test/purged"), 0, 0, 3)))


def test_values_that_are_not_records_are_kept_with_an_error(spark, local) -> None:
    from jobs.spark.logs.streams import read_stream

    local.create("test/raw", 1)
    with local.appender("test/raw") as appender:
        appender.append("k1", b"not a record")
        appender.append("k2", get_codec("avro").encode(Record.of("k2", b"x")))
        appender.append("k3", b"\xc3\x01garbage-after-the-magic")
    rows = {r.key: r for r in read_stream(spark, local, "test/raw", {0: (0, 3)}).collect()}
    assert "not a Record envelope" in rows["k1"].record_error
    assert rows["k1"].data == b"not a record"
    assert rows["k2"].record_error is None and rows["k2"].data == b"x"
    assert rows["k3"].record_error is not None


def test_decode_payload_resolves_older_writer_schemas_and_flags_unknown_ones(
    spark, local, tmp_path: Path
) -> None:
    from jobs.spark.logs.avro import decode_payload
    from jobs.spark.logs.streams import read_stream

    current = json.loads((ROOT / "include" / "schemas" / "Document.avsc").read_text())
    older = dict(current, fields=[f for f in current["fields"] if f["name"] != "description"])
    older_dir = tmp_path / "older"
    older_dir.mkdir()
    (older_dir / "Document-v0.avsc").write_text(json.dumps(older))
    store = SchemaStore([ROOT / "include" / "schemas", older_dir])
    stranger = dict(older, fields=older["fields"][:3])  # in no store
    local.create("test/evolve", 1)
    old_doc = {k: v for k, v in _doc(1).items() if k != "description"}
    with local.appender("test/evolve", get_codec("avro", store=store)) as appender:
        appender.append("a", Record.of("a", get_codec("avro", older, store=store).encode(old_doc)))
        partial = {k: _doc(2)[k] for k in ("id", "parentPath", "type")}
        appender.append("b", Record.of("b", get_codec("avro", stranger).encode(partial)))
        appender.append("c", Record.of("c", b"plain bytes"))
        payload = get_codec("avro", store.by_name(DOCUMENT), store=store)
        appender.append("d", Record.of("d", payload.encode(_doc(4, description="new"))))
    records = read_stream(spark, local, "test/evolve", {0: (0, 4)})
    rows = {r.key: r for r in decode_payload(records, store.by_name(DOCUMENT), store).collect()}
    assert rows["a"].payload_error is None
    assert rows["a"].id == _doc(1)["id"] and rows["a"].description is None
    assert rows["a"].blobSize == 10 and rows["a"].properties == {"k": "v"}
    assert "unknown writer schema" in rows["b"].payload_error and rows["b"].id is None
    assert "not Avro single-object" in rows["c"].payload_error
    assert rows["d"].payload_error is None and rows["d"].description == "new"


def test_log_writer_by_key_follows_the_partitioner(spark, local) -> None:
    from pyspark.sql import functions as F

    from jobs.spark.logs.log_writer import append_dataframe

    local.create("test/keyed", 3)
    keys = [f"key-{i}" for i in range(60)]
    df = spark.createDataFrame([(k,) for k in keys], "key string").select(
        "key", F.encode("key", "utf-8").alias("value")
    )
    counts = append_dataframe(df.repartition(4), local, "test/keyed", layout="by_key")
    assert sum(counts.values()) == 60
    for p in range(3):
        with local.tailer(f"check_{p}", LogPartition.of("test/keyed", p)) as tailer:
            for record in tailer:
                assert partition_for_key(record.key, 3) == p
                assert record.message == record.key.encode()


def test_log_writer_by_task_writes_one_partition_per_task(spark, local) -> None:
    from pyspark.sql import functions as F

    from jobs.spark.logs.log_writer import append_dataframe

    local.create("test/tasks", 2)
    df = spark.range(0, 100, 1, 2).select(
        F.col("id").cast("string").alias("key"), F.lit(b"v").alias("value")
    )
    counts = append_dataframe(df, local, "test/tasks", layout="by_task")
    assert counts == {0: 50, 1: 50}
    assert local.end_offsets("test/tasks") == [50, 50]


def test_row_predicates_agree_with_great_expectations(spark, store, tmp_path: Path) -> None:
    from jobs.spark.logs.avro import spark_schema
    from jobs.spark.quality.expectations import failure_counts, load_suite
    from jobs.spark.quality.validation import validate

    schema = store.by_name(DOCUMENT)
    suite = load_suite(schema)
    names = {e.name for e in suite.expectations}
    assert "expect_column_values_to_not_be_null(id)" in names
    assert "expect_column_values_to_be_in_set(type)" in names
    assert "expect_column_values_to_be_between(blobSize)" in names
    assert "expect_column_values_to_match_regex(id)" in names
    assert "expect_column_values_to_be_of_type(created)" in names
    assert any(e.origin == "hand-written" for e in suite.expectations)
    docs = [
        _doc(1),
        _doc(2, type="Zip"),  # not an enum symbol
        _doc(3, modified=1_600_000_000_000),  # modified before created
        _doc(4, blobSize=-5, title=""),  # two failures
        _doc(5, blobName=None),  # a File without blob
        _doc(6, type="Note", blobName=None, blobSize=None),  # fine for a Note
        _doc(7, id="not-a-uuid"),
    ]
    for d in docs:
        d["created"], d["modified"] = first_ts(d["created"]), first_ts(d["modified"])
    df = spark.createDataFrame(docs, spark_schema(spark, schema))
    counts = failure_counts(df, suite)
    assert counts["rows"] == 7 and counts["failing"] == 5
    report = validate(df, suite, tmp_path / "gx", run_name="agree")
    assert report.success is False
    assert Path(report.data_docs).is_file()
    ours = {k: v for k, v in counts.items() if k not in ("rows", "failing") and v}
    assert ours == {k: v for k, v in report.failed.items()}
    assert ours["expect_column_values_to_be_in_set(type)"] == 1
    assert ours["expect_column_values_to_not_be_null(blobName) where type = 'File'"] == 1


def test_cap_shares_the_batch_size_across_partitions() -> None:
    from jobs.spark.batch_positions import _cap

    ranges = {0: (0, 100), 1: (10, 12), 2: (5, 5), 3: (0, 50)}
    assert _cap(ranges, 0) == ranges
    capped = _cap(ranges, 30)
    assert sum(e - s for s, e in capped.values()) == 30
    assert capped[1] == (10, 12) and capped[2] == (5, 5)
    assert all(capped[p][0] == ranges[p][0] for p in ranges)
    assert _cap(ranges, 1000) == ranges


def test_sink_records_batches_and_recover_commits_landed_positions(spark, local, tmp_path) -> None:
    from jobs.spark.batch_positions import commit_positions, plan_batch
    from jobs.spark.delta.sink import DeltaBatchSink

    local.create("test/exact", 2)
    with local.appender("test/exact") as appender:
        for i in range(10):
            appender.append_to(i % 2, str(i), b"x")
    path = str(tmp_path / "delta" / "t")
    sink = DeltaBatchSink(spark, path, "test/app")
    plan = plan_batch(sink, local, "test/exact", "g")
    assert (plan.batch, plan.ranges, plan.recovered) == (0, {0: (0, 5), 1: (0, 5)}, {})
    rows = spark.range(3)
    version = sink.write(plan, lambda: rows.write.format("delta").mode("append").save(path))
    assert version == 0
    # The same batch again: Delta's txn id makes it a no-op.
    assert sink.write(plan, lambda: rows.write.format("delta").mode("append").save(path)) is None
    assert read_delta(path).num_rows == 3
    landed = sink.last_batch()
    assert (landed.batch, landed.ends, landed.version) == (0, {0: 5, 1: 5}, 0)
    # The positions were never committed (a crash): planning commits them first.
    again = plan_batch(sink, local, "test/exact", "g")
    assert again.recovered == {0: 5, 1: 5}
    assert again.batch == 1 and again.records == 0
    assert local.committed("test/exact", "g") == [5, 5]
    commit_positions(local, again)
    assert local.committed("test/exact", "g") == [5, 5]
    # A write Delta skipped is only accepted if the landed batch covered the same range.
    from jobs.spark.batches import _check_same_batch

    _check_same_batch(sink, plan)
    overlapping = dataclasses.replace(plan, ranges={0: (0, 6), 1: (0, 5)})
    with pytest.raises(StreamcoreError, match="two runs of one group overlapped"):
        _check_same_batch(sink, overlapping)


def test_upsert_inserts_only_while_the_table_has_none_of_the_ids(
    spark, local, store, tmp_path
) -> None:
    """Batches of new ids land with an insert-only MERGE, a batch meeting an existing id with the
    full upsert; the table ends as the upsert alone leaves it (the newest version of each id)."""
    from delta.tables import DeltaTable

    from jobs.spark.batch_positions import BatchPlan
    from jobs.spark.delta.catalog import Catalog
    from jobs.spark.delta.sink import DeltaBatchSink
    from jobs.spark.documents.repository import latest_per_id, merge_documents
    from jobs.spark.logs.avro import decode_payload
    from jobs.spark.logs.streams import read_stream

    schema = store.by_name(DOCUMENT)
    fields = [f["name"] for f in schema.raw["fields"]]
    catalog = Catalog(spark, load_config(home=tmp_path))
    local.create("test/upsert", 1)
    batches = [
        [_doc(i) for i in range(5)],  # a new table
        [_doc(i) for i in range(5, 8)],  # ids the table does not have
        # ids 3 and 6 again, and id 8 twice in the batch: the later version must win
        [_doc(3, title="v2"), _doc(8), _doc(6, title="v2"), _doc(8, title="v2")],
    ]
    merges = []
    start = 0
    for batch, docs in enumerate(batches):
        _append_docs(local, "test/upsert", docs, store)
        ranges = {0: (start, start + len(docs))}
        start += len(docs)
        good = decode_payload(read_stream(spark, local, "test/upsert", ranges), schema, store)
        plan = BatchPlan("test/app", "test/upsert", "g", batch, ranges)
        sink = DeltaBatchSink(spark, catalog.path("repo"), plan.app_id)
        merge = merge_documents(catalog, "repo", good, fields, plan.batch)
        assert sink.write(plan, merge.execute) is not None
        operation = DeltaTable.forPath(spark, sink.path).history(1).first()
        merges.append(json.loads(operation["operationParameters"]["matchedPredicates"]))
        # The reference: every batch upserted (the MERGE before the insert-only path), setting
        # the columns the batch has (not `*`: the table's system columns are not in it).
        catalog.ensure("reference")
        latest = latest_per_id(good, fields, batch)
        columns = {c: f"s.{c}" for c in latest.columns}
        (
            DeltaTable.forPath(spark, catalog.path("reference"))
            .alias("t")
            .merge(latest.alias("s"), "t.id = s.id")
            .whenMatchedUpdate(set=columns)
            .whenNotMatchedInsert(values=columns)
            .execute()
        )
    assert merges == [[], [], [{"actionType": "update"}]]

    def rows(table: str) -> list[dict]:
        found = read_delta(catalog.path(table)).drop(["imported_at"]).to_pylist()
        return sorted(found, key=lambda r: r["id"])

    assert rows("repo") == rows("reference")
    titles = {r["id"]: r["title"] for r in rows("repo")}
    assert len(titles) == 9
    assert [titles[_doc(i)["id"]] for i in (3, 6, 8)] == ["v2", "v2", "v2"]
    assert titles[_doc(4)["id"]] == "doc 4"


@pytest.mark.parametrize("rows", [None, 4], ids=["distinct-count", "collected-hashes"])
def test_unique_key_aggregates_see_repeated_and_missing_keys(spark, rows) -> None:
    """Both ways of counting distinct id hashes (a distinct count; one deduplicated array when
    the pass reads few enough rows) give the same answers, over the kept rows only."""
    from pyspark.sql import functions as F

    from jobs.spark.delta.keys import keys_unique, read_unique_keys, unique_key_aggregates

    frame = spark.createDataFrame(
        [("a", True, True), ("b", True, True), ("a", False, True), (None, False, False)],
        "id string, unique_kept boolean, no_null_kept boolean",
    )

    def unique(keep: Any) -> bool:
        row = frame.agg(*unique_key_aggregates("id", keep, rows=rows)).first().asDict()
        return read_unique_keys(row, "id")

    assert unique(F.col("unique_kept")) is True
    assert unique(F.col("no_null_kept")) is False  # "a" twice
    assert unique(None) is False  # and a null id
    assert unique(F.col("id") == "b") is True
    assert keys_unique(frame, "id") is False
    assert keys_unique(frame.where(F.col("unique_kept")), "id") is True


def test_a_spread_merge_writes_a_one_day_batch_from_every_task(spark, tmp_path: Path) -> None:
    """Delta gathers a partitioned table's new rows by partition before writing: a batch of one
    day is written by one task (one file). `spread=True` writes it from the four tasks that hold
    it, and leaves the session's setting as it was."""
    from jobs.spark.delta import sql as delta_sql

    path = str(tmp_path / "days")
    spark.sql(f"CREATE TABLE delta.`{path}` (id long, day date) USING delta PARTITIONED BY (day)")
    setting = "spark.databricks.delta.merge.repartitionBeforeWrite.enabled"
    before = spark.conf.get(setting, None)

    def merge(first: int, **options: bool) -> list[dict]:
        rows = spark.range(first, first + 400, numPartitions=4).selectExpr(
            "id", "DATE'2026-11-24' AS day"
        )
        delta_sql.merge_into(
            spark, path, rows, "t.id = s.id", "WHEN NOT MATCHED THEN INSERT *", **options
        )
        commit = Path(path) / "_delta_log" / f"{delta_sql.latest_version(spark, path):020d}.json"
        return [a["add"] for a in map(json.loads, commit.read_text().splitlines()) if "add" in a]

    assert len(merge(0)) == 1
    assert len(merge(400, spread=True)) == 4
    assert spark.conf.get(setting, None) == before
    assert sorted(read_delta(path).column("id").to_pylist()) == list(range(800))
