"""Each job's `render(summary)`: the text its DAG's summary task logs and keeps in the run record,
from the summaries of the run's steps by step name. Rendered without Spark (the summary task
imports the job module: nothing of pyspark may load)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from jobs import audit, backfill, bulk_action, importer, retention, stream_stats

# The jobs whose DAGs `job_tasks` makes: their summary task calls `jobs.<job>.render`.
JOBS = {
    "audit": {"land": {"step": "batch", "batch": 3, "group": "audit/landing", "read": 10}},
    "backfill": {"replay": {"stream": "a/b", "target": "a/c", "records": 5, "appended": 5}},
    "bulk_action": {"run": {"command_id": "c1", "action": "trash", "state": "done"}},
    "importer": {
        "produce": {"documents": 3, "seconds": 1.0, "docs_per_s": 3.0},
        "consume": {"read": 3, "imported": 3, "seconds": 2.0, "docs_per_s": 1.5},
    },
    "retention": {
        "archive": {"streams": {}},
        "purge": {"streams": {}},
        "compact": {"streams": {}},
        "maintain": {"tables": {}},
    },
    "stream_stats": {"stats": {"stream": "a/b", "records": 1234, "per_partition": {}}},
}


@pytest.mark.parametrize("job", sorted(JOBS))
def test_every_job_renders_its_summary_without_spark(job: str) -> None:
    code = (
        f"import json, sys, jobs.{job} as job\n"
        f"text = job.render(json.loads({json.dumps(json.dumps(JOBS[job]))}))\n"
        "print(json.dumps([text, [m for m in ('pyspark', 'airflow') if m in sys.modules]]))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    text, loaded = json.loads(done.stdout)
    assert text and loaded == []


def test_audit_aligns_its_rows() -> None:
    land: dict[str, Any] = {
        "step": "batch",
        "batch": 3,
        "group": "audit/landing",
        "read": 1200,
        "landed": 1199,
        "duplicates": 1,
        "lag": 0,
        "offsets": {"0": [0, 1200]},
        "seconds": 4.25,
    }
    text = audit.render({"land": land})
    assert "mode                 batch 3 of group audit/landing" in text
    assert "entries read         1,200" in text and "duplicates           1" in text
    assert "offsets              0: 0..1200" in text and text.endswith("seconds              4.2")


def test_backfill_tells_a_dry_run_and_a_table_landing() -> None:
    dry = backfill.render({"replay": {"stream": "a/b", "target": "a/c", "dry_run": True}})
    assert "a/b -> a/c (stream)" in dry and "none (dry run; would replay 0)" in dry
    table = backfill.render(
        {"replay": {"target_kind": "table", "imported": 10, "inserted": 7, "updated": 3}}
    )
    assert "10 documents checked and merged" in table
    assert "inserted          7" in table and "updated           3 (older versions)" in table


def test_bulk_action_shows_documents_and_result() -> None:
    run = {
        "command_id": "c1",
        "action": "trash",
        "state": "done",
        "processed": 1500,
        "total": 2000,
        "query_limit_reached": True,
        "result": {"trashed": 1500},
    }
    text = bulk_action.render({"run": run})
    assert text.splitlines()[0] == "command         c1 (trash)"
    assert "documents       1,500 of 2,000" in text and "result trashed  1500" in text
    assert "query limit     reached" in text


def test_retention_tables_streams_and_tables() -> None:
    summary = {
        "archive": {"streams": {"s/1": {"archived": 10, "bytes": 2_000_000}}, "dry_run": False},
        "purge": {"streams": {"s/1": {"segments_purged": 1, "records_purged": 10}}},
        "compact": {"streams": {"s/1": {"skipped": "not a compacted log"}}},
        "maintain": {"tables": {"repository": {"skipped": "no table"}}},
    }
    text = retention.render(summary)
    assert text.startswith("stream  archived") and "10 records, 2.0 MB" in text
    assert text.endswith("repository  skipped (no table)")


def test_stream_stats_lists_each_steps_scalar_fields() -> None:
    text = stream_stats.render({"stats": {"stream": "a/b", "records": 1234, "per_partition": {}}})
    assert text == "stats\nstream   a/b\nrecords  1,234"


def test_importer_tells_inserted_and_updated_and_pairs_each_rate_with_its_phase() -> None:
    produced = {
        "documents": 20000,
        "seconds": 31.25,
        "docs_per_s": 1650.2,
        "docs_per_s_over": {"phase": "generate_encode_append", "seconds": 12.12},
    }
    consumed = {
        "read": 20010,
        "imported": 20000,
        "inserted": 19000,
        "updated": 990,
        "quarantined": 10,
        "seconds": 42.5,
        "docs_per_s": 714.6,
        "docs_per_s_over": {"phase": "offset_batch", "seconds": 28.0},
    }
    lines = importer.render({"produce": produced, "consume": consumed}).splitlines()
    assert lines[:6] == [
        "documents produced      20,000",
        "records read            20,010",
        "valid rows merged       20,000",
        "documents inserted      19,000",
        "documents updated       990",
        "quarantined             10",
    ]
    assert (
        "produce                 31.2 s the whole job; generate_encode_append 12.1 s, 1,650 docs/s"
    ) in lines
    assert "consume                 42.5 s the whole job; offset_batch 28.0 s, 715 docs/s" in lines
    assert "end to end (both jobs)  73.8 s, 271 docs/s" in lines


def test_importer_renders_a_summary_without_a_measured_phase() -> None:
    """A run that read nothing has no rate: the whole job's seconds alone."""
    text = importer.render(
        {"produce": {"documents": 0, "seconds": 3.0}, "consume": {"read": 0, "seconds": 2.0}}
    )
    assert "consume                 2.0 s the whole job\n" in text
