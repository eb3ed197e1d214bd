"""Faults of the exactly-once Delta sink and of the importer's inputs: a rewound consumer group,
a log deleted and recreated under a table that remembers it, a group position beyond the log's
end, Delta's log cleanup dropping the importer's commits from history, and import paths outside
the allowed roots (a plain path, `..`, a symlink, a folder holding a symlink)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from spark_session import FAST, ROOT, read_delta, run_importer, run_importer_process

from streamcore.errors import StreamcoreError
from streamcore.log import LocalLogManager, LogPartition
from streamcore.log.memory import MemoryLogManager

STREAM = "test/sink"
GROUP = "test/group"
spark_test = pytest.mark.spark


# -- the Delta sink --------------------------------------------------------------------------------
def _append(manager: Any, per_partition: int, partitions: int = 2) -> None:
    with manager.appender(STREAM) as appender:
        for i in range(per_partition * partitions):
            appender.append_to(i % partitions, str(i), b"x")


def _land(spark: Any, sink: Any, manager: Any, group: str = GROUP) -> Any:
    """One batch of the sink, landed and committed as the importer does (rows = the offsets)."""
    from jobs.spark.batch_positions import commit_positions, plan_batch

    plan = plan_batch(sink, manager, STREAM, group)
    rows = spark.createDataFrame(
        [(p, o) for p, (s, e) in plan.ranges.items() for o in range(s, e)],
        "partition int, offset long",
    )
    version = sink.write(plan, lambda: rows.write.format("delta").mode("append").save(sink.path))
    assert version is not None, f"Delta skipped batch {plan.batch}"
    commit_positions(manager, plan)
    return plan


def _offsets(path: str) -> list[tuple[int, int]]:
    return sorted((r["partition"], r["offset"]) for r in read_delta(path).to_pylist())


@pytest.mark.parametrize(
    "rewind",
    [{0: 0, 1: 0}, {0: 3, 1: 12}, {0: 10, 1: 10}, {0: 10, 1: 15}],
    ids=["to_start", "into_the_batch", "to_the_last_batch_start", "one_partition_to_its_start"],
)
@spark_test
def test_a_rewound_group_rereads_instead_of_recovering(spark, tmp_path: Path, rewind) -> None:
    """`streamcore position --to-start` (or --to-offset) after two batches: the operator asked for
    a re-read. Planning must not commit the landed ends back (that skipped every record below
    them); the next batch reads from the rewound positions. A rewind to exactly the last batch's
    starts puts the positions where a crash between the Delta commit and the positions leaves
    them: the sink's record of its own commit of the positions tells them apart."""
    from jobs.spark.batch_positions import plan_batch
    from jobs.spark.delta.sink import DeltaBatchSink

    with LocalLogManager(tmp_path / "log") as manager:
        manager.create(STREAM, 2)
        sink = DeltaBatchSink(spark, str(tmp_path / "delta" / "t"), "test/app")
        _append(manager, 10)
        _land(spark, sink, manager)
        _append(manager, 5)
        assert _land(spark, sink, manager).ranges == {0: (10, 15), 1: (10, 15)}
        for partition, offset in rewind.items():
            manager.commit_position(LogPartition.of(STREAM, partition), GROUP, offset)

        plan = plan_batch(sink, manager, STREAM, GROUP)
        assert plan.recovered == {}, "a rewind was taken for a crash and undone"
        assert plan.batch == 2
        assert plan.ranges == {p: (rewind[p], 15) for p in (0, 1)}
        assert manager.committed(STREAM, GROUP) == [rewind[0], rewind[1]]
        landed = _land(spark, sink, manager)
        assert landed.ranges == plan.ranges
        assert manager.committed(STREAM, GROUP) == [15, 15]
        reread = [(p, o) for p in (0, 1) for o in range(rewind[p], 15)]
        everything = [(p, o) for p in (0, 1) for o in range(15)]
        assert _offsets(sink.path) == sorted(everything + reread)


