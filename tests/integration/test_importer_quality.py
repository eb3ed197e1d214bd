"""Data quality in the importer: rows that fail their expectations or do not decode go to the
quarantine table with the reasons and their source position; over the failure threshold the job
fails naming the expectations and imports nothing; file sources (JSON lines, CSV, Parquet)."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest
from spark_session import FAST, read_delta, run_importer

from streamcore.codecs import SchemaStore, get_codec
from streamcore.config import load_config
from streamcore.log import open_log_manager
from streamcore.record import Record

# Several Spark jobs and GX validations each: generous on a loaded 2-core machine.
pytestmark = [pytest.mark.spark, pytest.mark.timeout(1200)]
DOCUMENT = "org.streamcore.importer.Document"


def _home() -> Path:
    return Path(os.environ["STREAMCORE_HOME"])


def _doc(i: int, **changes) -> dict:
    doc = {
        "id": f"{i:08x}-aaaa-4000-8000-000000000000",
        "parentPath": "/ws",
        "type": "Note",
        "title": f"note {i}",
        "description": None,
        "language": "fr_FR",
        "creator": "bob",
        "created": 1_700_000_000_000,
        "modified": 1_700_000_000_000,
        "properties": {},
        "blobName": None,
        "blobSize": None,
    }
    doc.update(changes)
    return doc


def _append_bad_records() -> dict[str, str]:
    """Three bad records after the good ones; returns key → why it is bad."""
    config = load_config()
    store = SchemaStore(config.schemas_dir)
    payload = get_codec("avro", store.by_name(DOCUMENT), store=store)
    with open_log_manager(config) as manager, manager.appender("import/docs") as appender:
        records = get_codec("avro", store=store)
        late = _doc(1, modified=1_600_000_000_000)
        empty = _doc(2, title="", language="en_US")
        appender.append(late["id"], records.encode(Record.of(late["id"], payload.encode(late))))
        appender.append(empty["id"], records.encode(Record.of(empty["id"], payload.encode(empty))))
        appender.append("garbage", b"\x00not a record at all")
    return {
        late["id"]: "expect_column_pair_values_a_to_be_greater_than_b(modified, created)",
        empty["id"]: "expect_column_value_lengths_to_be_between(title)",
        "garbage": f"payload decodes as {DOCUMENT}",
    }


def test_bad_rows_go_to_quarantine_with_reasons(spark) -> None:
    code, _ = run_importer("produce", "--count", "97", "--partitions", "2", "--seed", "11")
    assert code == 0
    expected = _append_bad_records()

    # 3 bad rows in 100 is 3 %: over a 1 % threshold, the job fails and imports nothing.
    code, failed = run_importer("consume", *FAST, "--failure-threshold", "0.01")
    assert code == 1
    assert failed["status"] == "failed" and "over the --failure-threshold" in failed["error"]
    for name in expected.values():
        assert name in failed["error"]
    assert failed["validation"]["success"] is False
    assert failed["batch"] == 0 and sum(e - s for s, e in failed["offsets"].values()) == 100
    assert not (_home() / "delta" / "repository").exists()
    assert not (_home() / "delta" / "quarantine").exists()
    with open_log_manager(load_config()) as manager:
        assert manager.committed("import/docs", "import/repository") == [None, None]

    code, summary = run_importer("consume", "--failure-threshold", "0.05")
    assert code == 0, summary
    assert (summary["read"], summary["imported"], summary["quarantined"]) == (100, 97, 3)
    assert summary["validation"]["failure_ratio"] == pytest.approx(0.03)
    assert set(summary["validation"]["quarantined_by_expectation"]) == set(expected.values())
    assert Path(summary["data_docs"]).is_file()
    quarantine = read_delta(_home() / "delta" / "quarantine").to_pylist()
    assert len(quarantine) == 3
    for row in quarantine:
        assert expected[row["key"]] in row["failed_expectations"]
        assert row["stream"] == "import/docs" and row["batch"] == summary["batch"]
        assert row["offset"] >= 0 and row["partition"] in (0, 1)
    garbage = next(r for r in quarantine if r["key"] == "garbage")
    assert garbage["data"] == b"\x00not a record at all" and "Record envelope" in garbage["error"]
    repository = read_delta(_home() / "delta" / "repository")
    assert repository.num_rows == 97
    assert not set(expected) & set(repository.column("id").to_pylist())


def test_file_sources_jsonl_csv_parquet(spark, tmp_path: Path, monkeypatch) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    monkeypatch.setenv("STREAMCORE_IMPORT_ROOTS", str(tmp_path))
    docs = [_doc(i) for i in range(10, 16)]
    jsonl = tmp_path / "docs.jsonl"
    with jsonl.open("w") as f:
        for d in docs[:3]:
            row = dict(d, created="2023-11-14T22:13:20Z", modified="2023-11-14T22:13:20Z")
            if d is docs[1]:  # a JSON number is epoch milliseconds, as in Document.avsc
                row = dict(row, created=1_700_000_000_000)
            f.write(json.dumps(row) + "\n")
        # The same document again, retitled: the later version must win.
        f.write(json.dumps(dict(row, title="retitled")) + "\n")
    csv = tmp_path / "docs.csv"
    csv.write_text(
        "id,parentPath,type,title,language,creator,created,modified,properties\n"
        + "".join(
            f"{d['id']},/ws,Note,{d['title']},fr_FR,bob,2023-11-14 22:13:20,"
            f'{1_700_000_000_000 if d is docs[4] else "2023-11-14 22:13:20"},"{{""a"": ""b""}}"\n'
            for d in docs[3:5]
        )
    )
    parquet = tmp_path / "docs.parquet"
    when = datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC)
    last = {k: v for k, v in docs[5].items() if v is not None and k != "properties"}
    table = pa.Table.from_pylist([{**last, "created": when, "modified": when}])
    properties = pa.array([[("x", "y")]], pa.map_(pa.string(), pa.string()))
    pq.write_table(table.append_column("properties", properties), parquet)

    for path in (jsonl, csv, parquet):
        code, produced = run_importer("produce", "--source", "files", "--path", str(path))
        assert code == 0, produced
    code, summary = run_importer("consume", *FAST)
    assert code == 0, summary
    assert summary["read"] == 7 and summary["imported"] == 7
    table = {r["id"]: r for r in read_delta(_home() / "delta" / "repository").to_pylist()}
    assert set(table) == {d["id"] for d in docs}
    assert table[docs[2]["id"]]["title"] == "retitled"
    assert dict(table[docs[3]["id"]]["properties"]) == {"a": "b"}
    assert dict(table[docs[5]["id"]]["properties"]) == {"x": "y"}
    # ISO text, epoch-millisecond numbers (JSON) and digits (CSV) name the same instant
    assert {(r["created"], r["modified"]) for r in table.values()} == {(when, when)}


def test_invalid_file_rows_are_refused_before_anything_is_appended(spark) -> None:
    bad = _home() / "bad.jsonl"  # under the default import root
    bad.write_text(json.dumps({**_doc(1), "created": None, "type": "Zip"}) + "\n")
    code, summary = run_importer("produce", "--source", "files", "--path", str(bad))
    assert code == 1
    assert "type not in ['Folder', 'File', 'Note']: 1 row(s)" in summary["error"]
    assert "created is null: 1 row(s)" in summary["error"]
    with open_log_manager(load_config()) as manager:
        assert sum(manager.end_offsets("import/docs")) == 0
