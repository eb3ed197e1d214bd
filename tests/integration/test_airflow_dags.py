"""The DAGs of dags/ as Airflow loads them: no import errors, fast parsing, the conventions of
docs/design.md ("Conventions"), and the parameter checks of the importer and audit DAGs (Param
schemas and the validate task's cross-parameter checks); the audit DAG's schedule from the
configuration."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from airflow_harness import DAGS, ROOT, AirflowEnv, dag_test, make_airflow_env, run_python
from recovery_support import DLQ, SOURCE, source_records, write_dead_letters

from streamcore.codecs import get_codec
from streamcore.config import load_config
from streamcore.log import LogPartition, open_log_manager
from streamcore.names import Name
from streamcore.record import Record

pytestmark = pytest.mark.airflow


@pytest.fixture(scope="module")
def af(tmp_path_factory: pytest.TempPathFactory) -> AirflowEnv:
    return make_airflow_env(
        tmp_path_factory.mktemp("airflow-home"), tmp_path_factory.mktemp("sc-home")
    )


@pytest.fixture(scope="module")
def dagbag(af: AirflowEnv) -> dict[str, Any]:
    """What a fresh interpreter sees when it loads dags/ the way the dag-processor does."""
    return run_python(
        af,
        f"""
        from pathlib import Path
        from airflow.dag_processing.dagbag import BundleDagBag
        folder = Path({str(DAGS)!r})
        bag = BundleDagBag(dag_folder=folder, bundle_path=folder, bundle_name="dags-folder")
        heavy = [m for m in ("pyspark", "great_expectations", "delta") if m in sys.modules]
        dags = {{}}
        for dag_id, dag in bag.dags.items():
            dags[dag_id] = {{
                "tags": sorted(dag.tags),
                "doc_md": dag.doc_md or "",
                "fileloc": dag.fileloc,
                "catchup": dag.catchup,
                "max_active_runs": dag.max_active_runs,
                "timetable": repr(dag.timetable),
                "tasks": {{
                    t.task_id: {{
                        "retries": t.retries,
                        "downstream": sorted(t.downstream_task_ids),
                        "type": type(t).__name__,
                        "conn_id": getattr(t, "conn_id", None),
                    }}
                    for t in dag.tasks
                }},
                "params": {{
                    k: {{"description": p.description, "schema": p.schema}}
                    for k, p in dag.params.items()
                }},
            }}
        print(json.dumps({{
            "import_errors": bag.import_errors,
            "dags": dags,
            "durations": {{s.file: s.duration.total_seconds() for s in bag.dagbag_stats}},
            "heavy_modules": heavy,
        }}))
        """,
    )


def test_dagbag_has_no_import_errors(dagbag: dict[str, Any]) -> None:
    assert dagbag["import_errors"] == {}
    assert "streamcore_importer" in dagbag["dags"]
    dag_files = {p.name for p in DAGS.glob("*.py") if not p.name.startswith("_")}
    assert {Path(d["fileloc"]).name for d in dagbag["dags"].values()} == dag_files


def test_each_dag_file_parses_in_under_a_second(dagbag: dict[str, Any]) -> None:
    assert dagbag["durations"], "no DAG file was parsed"
    for file, seconds in dagbag["durations"].items():
        assert seconds < 1.0, f"{file} took {seconds:.2f} s to parse"
    assert dagbag["heavy_modules"] == [], "DAG parsing imported Spark/GX/Delta"


def test_every_dag_follows_the_conventions(dagbag: dict[str, Any]) -> None:
    for dag_id, dag in dagbag["dags"].items():
        assert "streamcore" in dag["tags"] and len(dag["tags"]) >= 2, dag_id
        assert len(dag["doc_md"]) > 200, f"{dag_id} needs a real doc_md"
        for name, param in dag["params"].items():
            assert param["description"], f"{dag_id} param {name} has no description"
            assert "type" in param["schema"] or "enum" in param["schema"], f"{dag_id}.{name}"
            # The trigger form shows an enum's values as they are unless values_display names
            # them: an optional enum would offer a choice spelled "null".
            if None in param["schema"].get("enum", ()):
                shown = param["schema"].get("values_display") or {}
                assert "null" in shown, f"{dag_id}.{name}: label the null choice in values_display"
        for task_id, t in dag["tasks"].items():
            assert t["retries"] is not None, f"{dag_id}.{task_id} has no explicit retries"


def test_importer_dag_shape(dagbag: dict[str, Any]) -> None:
    dag = dagbag["dags"]["streamcore_importer"]
    tasks = dag["tasks"]
    # both Spark tasks take their arguments from validate (XCom); summary follows validate too,
    # so a skipped validate skips the whole run in one scheduling pass
    assert tasks["validate"]["downstream"] == ["consume", "produce", "summary"]
    assert tasks["produce"]["downstream"] == ["consume", "summary"]  # summary reads its XCom
    assert tasks["consume"]["downstream"] == ["summary"]
    assert tasks["summary"]["downstream"] == []
    for spark_task in ("produce", "consume"):
        assert tasks[spark_task]["type"] == "StreamcoreSparkSubmitOperator"
        assert tasks[spark_task]["conn_id"] == "spark_default"
    assert tasks["validate"]["retries"] == 0  # bad input is not retried
    assert tasks["consume"]["retries"] >= 1  # crash-safe, so retried
    assert set(dag["params"]) >= {
        "source",
        "path",
        "count",
        "partitions",
        "batch_size",
        "failure_threshold",
    }
    assert dag["params"]["source"]["schema"]["enum"] == ["random", "files"]


BAD_CONFS = {
    "streamcore_importer": [
        ({"count": 0}, "count"),
        ({"count": "many"}, "count"),
        ({"source": "kafka"}, "source"),
        ({"partitions": 0}, "partitions"),
        ({"failure_threshold": 1.5}, "failure_threshold"),
        ({"batch_size": -1}, "batch_size"),
        ({"format": "xml"}, "format"),
    ],
    "streamcore_backfill": [
        ({"stream": "x"}, "stream"),
        ({"start": 20261124}, "start"),
        ({"dry_run": "no"}, "dry_run"),
    ],
    "streamcore_retention": [
        ({"dry_run": "yes please"}, "dry_run"),
        ({"streams": "import/docs"}, "streams"),
        ({"horizon": "soon"}, "horizon"),
        ({"force": "maybe"}, "force"),
    ],
    "streamcore_bulk_action": [
        ({"action": "shred"}, "action"),
        ({"query": ""}, "query"),
        ({"params": "reviewed=yes"}, "params"),
        ({"bucket_size": 0}, "bucket_size"),
        ({"query_limit": -1}, "query_limit"),
        ({"command_id": "../../outside"}, "command_id"),
        ({"command_id": "/tmp/x"}, "command_id"),
    ],
    "streamcore_bulk_trash_old_notes": [({"retention_days": "a month"}, "retention_days")],
    "streamcore_audit": [
        ({"mode": "replay"}, "mode"),
        ({"failure_threshold": -0.1}, "failure_threshold"),
        ({"failure_threshold": 2}, "failure_threshold"),
        ({"batch_limit": -1}, "batch_limit"),
        ({"batch_limit": 2.5}, "batch_limit"),
        ({"start": 20261124}, "start"),
    ],
}


def test_param_schemas_reject_bad_values(af: AirflowEnv) -> None:
    """The schema check Airflow runs when a run is created (UI form, CLI, REST API)."""
    confs = {dag_id: [c for c, _ in cases] for dag_id, cases in BAD_CONFS.items()}
    result = run_python(
        af,
        f"""
        import copy
        from pathlib import Path
        from airflow.dag_processing.dagbag import BundleDagBag
        from airflow.sdk.exceptions import ParamValidationError
        folder = Path({str(DAGS)!r})
        dags = BundleDagBag(dag_folder=folder, bundle_path=folder).dags
        out = {{}}
        for dag_id, confs in {confs!r}.items():
            dag = dags[dag_id]
            out[dag_id] = []
            for conf in confs:
                params = copy.deepcopy(dag.params)
                try:
                    params.update(conf)
                    params.validate()
                    out[dag_id].append(None)
                except (ParamValidationError, ValueError) as exc:
                    out[dag_id].append(str(exc))
            copy.deepcopy(dag.params).validate()  # the defaults are valid
        print(json.dumps(out))
        """,
    )
    for dag_id, cases in BAD_CONFS.items():
        for (conf, name), message in zip(cases, result[dag_id], strict=True):
            assert message is not None, f"{dag_id}: {conf} was accepted"
            assert name in message, message


def test_validate_checks_parameters_together(af: AirflowEnv, tmp_path: Path) -> None:
    """importer_arguments(): what the validate task does with a schema-valid conf."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.jsonl").write_text('{"id": "1"}\n')
    unknown = tmp_path / "docs.xml"
    unknown.write_text("<doc/>\n")
    cases = {
        "random": ({"source": "random", "path": None, "format": None}, None),
        "files": ({"source": "files", "path": str(docs), "format": None}, None),
        "no_path": ({"source": "files", "path": None, "format": None}, "needs `path`"),
        "missing": ({"source": "files", "path": str(tmp_path / "nope"), "format": None}, "exist"),
        "unknown": ({"source": "files", "path": str(unknown), "format": None}, "--format"),
        "random_path": ({"source": "random", "path": str(docs), "format": None}, "source=files"),
    }
    result = run_python(
        af,
        f"""
        import os
        from pathlib import Path
        import streamcore_importer as m
        from _streamcore import check_job_arguments
        from airflow.sdk.exceptions import AirflowFailException
        os.environ["STREAMCORE_IMPORT_ROOTS"] = {str(tmp_path)!r}  # the documents' folder
        base = {{"count": 10, "partitions": 2, "avg_blob_size": 100, "batch_size": 0,
                 "failure_threshold": 0.1, "seed": None}}
        seeded = m.importer_arguments({{**base, "source": "random", "path": None,
                                        "format": None, "seed": 7}}, Path("/h"), "run-1")
        out = {{}}
        for name, (conf, _) in {cases!r}.items():
            try:  # as validate does: the DAG's checks, then the job's own
                out[name] = m.importer_arguments({{**base, **conf}}, Path("/h"), "run-1")
                for argv in out[name].values():
                    check_job_arguments("importer", argv)
            except AirflowFailException as exc:
                out[name] = str(exc)
        out["seeded"] = seeded
        out["other_run"] = m.importer_arguments({{**base, "source": "random", "path": None,
                                                  "format": None}}, Path("/h"), "run-2")
        print(json.dumps(out))
        """,
    )
    for name, (_, error) in cases.items():
        if error is None:
            assert isinstance(result[name], dict), result[name]
        else:
            assert isinstance(result[name], str) and error in result[name], result[name]
    random_args = result["random"]
    assert random_args["produce"][:3] == ["produce", "--source", "random"]
    assert "--count" in random_args["produce"] and "--path" not in random_args["produce"]
    assert random_args["consume"][0] == "consume"

    def seed(args: dict[str, list[str]]) -> str:
        return args["produce"][args["produce"].index("--seed") + 1]

    # a run's seed is fixed (retries regenerate the same ids), runs differ, `seed` overrides
    assert seed(random_args) != seed(result["other_run"])
    assert seed(result["seeded"]) == "7"
    assert random_args["consume"][-4:] == ["--stream", "import/docs", "--home", "/h"]
    files_args = result["files"]["produce"]
    assert files_args[files_args.index("--path") + 1] == str(docs)
    assert "--count" not in files_args
    # what the job itself rejects, the validate task rejects before spark-submit
    assert "jobs/importer.py rejects" in result["missing"]