@spark_test
def test_a_crash_between_the_two_commits_is_still_recovered(spark, tmp_path: Path) -> None:
    """The recovery case itself: positions at the landed batch's start (partition 1) or already
    at its end (partition 0, the commit stopped half way) get the landed ends, and only those."""
    from jobs.spark.batch_positions import plan_batch
    from jobs.spark.delta.sink import DeltaBatchSink

    with LocalLogManager(tmp_path / "log") as manager:
        manager.create(STREAM, 2)
        sink = DeltaBatchSink(spark, str(tmp_path / "delta" / "t"), "test/app")
        _append(manager, 4)
        _land(spark, sink, manager)
        _append(manager, 3)
        plan = plan_batch(sink, manager, STREAM, GROUP)
        rows = spark.createDataFrame([(0, 1)], "partition int, offset long")
        sink.write(plan, lambda: rows.write.format("delta").mode("append").save(sink.path))
        # the job died after the Delta commit, having moved partition 0 only
        manager.commit_position(LogPartition.of(STREAM, 0), GROUP, 7)

        again = plan_batch(sink, manager, STREAM, GROUP)
        assert again.recovered == {1: 7}
        assert manager.committed(STREAM, GROUP) == [7, 7]
        assert (again.batch, again.records) == (2, 0)


@spark_test
def test_a_crash_after_a_rewind_is_still_recovered(spark, tmp_path: Path) -> None:
    """A rewind to the last batch's starts, a run that plans and fails before landing (the rewind
    must still read as one), then a batch over the rewound records whose job dies between its
    Delta commit and its positions: those positions are a crash's, and are recovered."""
    from jobs.spark.batch_positions import plan_batch
    from jobs.spark.delta.sink import DeltaBatchSink

    with LocalLogManager(tmp_path / "log") as manager:
        manager.create(STREAM, 2)
        sink = DeltaBatchSink(spark, str(tmp_path / "delta" / "t"), "test/app")
        _append(manager, 5)
        _land(spark, sink, manager)
        _append(manager, 5)
        assert _land(spark, sink, manager).ranges == {0: (5, 10), 1: (5, 10)}
        for partition in (0, 1):
            manager.commit_position(LogPartition.of(STREAM, partition), GROUP, 5)
        assert plan_batch(sink, manager, STREAM, GROUP).recovered == {}  # a run that failed
        _append(manager, 2)
        plan = plan_batch(sink, manager, STREAM, GROUP)
        assert (plan.recovered, plan.ranges) == ({}, {0: (5, 12), 1: (5, 12)})
        rows = spark.createDataFrame([(0, 5)], "partition int, offset long")
        sink.write(plan, lambda: rows.write.format("delta").mode("append").save(sink.path))
        # the job died here, after the Delta commit and before the positions

        again = plan_batch(sink, manager, STREAM, GROUP)
        assert again.recovered == {0: 12, 1: 12}
        assert manager.committed(STREAM, GROUP) == [12, 12]
        assert (again.batch, again.records) == (3, 0)


@spark_test
def test_the_importer_rereads_after_a_reset_to_the_start_of_its_only_batch(spark) -> None:
    """`streamcore recovery reset --to-start` on the importer's group, whose one batch began at
    offset 0: the positions are then that batch's starts, as after a crash between its Delta
    commit and its positions. The next run must read every record again (the rewind was
    undone: it committed the batch's ends back and read nothing)."""
    from streamcore.cli.main import main

    code, _ = run_importer("produce", "--count", "30", "--partitions", "2", "--seed", "31")
    assert code == 0
    code, first = run_importer("consume", *FAST)
    assert code == 0 and first["batch"] == 0, first
    assert {p: r[0] for p, r in first["offsets"].items()} == {"0": 0, "1": 0}
    argv = ["recovery", "reset", "-l", "import/docs", "-g", "import/repository", "--to-start"]
    assert main(["--home", str(_home()), *argv, "--reason", "re-import"]) == 0

    code, second = run_importer("consume", *FAST)
    assert code == 0, second
    assert second["recovered_positions"] == {}, "the rewind was taken for a crash and undone"
    assert (second["batch"], second["read"], second["imported"]) == (1, 30, 30), second
    assert len(set(read_delta(second["table_path"]).column("id").to_pylist())) == 30
    code, third = run_importer("consume", *FAST)
    assert code == 0 and (third["read"], third["recovered_positions"]) == (0, {}), third


