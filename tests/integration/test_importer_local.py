"""The importer end to end on the local log: produce → consume → Delta, checked with delta-rs;
exactly once across reruns and across a crash between the Delta commit and the position commit;
quarantine and the failure threshold; file sources; argument checks before Spark starts."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
from spark_session import FAST, delta_version, read_delta, run_importer, run_importer_process

from streamcore.config import load_config
from streamcore.log import open_log_manager

# Several Spark jobs and GX validations each: generous on a loaded 2-core machine.
pytestmark = [pytest.mark.spark, pytest.mark.timeout(1200)]


def _home() -> Path:
    return Path(os.environ["STREAMCORE_HOME"])


def _committed(stream: str = "import/docs", group: str = "import/repository") -> list:
    with open_log_manager(load_config()) as manager:
        return manager.committed(stream, group)


def _ends(stream: str = "import/docs") -> list[int]:
    with open_log_manager(load_config()) as manager:
        return manager.end_offsets(stream)


def _ids(table: Path) -> list[str]:
    return read_delta(table).column("id").to_pylist()


def test_produce_then_consume_lands_every_document_once(spark) -> None:
    code, produced = run_importer("produce", "--count", "400", "--partitions", "3", "--seed", "7")
    assert code == 0, produced
    assert produced["documents"] == 400
    assert produced["partitions"] == 3
    assert sum(_ends()) == 400

    code, summary = run_importer("consume", *FAST)
    assert code == 0, summary
    assert (summary["read"], summary["imported"], summary["quarantined"]) == (400, 400, 0)
    assert (summary["inserted"], summary["updated"]) == (400, 0)  # Delta's MERGE metrics
    assert summary["docs_per_s_over"]["phase"] == "offset_batch"
    assert summary["docs_per_s_over"]["seconds"] < summary["seconds"]  # not the whole job
    assert produced["docs_per_s_over"]["phase"] == "generate_encode_append"
    assert summary["batch"] == 0
    assert summary["validation"]["success"] is True
    assert Path(summary["data_docs"]).is_file()
    table = _home() / "delta" / "repository"
    ids = _ids(table)
    assert len(ids) == 400 and len(set(ids)) == 400
    assert summary["delta_version"] == delta_version(table)
    assert _committed() == _ends()
    assert {k: v[1] for k, v in summary["offsets"].items()} == {
        str(p): e for p, e in enumerate(_ends())
    }

    # Nothing new: a rerun reads nothing and writes nothing.
    code, again = run_importer("consume", *FAST)
    assert code == 0 and again["read"] == 0
    assert (again["imported"], again["inserted"], again["updated"]) == (0, 0, 0)
    assert delta_version(table) == summary["delta_version"]

    # More documents (the same seed: the same 400 ids again, plus 100 new): upserted by id.
    code, _ = run_importer("produce", "--count", "500", "--seed", "7")
    assert code == 0
    code, third = run_importer("consume", *FAST, "--batch-size", "300")
    assert code == 0 and third["batch"] == 1 and third["read"] == 300
    code, fourth = run_importer("consume", *FAST)
    assert code == 0 and fourth["batch"] == 2 and fourth["read"] == 200
    # The 400 ids the table had are updated, the 100 new ones inserted, whichever batch read them.
    assert third["inserted"] + fourth["inserted"] == 100
    assert third["updated"] + fourth["updated"] == 400
    assert third["inserted"] + third["updated"] == third["imported"] == 300
    ids = _ids(table)
    assert len(ids) == 500 and len(set(ids)) == 500
    assert _committed() == _ends()


def test_a_batch_with_two_versions_of_an_id_keeps_the_newest(spark) -> None:
    """The same 60 documents produced twice before one consume: the batch holds each id twice,
    and the table gets one row per id, from the later append (the higher offset)."""
    for _ in range(2):
        code, _ = run_importer("produce", "--count", "60", "--partitions", "1", "--seed", "11")
        assert code == 0
    code, summary = run_importer("consume", *FAST)
    assert code == 0, summary
    assert summary["read"] == 120
    # 120 valid rows merged, as 60 new documents: each id's newest version once.
    assert (summary["imported"], summary["inserted"], summary["updated"]) == (120, 60, 0)
    table = read_delta(_home() / "delta" / "repository")
    assert table.num_rows == 60 and len(set(table.column("id").to_pylist())) == 60
    assert min(table.column("source_offset").to_pylist()) == 60


def test_crash_between_delta_commit_and_position_commit(spark) -> None:
    """SIGKILL the consume job right after its Delta commit: the rerun commits the recorded
    positions first, imports nothing twice and loses nothing."""
    code, _ = run_importer("produce", "--count", "300", "--partitions", "2", "--seed", "3")
    assert code == 0
    crashed = run_importer_process(
        "consume",
        *FAST,
        "--master",
        "local[1]",
        env={"STREAMCORE_FAULT": "importer.after_delta_commit"},
    )
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    table = _home() / "delta" / "repository"
    assert len(_ids(table)) == 300  # the batch reached Delta ...
    assert _committed() == [None, None]  # ... but not the log

    code, summary = run_importer("consume", *FAST)
    assert code == 0, summary
    assert summary["recovered_positions"] == {str(p): e for p, e in enumerate(_ends())}
    assert summary["read"] == 0
    assert _committed() == _ends()
    ids = _ids(table)
    assert len(ids) == 300 and len(set(ids)) == 300

    # The next batch after the recovery is numbered after the crashed one and lands normally.
    code, _ = run_importer("produce", "--count", "350", "--seed", "3")
    code, after = run_importer("consume", *FAST)
    assert code == 0 and after["batch"] == 1 and after["read"] == 350
    ids = _ids(table)
    assert len(ids) == 350 and len(set(ids)) == 350


def test_crash_before_the_delta_commit_rereads_the_batch(spark) -> None:
    """A consume that dies before its Delta commit leaves no trace: the rerun imports it all."""
    code, _ = run_importer("produce", "--count", "120", "--partitions", "2", "--seed", "5")
    assert code == 0
    env = {"STREAMCORE_FAULT": "importer.before_delta_commit"}
    crashed = run_importer_process("consume", *FAST, "--master", "local[1]", env=env)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    assert not (_home() / "delta" / "repository").exists()
    assert _committed() == [None, None]
    code, summary = run_importer("consume", *FAST)
    assert code == 0 and summary["batch"] == 0 and summary["read"] == 120
    assert len(set(_ids(_home() / "delta" / "repository"))) == 120


def test_bad_arguments_exit_2_before_spark_starts(tmp_path: Path) -> None:
    cases = [
        (["produce", "--count", "0"], "--count must be at least 1"),
        (["produce", "--partitions", "0"], "--partitions must be 1..1000"),
        (["produce", "--source", "files"], "--source files needs --path"),
        (["produce", "--source", "files", "--path", str(tmp_path / "nope")], "does not exist"),
        (["consume", "--failure-threshold", "1.5"], "--failure-threshold must be within 0..1"),
        (["consume", "--batch-size", "-1"], "--batch-size must be >= 0"),
        (["consume", "--group", "Bad Group"], "--stream/--group"),
        (["consume", "--table", "x;drop"], "--table"),
    ]
    for args, message in cases:
        started = time.monotonic()
        result = run_importer_process(*args, timeout=60)
        assert result.returncode == 2, (args, result.stderr)
        assert message in result.stderr, (args, result.stderr)
        assert "SparkSession" not in result.stderr and "Spark " not in result.stderr
        assert time.monotonic() - started < 20, "arguments must be checked before Spark starts"


def test_summary_is_the_last_stdout_line_of_a_process_run(spark) -> None:
    result = run_importer_process("consume", "--master", "local[1]", "--stream", "import/none")
    assert result.returncode == 1
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["status"] == "failed" and "import/none does not exist" in summary["error"]