def test_stream_stats_dag_shape(dagbag: dict[str, Any]) -> None:
    """job_tasks: validate → one spark-submit per step → summary; a daily one-day interval."""
    dag = dagbag["dags"]["streamcore_stream_stats"]
    tasks = dag["tasks"]
    assert tasks["validate"]["downstream"] == ["stats", "summary"]  # the arguments (XCom); summary
    assert tasks["stats"]["downstream"] == ["summary"]  # its summary (XCom)
    assert tasks["summary"]["downstream"] == []
    assert tasks["stats"]["type"] == "StreamcoreSparkSubmitOperator"
    assert tasks["stats"]["conn_id"] == "spark_default"
    assert tasks["validate"]["retries"] == tasks["summary"]["retries"] == 0
    assert tasks["stats"]["retries"] == 1
    assert dag["catchup"] is False
    # a cron trigger with a one-day interval: the run at midnight covers the day before
    assert "CronTriggerTimetable" in dag["timetable"] and "days=1" in dag["timetable"]
    assert dag["params"]["stream"]["schema"]["type"] == "string"


def test_stream_stats_validate_uses_the_interval_and_the_jobs_checks(af: AirflowEnv) -> None:
    """What the validate task of job_tasks does with the DAG's arguments function: the data
    interval as --start/--end, checked by jobs/stream_stats.py's own check_args."""
    result = run_python(
        af,
        """
        import pendulum
        import streamcore_stream_stats as m
        from _streamcore import check_job_arguments
        from airflow.sdk.exceptions import AirflowFailException
        day = {"data_interval_start": pendulum.datetime(2026, 3, 10, tz="UTC"),
               "data_interval_end": pendulum.datetime(2026, 3, 11, tz="UTC")}
        out = {"day": m.stats_arguments({"stream": "import/docs"}, day)}
        cases = {
            "no_interval": ({"stream": "import/docs"}, {"data_interval_start": None,
                                                       "data_interval_end": None}),
            "empty_interval": ({"stream": "import/docs"}, {**day, "data_interval_end":
                                                          day["data_interval_start"]}),
            "bad_stream": ({"stream": "Not A Stream"}, day),
        }
        for name, (params, context) in cases.items():
            try:
                check_job_arguments("stream_stats", m.stats_arguments(params, context)["stats"])
                out[name] = None
            except AirflowFailException as exc:
                out[name] = str(exc)
        print(json.dumps(out))
        """,
    )
    argv = result["day"]["stats"]
    assert argv[:6] == [
        "--stream",
        "import/docs",
        "--start",
        "2026-03-10T00:00:00+00:00",
        "--end",
        "2026-03-11T00:00:00+00:00",
    ]
    assert argv[6:] == ["--home", str(af.streamcore_home)]
    assert "no data interval" in result["no_interval"]
    assert "jobs/stream_stats.py rejects" in result["empty_interval"]
    assert "must be after --start" in result["empty_interval"]
    assert "jobs/stream_stats.py rejects" in result["bad_stream"]
    assert "--stream" in result["bad_stream"]