@spark_test
def test_a_recreated_log_is_refused_not_recovered(spark, tmp_path: Path) -> None:
    """The log was deleted and recreated after a batch landed: the table's landed ends (10) are
    beyond the new log's end (3). Committing them would make ranges (10, 3) and skip every new
    record; the run must refuse with what happened and how to go on, and commit nothing."""
    from jobs.spark.batch_positions import plan_batch
    from jobs.spark.delta.sink import DeltaBatchSink

    path = str(tmp_path / "delta" / "t")
    with LocalLogManager(tmp_path / "log") as manager:
        manager.create(STREAM, 2)
        _append(manager, 10)
        _land(spark, DeltaBatchSink(spark, path, "test/app"), manager)
        manager.delete(STREAM)
        manager.create(STREAM, 2)
        _append(manager, 3)

        with pytest.raises(StreamcoreError) as refused:
            plan_batch(DeltaBatchSink(spark, path, "test/app"), manager, STREAM, GROUP)
        message = str(refused.value)
        assert "recreated" in message and "10" in message and "ends at 3" in message
        assert "new consumer group" in message and path in message
        assert manager.committed(STREAM, GROUP) == [None, None]

        # The way out the message gives: a new group imports the new log into the same table.
        fresh = DeltaBatchSink(spark, path, "test/app-2")
        plan = _land(spark, fresh, manager, group="test/group-2")
        assert (plan.batch, plan.ranges) == (0, {0: (0, 3), 1: (0, 3)})


@pytest.mark.parametrize("landed", ["crashed_first_batch", "committed_second_batch"])
@spark_test
def test_a_recreated_log_that_grew_past_the_landed_end_is_refused(
    spark, tmp_path: Path, landed: str
) -> None:
    """The log was deleted and recreated, and the new one already holds more records than the old
    one's landed ends (4): by offsets alone it looks like the old log. With the first batch landed
    but not committed (the job died in between) and the group's positions gone with the log, the
    group sits at the batch's start (0): recovery committed the old ends onto the new log and
    skipped its first records. Planning must refuse, whatever the positions, and commit nothing;
    a new group imports every new record."""
    from jobs.spark.batch_positions import LogMismatchError, plan_batch
    from jobs.spark.delta.sink import DeltaBatchSink

    path = str(tmp_path / "delta" / "t")
    with LocalLogManager(tmp_path / "log") as manager:
        manager.create(STREAM, 2)
        sink = DeltaBatchSink(spark, path, "test/app")
        if landed == "committed_second_batch":
            _append(manager, 2)
            _land(spark, sink, manager)
            _append(manager, 2)
            _land(spark, sink, manager)
        else:
            _append(manager, 4)
            plan = plan_batch(sink, manager, STREAM, GROUP)
            rows = spark.createDataFrame([(0, 0)], "partition int, offset long")
            sink.write(plan, lambda: rows.write.format("delta").mode("append").save(path))
            # the job died here, after the Delta commit and before the positions
        batch = sink.last_batch().batch
        manager.delete(STREAM)
        manager.create(STREAM, 2)
        _append(manager, 10)

        with pytest.raises(LogMismatchError) as refused:
            plan_batch(DeltaBatchSink(spark, path, "test/app"), manager, STREAM, GROUP)
        message = str(refused.value)
        assert f"recreated since batch {batch}" in message and "Nothing was" in message
        assert "new consumer group" in message and path in message
        assert manager.committed(STREAM, GROUP) == [None, None]

        fresh = DeltaBatchSink(spark, path, "test/app-2")
        plan = _land(spark, fresh, manager, group="test/group-2")
        assert (plan.batch, plan.ranges) == (0, {0: (0, 10), 1: (0, 10)})
        assert manager.committed(STREAM, "test/group-2") == [10, 10]


