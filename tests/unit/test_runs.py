"""Run records' places (streamcore/runs.py): one file per DAG and run id."""

from __future__ import annotations

from pathlib import Path

from streamcore.runs import find_record, record_path, record_stem


def test_two_run_ids_that_differ_only_in_unsafe_characters_keep_two_files(tmp_path: Path) -> None:
    ids = ["manual__2026-11-24T03:00:00+00:00", "manual__2026-11-24T03_00_00_00_00"]
    ids.append("manual__2026-11-24T03+00+00:00:00")
    paths = {record_path("audit", "streamcore_audit", run_id, tmp_path) for run_id in ids}
    assert len(paths) == 3
    for run_id in ids:
        path = record_path("audit", "streamcore_audit", run_id, tmp_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f'{{"dag_id": "streamcore_audit", "run_id": "{run_id}"}}')
    for run_id in ids:
        found = find_record("streamcore_audit", run_id, tmp_path)
        assert found is not None and found[1]["run_id"] == run_id


def test_a_safe_id_is_its_own_stem() -> None:
    assert record_stem("streamcore_bulk_trash-old.notes") == "streamcore_bulk_trash-old.notes"
    assert record_stem("a:b").startswith("a_b-") and record_stem("a:b") != record_stem("a+b")