def test_audit_dag_shape(dagbag: dict[str, Any]) -> None:
    """job_tasks with one Spark step; every 5 minutes by default, each run's data interval the
    5 minutes before it; one run at a time."""
    dag = dagbag["dags"]["streamcore_audit"]
    tasks = dag["tasks"]
    assert tasks["validate"]["downstream"] == ["land", "summary"]
    assert tasks["land"]["downstream"] == ["summary"]
    assert tasks["summary"]["downstream"] == []
    assert tasks["land"]["type"] == "StreamcoreSparkSubmitOperator"
    assert tasks["land"]["conn_id"] == "spark_default"
    assert tasks["validate"]["retries"] == tasks["summary"]["retries"] == 0
    assert tasks["land"]["retries"] == 2
    assert dag["catchup"] is False and dag["max_active_runs"] == 1
    assert dag["tags"] == ["audit", "streamcore"]
    timetable = dag["timetable"]
    assert "CronTriggerTimetable(expression='*/5 * * * *', timezone='UTC'" in timetable
    assert "interval=datetime.timedelta(seconds=300)" in timetable
    params = dag["params"]
    assert params["mode"]["schema"]["enum"] == ["auto", "batch", "interval"]
    threshold = params["failure_threshold"]["schema"]
    assert (threshold["type"], threshold["minimum"], threshold["maximum"]) == ("number", 0, 1)
    assert params["batch_limit"]["schema"]["minimum"] == 0
    for name in ("start", "end"):
        assert params[name]["schema"]["type"] == ["null", "string"]
        assert params[name]["schema"]["format"] == "date-time"
    assert "*/5 * * * *" in dag["doc_md"] and "backfill" in dag["doc_md"]