@spark_test
def test_a_position_beyond_the_log_end_is_refused(spark, tmp_path: Path) -> None:
    """A group whose committed position (50) is beyond the log's end (5), as after a topic was
    recreated while its group kept its offsets: the plan must not hold a range (50, 5)."""
    from jobs.spark.batch_positions import BatchPlan, plan_batch
    from jobs.spark.delta.sink import DeltaBatchSink

    manager = MemoryLogManager()
    manager.create(STREAM, 1)
    _append(manager, 5, partitions=1)
    manager.commit_position(LogPartition.of(STREAM, 0), GROUP, 50)
    sink = DeltaBatchSink(spark, str(tmp_path / "delta" / "t"), "test/app")
    with pytest.raises(StreamcoreError, match=r"beyond the end \(5\).*--to-start") as refused:
        plan_batch(sink, manager, STREAM, GROUP)
    assert "50" in str(refused.value)
    with pytest.raises(StreamcoreError, match="ends before it starts"):
        BatchPlan("test/app", STREAM, GROUP, 0, {0: (50, 5)})


def _age_delta_log(table: Path, days: int = 3) -> None:
    """Make every commit and checkpoint file `days` old, oldest first (Delta's log cleanup needs
    strictly increasing modification times to find a checkpoint before its cut-off)."""
    old = time.time() - days * 86_400
    for i, f in enumerate(sorted((table / "_delta_log").glob("0*"))):
        os.utime(f, (old + i, old + i))


@spark_test
def test_batch_numbers_survive_delta_log_cleanup(spark) -> None:
    """Delta's log cleanup drops the importer's commit from history() while the table's
    transactions still hold its batch number. The next run must plan the batch after it (not
    batch 0, which Delta silently skips, failing every retry) and land its records."""
    from delta.tables import DeltaTable

    code, _ = run_importer("produce", "--count", "60", "--partitions", "2", "--seed", "21")
    assert code == 0
    code, first = run_importer("consume", *FAST)
    assert code == 0 and first["batch"] == 0, first
    table = Path(first["table_path"])
    spark.sql(
        f"ALTER TABLE delta.`{table}` SET TBLPROPERTIES ('delta.checkpointInterval' = '2', "
        "'delta.logRetentionDuration' = 'interval 1 seconds', "
        "'delta.deletedFileRetentionDuration' = 'interval 1 seconds')"
    )
    for _ in range(3):  # other writers of the table (bulk actions...)
        spark.sql(f"UPDATE delta.`{table}` SET title = concat(title, '.')")
    _age_delta_log(table)
    for _ in range(2):  # the next checkpoint cleans up the expired commits
        spark.sql(f"UPDATE delta.`{table}` SET title = concat(title, '.')")
    history = DeltaTable.forPath(spark, str(table)).history().collect()
    assert min(r["version"] for r in history) > 0, "Delta kept the whole history"
    assert not [r for r in history if r["userMetadata"]], "the importer's commit is still there"

    code, _ = run_importer("produce", "--count", "25", "--partitions", "2", "--seed", "22")
    assert code == 0
    code, second = run_importer("consume", *FAST)
    assert code == 0, second
    assert (second["batch"], second["read"], second["imported"]) == (1, 25, 25)
    assert len(set(read_delta(table).column("id").to_pylist())) == 85
    code, third = run_importer("consume", *FAST)
    assert code == 0 and third["read"] == 0


# -- the importer's inputs -------------------------------------------------------------------------
def _docs(folder: Path, name: str = "docs.jsonl") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text('{"id": "1"}\n')
    return path


def _check(*argv: str) -> str | None:
    """The importer's argument checks in this process: None if accepted, else the error."""
    from jobs import importer
    from jobs.spark.job import argument_errors

    return argument_errors(importer, list(argv))


def _home() -> Path:
    return Path(os.environ["STREAMCORE_HOME"])