def test_audit_validate_picks_the_mode_and_checks_the_arguments(af: AirflowEnv) -> None:
    """audit_arguments() and the job's own check_args, as the validate task runs them: the mode
    from the Params and the run type, the interval from the run or from start/end."""
    slot = ["2026-11-24T10:00:00+00:00", "2026-11-24T10:05:00+00:00"]
    cases = {
        "scheduled": ({}, "scheduled", True),
        "scheduled_limit": ({"batch_limit": 500, "failure_threshold": 0.25}, "scheduled", True),
        "manual_no_interval": ({}, "manual", False),
        "backfill": ({}, "backfill", True),
        "manual_start_end": ({"start": "2026-11-23T08:00", "end": "2026-11-23T09:00"}, "manual", 0),
        "interval_scheduled": ({"mode": "interval"}, "scheduled", True),
        "interval_no_interval": ({"mode": "interval"}, "manual", False),
        "start_only": ({"start": "2026-11-23T08:00"}, "manual", False),
        "batch_start": ({"mode": "batch", "start": slot[0], "end": slot[1]}, "manual", False),
        "batch_backfill": ({"mode": "batch"}, "backfill", True),
        "interval_limit": ({"batch_limit": 10}, "backfill", True),
        "reversed": ({"start": slot[1], "end": slot[0]}, "manual", False),
        "not_a_time": ({"start": "yesterday", "end": slot[1]}, "manual", False),
    }
    result = run_python(
        af,
        f"""
        from types import SimpleNamespace
        import pendulum
        import streamcore_audit as m
        from _streamcore import check_job_arguments
        from airflow.sdk.exceptions import AirflowFailException
        slot = [pendulum.parse(t) for t in {slot!r}]
        defaults = {{k: p.value for k, p in m.PARAMS.items()}}
        out = {{}}
        for name, (params, run_type, interval) in {cases!r}.items():
            context = {{"dag_run": SimpleNamespace(run_type=run_type),
                        "data_interval_start": slot[0] if interval else None,
                        "data_interval_end": slot[1] if interval else None}}
            try:
                argv = m.audit_arguments({{**defaults, **params}}, context)["land"]
                check_job_arguments("audit", argv)
                out[name] = argv
            except AirflowFailException as exc:
                out[name] = str(exc)
        print(json.dumps(out))
        """,
    )
    home = ["--home", str(af.streamcore_home)]
    threshold = "--failure-threshold"
    assert result["scheduled"] == ["batch", "--batch-size", "0", threshold, "0.0", *home]
    assert result["scheduled_limit"] == ["batch", "--batch-size", "500", threshold, "0.25", *home]
    assert result["manual_no_interval"][0] == "batch"  # a manual run without start/end
    interval = ["interval", "--start", slot[0], "--end", slot[1], "--failure-threshold", "0.0"]
    assert result["backfill"] == [*interval, *home]
    assert result["interval_scheduled"] == [*interval, *home]
    assert result["manual_start_end"][:5] == [
        "interval",
        "--start",
        "2026-11-23T08:00",
        "--end",
        "2026-11-23T09:00",
    ]
    assert "no data interval" in result["interval_no_interval"]
    assert "go together" in result["start_only"]
    assert "mode=batch" in result["batch_start"] and "mode=batch" in result["batch_backfill"]
    assert "batch_limit=10 only applies to batch mode" in result["interval_limit"]
    # what the job itself rejects, validate rejects before spark-submit
    assert "jobs/audit.py rejects" in result["reversed"]
    assert "must be after --start" in result["reversed"]
    assert "jobs/audit.py rejects" in result["not_a_time"]
    assert "not an ISO 8601 time" in result["not_a_time"]


def test_audit_validate_skips_batch_runs_with_nothing_to_land(af: AirflowEnv) -> None:
    """nothing_to_land(), which validate asks before spark-submit, on the real local log of the
    run's STREAMCORE_HOME: a batch run is skipped while audit/entries does not exist and once
    group audit/delta has landed every entry; an interval run is never skipped."""
    result = run_python(
        af,
        """
        import streamcore_audit as m
        from _streamcore import streamcore_home
        from streamcore.config import load_config
        from streamcore.log import LogPartition, open_log_manager
        batch = {"land": ["batch", "--batch-size", "0"]}
        window = ["--start", "2026-11-24T10:00", "--end", "2026-11-24T11:00"]
        interval = {"land": ["interval", *window]}
        out = {"missing": m.nothing_to_land(batch), "interval": m.nothing_to_land(interval)}
        manager = open_log_manager(load_config(home=streamcore_home()))
        manager.create("audit/entries", 1)
        manager.appender("audit/entries").append_batch([("a", b"1"), ("b", b"2")])
        out["pending"] = m.nothing_to_land(batch)
        manager.commit_position(LogPartition("audit/entries", 0), "audit/delta", 1)
        out["one_left"] = m.nothing_to_land(batch)
        manager.commit_position(LogPartition("audit/entries", 0), "audit/delta", 2)
        out["landed"] = m.nothing_to_land(batch)
        out["interval_landed"] = m.nothing_to_land(interval)
        manager.close()
        print(json.dumps(out))
        """,
    )
    assert "audit/entries does not exist yet" in result["missing"]
    assert result["pending"] is None and result["one_left"] is None
    assert "group audit/delta has landed every entry of audit/entries" in result["landed"]
    assert result["interval"] is None and result["interval_landed"] is None


def test_retention_validate_builds_dry_runs_for_people_and_real_runs_for_the_schedule(
    af: AirflowEnv,
) -> None:
    """retention_arguments(): a manual run is a dry run unless dry_run is off; a scheduled one
    never is; a named stream that does not exist fails before Spark, naming the logs."""
    result = run_python(
        af,
        """
        from types import SimpleNamespace
        import streamcore_retention as m
        from _streamcore import check_job_arguments, streamcore_home
        from airflow.sdk.exceptions import AirflowFailException
        from streamcore.config import load_config
        from streamcore.log import open_log_manager
        manager = open_log_manager(load_config(home=streamcore_home()))
        manager.create("hist/known", 1)
        manager.close()
        defaults = {k: p.value for k, p in m.PARAMS.items()}
        def args(params, run_type):
            context = {"dag_run": SimpleNamespace(run_type=run_type)}
            argvs = m.retention_arguments({**defaults, **params}, context)
            for argv in argvs.values():
                check_job_arguments("retention", argv)
            return argvs
        out = {
            "manual": args({}, "manual"),
            "manual_real": args(
                {"dry_run": False, "force": True, "streams": ["hist/known"]}, "manual"
            ),
            "scheduled": args({}, "scheduled"),
        }
        try:
            args({"streams": ["hist/known", "hist/typo"]}, "manual")
        except AirflowFailException as exc:
            out["unknown"] = str(exc)
        print(json.dumps(out))
        """,
    )
    home = ["--home", str(af.streamcore_home)]
    assert result["manual"] == {
        "archive": ["archive", "--horizon", "1d", "--partial-ok", *home, "--dry-run"],
        "purge": ["purge", *home, "--dry-run"],
        "compact": ["compact", *home, "--dry-run"],
        "maintain": ["maintain", *home, "--dry-run"],
    }
    real = result["manual_real"]
    assert real["archive"] == [
        "archive",
        "--horizon",
        "1d",
        "--partial-ok",
        "--streams",
        "hist/known",
        *home,
    ]
    assert real["purge"] == ["purge", "--streams", "hist/known", "--force", *home]
    assert real["compact"] == ["compact", "--streams", "hist/known", *home]
    assert all("--dry-run" not in argv for argv in result["scheduled"].values())
    assert "hist/typo" in result["unknown"] and "hist/known" in result["unknown"]