def test_an_import_path_outside_the_roots_is_refused_before_spark(tmp_path: Path) -> None:
    outside = _docs(tmp_path / "elsewhere")
    started = time.monotonic()
    result = run_importer_process("produce", "--source", "files", "--path", str(outside))
    assert result.returncode == 2, result.stderr[-3000:]
    message = result.stderr.strip().splitlines()[-1]
    assert str(outside) in message and str(_home()) in message
    assert "STREAMCORE_IMPORT_ROOTS" in message
    assert "SparkSession" not in result.stderr
    assert time.monotonic() - started < 30, "the path must be checked before Spark starts"


def test_paths_escaping_the_roots_are_refused(tmp_path: Path) -> None:
    """`..` and symlinks are resolved first: a link under the root to a file outside it, a folder
    under the root holding such a link, and root/../outside are all outside."""
    outside = _docs(tmp_path / "elsewhere")
    home = _home()
    link = home / "link.jsonl"
    link.symlink_to(outside)
    folder = home / "batch"
    _docs(folder, "a.jsonl")
    (folder / "b.jsonl").symlink_to(outside)
    dotdot = home / ".." / outside.relative_to(home.parent)
    for path, named in ((link, outside), (folder, outside), (dotdot, outside)):
        message = _check("produce", "--source", "files", "--path", str(path))
        assert message is not None, f"{path} was accepted"
        assert str(named) in message and "STREAMCORE_IMPORT_ROOTS" in message, message


def test_import_roots_default_to_the_home_and_can_be_widened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("STREAMCORE_IMPORT_ROOTS", raising=False)
    inside = _docs(_home() / "incoming")
    other = _docs(tmp_path / "shared")
    assert _check("produce", "--source", "files", "--path", str(inside)) is None
    assert _check("produce", "--source", "files", "--path", str(inside.parent)) is None
    assert _check("produce", "--source", "files", "--path", str(other)) is not None
    # --home moves the default root with it
    other_home = ("produce", "--home", str(tmp_path / "other-home"))
    assert _check(*other_home, "--source", "files", "--path", str(inside)) is not None
    shared_home = ("produce", "--home", str(tmp_path / "shared"))
    assert _check(*shared_home, "--source", "files", "--path", str(other)) is None
    roots = os.pathsep.join([str(tmp_path / "nowhere"), str(tmp_path / "shared")])
    monkeypatch.setenv("STREAMCORE_IMPORT_ROOTS", roots)
    assert _check("produce", "--source", "files", "--path", str(other)) is None
    assert _check("produce", "--source", "files", "--path", str(inside)) is not None


def test_the_dag_validate_task_refuses_a_path_outside_the_roots(tmp_path: Path) -> None:
    """The validate task of streamcore_importer runs the same check (without Spark): a run
    importing a file outside the roots fails there, naming the path and the setting."""
    outside = _docs(tmp_path / "elsewhere")
    inside = _docs(_home() / "incoming")
    code = f"""
        import json, sys
        sys.path.insert(0, {str(ROOT / "dags")!r})
        from pathlib import Path
        import streamcore_importer as m
        from _streamcore import check_job_arguments
        from airflow.sdk.exceptions import AirflowFailException
        base = {{"source": "files", "format": None, "count": 1, "partitions": 1,
                 "avg_blob_size": 0, "seed": None, "batch_size": 0, "failure_threshold": 0.1}}
        out = {{}}
        for name, path in (("outside", {str(outside)!r}), ("inside", {str(inside)!r})):
            try:  # as validate does: the DAG's checks, then the job's own on each step
                args = m.importer_arguments({{**base, "path": path}}, m.streamcore_home(), "r")
                for argv in args.values():
                    check_job_arguments("importer", argv)
                out[name] = args["produce"]
            except AirflowFailException as exc:
                out[name] = str(exc)
        print(json.dumps(out))
    """
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path / "airflow")}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert isinstance(out["inside"], list) and str(inside) in out["inside"], out["inside"]
    assert isinstance(out["outside"], str), f"{outside} was accepted: {out['outside']}"
    assert str(outside) in out["outside"] and "STREAMCORE_IMPORT_ROOTS" in out["outside"]