def test_backfill_validate_checks_streams_and_interval_before_spark(af: AirflowEnv) -> None:
    """backfill_arguments(): the interval from start/end or the run's data interval, the
    streams checked to exist, a dry run only for a person's run that asks for it."""
    result = run_python(
        af,
        """
        from types import SimpleNamespace
        import pendulum
        import streamcore_backfill as m
        from _streamcore import check_job_arguments, streamcore_home
        from airflow.sdk.exceptions import AirflowFailException
        from streamcore.config import load_config
        from streamcore.log import open_log_manager
        manager = open_log_manager(load_config(home=streamcore_home()))
        for name in ("hist/a", "replay/a"):
            manager.create(name, 1)
        manager.close()
        defaults = {k: p.value for k, p in m.PARAMS.items()}
        day = [pendulum.datetime(2026, 11, 20, tz="UTC"), pendulum.datetime(2026, 11, 21, tz="UTC")]
        def args(params, run_type, interval=True):
            context = {"dag_run": SimpleNamespace(run_type=run_type),
                       "data_interval_start": day[0] if interval else None,
                       "data_interval_end": day[1] if interval else None}
            try:
                argv = m.backfill_arguments({**defaults, **params}, context)["replay"]
                check_job_arguments("backfill", argv)
                return argv
            except AirflowFailException as exc:
                return str(exc)
        ok = {"stream": "hist/a", "target": "replay/a"}
        out = {
            "backfill": args(ok, "backfill"),
            "manual": args({**ok, "start": "2026-11-01", "end": "2026-11-02"}, "manual", False),
            "manual_real": args({**ok, "dry_run": False}, "manual"),
            "no_stream": args({**ok, "stream": "hist/zzz"}, "backfill"),
            "no_target": args({**ok, "target": "replay/zzz"}, "backfill"),
            "reversed": args({**ok, "start": "2026-11-02", "end": "2026-11-01"}, "manual"),
            "start_only": args({**ok, "start": "2026-11-02"}, "manual"),
        }
        print(json.dumps(out))
        """,
    )
    home = ["--home", str(af.streamcore_home)]
    day = ["--start", "2026-11-20T00:00:00+00:00", "--end", "2026-11-21T00:00:00+00:00"]
    streams = ["--stream", "hist/a"]
    assert result["backfill"] == [*streams, *day, "--target", "replay/a", *home]
    assert result["manual"] == [
        *streams,
        *("--start", "2026-11-01", "--end", "2026-11-02"),
        *("--target", "replay/a", *home, "--dry-run"),
    ]
    assert result["manual_real"][-1] != "--dry-run"
    assert "hist/zzz does not exist" in result["no_stream"]
    assert "replay/zzz does not exist" in result["no_target"]
    assert "streamcore create" in result["no_target"]
    assert "must be after --start" in result["reversed"]
    assert "go together" in result["start_only"]


def test_bulk_validate_checks_and_submits_once_before_spark(af: AirflowEnv) -> None:
    """bulk_arguments(): the action, its params, the query and the sizes checked before Spark,
    and the command submitted with an id from the run, so a retried validate finds it instead
    of submitting again. (The exclusive refusal is the service's: tests/unit/bulk.)"""
    result = run_python(
        af,
        """
        from types import SimpleNamespace
        import streamcore_bulk_action as m
        from _streamcore import check_job_arguments
        from airflow.sdk.exceptions import AirflowFailException
        from streamcore.bulk import BulkService
        defaults = {k: p.value for k, p in m.PARAMS.items()}
        def args(params, run_id="manual__1"):
            context = {"dag_run": SimpleNamespace(dag_id="streamcore_bulk_action", run_id=run_id)}
            try:
                argv = m.bulk_arguments({**defaults, **params}, context)["run"]
                check_job_arguments("bulk_action", argv)
                return argv
            except AirflowFailException as exc:
                return str(exc)
        ok = {"action": "trash", "query": "type = 'Note'"}
        first, again = args(ok), args(ok)
        with BulkService() as service:
            submitted = [s.command_id for s in service.list()]
        out = {
            "first": first,
            "again": again,
            "submitted": submitted,
            "subquery": args({**ok, "query": "id IN (SELECT id FROM audit)"}, "r2"),
            "column": args({**ok, "query": "colour = 'red'"}, "r3"),
            "statement": args({**ok, "query": "1 = 1; DROP TABLE repository"}, "r4"),
            "params": args({"action": "setProperties", "params": {"properties": 7}}, "r5"),
            "sizes": args({**ok, "bucket_size": 10, "batch_size": 20}, "r6"),
        }
        # A command submitted outside Airflow, run by the id the dispatcher gives.
        with BulkService() as service:
            cli = service.submit("trash", "true", username="ann").command_id
            dispatched = service.dispatch(lambda c: f"streamcore_bulk_action/bulk__{c}")
        out["dispatched"] = dispatched
        out["cli"] = args({"command_id": cli}, f"bulk__{cli}")
        out["cli_again"] = args({"command_id": cli}, f"bulk__{cli}")  # a retried validate
        out["cli_other_run"] = args({"command_id": cli}, "manual__2")
        out["unknown"] = args({"command_id": "no-such-command"}, "r7")
        print(json.dumps(out))
        """,
    )
    home = ["--home", str(af.streamcore_home)]
    command = result["first"][1]
    assert result["first"] == ["--command-id", command, *home]
    assert result["again"] == result["first"] and result["submitted"] == [command]
    assert "subquer" in result["subquery"].lower(), result["subquery"]
    assert "colour" in result["column"], result["column"]
    assert "statement" in result["statement"].lower(), result["statement"]
    assert "params/properties" in result["params"], result["params"]
    assert "batch size" in result["sizes"], result["sizes"]
    # The commands the runs submitted are theirs: the dispatcher starts the CLI's only.
    cli = result["cli"][1]
    assert result["dispatched"] == [[cli, f"streamcore_bulk_action/bulk__{cli}"]]
    assert result["cli"] == result["cli_again"] == ["--command-id", cli, *home]
    assert f"streamcore_bulk_action/bulk__{cli} runs it" in result["cli_other_run"]
    assert "no bulk command 'no-such-command'" in result["unknown"]


def test_audit_schedule_comes_from_the_configuration(af: AirflowEnv, tmp_path: Path) -> None:
    """An operator changes `[audit] schedule` in the TOML file (or STREAMCORE_AUDIT_SCHEDULE):
    the DAG's schedule and data intervals follow; a bad one is the DAG file's import error with
    the fix, and the other DAGs still load."""
    toml = (ROOT / "include" / "streamcore.toml").read_text()
    assert 'schedule = "*/5 * * * *"' in toml
    hourly = tmp_path / "streamcore.toml"
    hourly.write_text(toml.replace('schedule = "*/5 * * * *"', 'schedule = "15 * * * *"'))
    result = run_python(
        af,
        f"""
        import os
        from pathlib import Path
        from airflow.dag_processing.dagbag import BundleDagBag
        folder = Path({str(DAGS)!r})
        out = {{}}
        for name, env in {{"toml": ("STREAMCORE_CONFIG", {str(hourly)!r}),
                           "bad": ("STREAMCORE_AUDIT_SCHEDULE", "*/7 * * * *")}}.items():
            os.environ[env[0]] = env[1]
            bag = BundleDagBag(dag_folder=folder, bundle_path=folder)
            del os.environ[env[0]]
            dag = bag.dags.get("streamcore_audit")
            out[name] = {{"timetable": repr(dag.timetable) if dag else None,
                          "dags": sorted(bag.dags),
                          "errors": {{Path(f).name: e for f, e in bag.import_errors.items()}}}}
        print(json.dumps(out))
        """,
    )
    timetable = result["toml"]["timetable"]
    assert "expression='15 * * * *'" in timetable, timetable
    assert "interval=datetime.timedelta(seconds=3600)" in timetable
    bad = result["bad"]
    assert bad["timetable"] is None
    assert bad["dags"] == [
        "streamcore_backfill",
        "streamcore_bulk_action",
        "streamcore_bulk_dispatch",
        "streamcore_bulk_trash_old_notes",
        "streamcore_importer",
        "streamcore_recovery",
        "streamcore_repository_report",
        "streamcore_retention",
        "streamcore_stream_stats",
    ]
    error = bad["errors"]["streamcore_audit.py"]
    assert "audit.schedule is '*/7 * * * *'" in error and "4 to 7 minutes apart" in error


def test_recovery_dag_checks_before_anything_changes_then_repairs(af: AirflowEnv) -> None:
    """streamcore_recovery: plan() refuses bad input with the reason before anything changes
    and chooses the engine by the selection's size; run_in_task() lists, redrives (once), and
    moves a group with a before / after preview; then one dag.test() redrives the rest through
    spark-submit jobs/recovery.py, with its summary table and audit entry."""
    config = load_config(home=af.streamcore_home)
    write_dead_letters(config)
    with open_log_manager(config) as manager:
        manager.create("app/orders", 1)
        with manager.appender("app/orders", get_codec("avro")) as appender:
            for n in range(3):
                appender.append(f"o{n}", Record(f"o{n}", b"x", n))
        manager.commit_position(LogPartition.of(Name.of("app/orders"), 0), "enrich", 1)
    result = run_python(
        af,
        f"""
        import streamcore_recovery as m
        from airflow.sdk.exceptions import AirflowFailException
        defaults = {{k: p.value for k, p in m.PARAMS.items()}}
        def plan(params):
            try:
                return m.plan({{**defaults, **params}}, "manual__r1", "ops")
            except AirflowFailException as exc:
                return str(exc)
        def run(params):
            p = {{**defaults, **params}}
            try:
                planned = m.plan(p, "manual__r1", "ops")
                out = m.run_in_task(p, planned, "ops")
            except AirflowFailException as exc:
                return str(exc)
            return {{"out": out, "report": m.render_summary(p, planned, out)}}
        fixed = {{"action": "redrive", "error": "ValueError", "dry_run": False, "reason": "fixed"}}
        orders = {{"action": "reset", "stream": "app/orders", "group": "enrich"}}
        out = {{
            "list": run({{"action": "list"}}),
            "list_spark": plan({{"action": "list", "spark_threshold": 0}}),
            "dry": run({{"action": "redrive", "redrive_all": True}}),
            "no_reason": plan({{"action": "redrive", "redrive_all": True, "dry_run": False}}),
            "no_selection": plan({{"action": "redrive", "dry_run": False, "reason": "r"}}),
            "unknown_stream": plan({{"action": "list", "stream": "app/dlq-nope"}}),
            "out_of_range": plan({{"action": "redrive", "stream": {DLQ!r}, "offsets": "0:999"}}),
            "redrive": run(fixed),
            "again": run(fixed),
            "unknown_group": plan({{**orders, "action": "skip", "group": "nobody",
                                   "offsets": "0:1"}}),
            "no_value": plan({{**orders, "reset_to": "offset"}}),
            "preview": run({{**orders, "reset_to": "start"}}),
            "reset": run({{**orders, "reset_to": "start", "dry_run": False, "reason": "replay"}}),
            "purge": run({{"action": "outbox-purge", "older_than_s": 0}}),
        }}
        print(json.dumps(out, default=str))
        """,
    )
    listed = result["list"]["out"]
    assert (listed["engine"], listed["selected"]) == ("process", 8)
    assert listed["output"].endswith("recovery/listings/manual__r1")
    assert "error class" in result["list"]["report"] and "ValueError" in result["list"]["report"]
    spark = result["list_spark"]
    assert isinstance(spark, dict), spark
    assert spark["engine"] == "spark" and spark["records"] == 8
    assert "--engine" not in result["list_spark"]["argv"]
    assert result["dry"]["out"]["redriven"] == 7 and result["dry"]["out"]["dry_run"] is True
    assert "needs a reason" in result["no_reason"]
    assert "selects explicitly" in result["no_selection"]
    assert "app/dlq-nope does not exist" in result["unknown_stream"]
    assert "not 999" in result["out_of_range"]
    assert result["redrive"]["out"]["redriven"] == 4, result["redrive"]
    assert (result["again"]["out"]["redriven"], result["again"]["out"]["already"]) == (0, 4)
    assert "nobody" in result["unknown_group"]
    assert "reset_value" in result["no_value"]
    preview = result["preview"]
    assert preview["out"]["rows"][0]["before"] == 1 and preview["out"]["rows"][0]["after"] == 0
    assert "partition  before  after" in preview["report"], preview["report"]
    assert result["reset"]["out"]["audit_event_id"], result["reset"]
    assert "none (nothing changed)" in result["purge"]["report"]
    with open_log_manager(config) as manager:
        assert manager.committed("app/orders", "enrich") == [0]
    assert len(source_records(config)[1]) == 4

    run = dag_test(
        af,
        "streamcore_recovery",
        {
            "action": "redrive",
            "redrive_all": True,
            "dry_run": False,
            "reason": "the rest",
            "spark_threshold": 0,
        },
    )
    assert run["state"] == "success", run
    assert run["tasks"] == {
        "validate": "success",
        "route": "success",
        "spark": "success",
        "in_task": "skipped",
        "summary": "success",
    }
    records = list((af.streamcore_home / "runs" / "recovery").glob("*.json"))
    record = next(json.loads(r.read_text()) for r in records if run["run_id"] in r.read_text())
    redriven = record["result"]
    assert (redriven["job"], redriven["engine"]) == ("recovery", "spark")
    assert (redriven["redriven"], redriven["already"], redriven["foreign"]) == (3, 4, 1)
    assert redriven["audit_event_id"]
    assert "target" in record["report"] and SOURCE in record["report"]
    assert len(source_records(config)[1]) == 7
