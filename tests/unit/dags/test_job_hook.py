"""dags/_streamcore.py's job task in an Airflow provider's shape: the spark-submit hook keeps the
job's JSON summary through the provider's public surface only (no private method overridden, no
class swapped at run time), and the thin operator delegates to `StreamcoreJobHook`. Run in a
fresh interpreter with its own AIRFLOW_HOME and a fake spark-submit on PATH: no Spark, no
Airflow database or server."""

from __future__ import annotations

import json
import os
from pathlib import Path

from dag_snippets import run_snippet

ROOT = Path(__file__).resolve().parents[3]
FAKE_SPARK_SUBMIT = """#!/bin/sh
echo "spark-submit $*"
echo '{"job":"demo","documents":3}'
echo '{"job":"demo","documents":4,"step":"last summary wins"}'
echo 'INFO ShutdownHookManager: Shutdown hook called'
echo "FOO=$FOO"
"""


def _run(tmp_path: Path, code: str) -> dict:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "spark-submit"
    fake.write_text(FAKE_SPARK_SUBMIT)
    fake.chmod(0o755)
    env = {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "AIRFLOW_HOME": str(tmp_path / "airflow"),
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[*]"}),
    }
    return run_snippet(code, env, timeout=120)


def test_the_spark_submit_hook_keeps_the_last_summary_line_and_logs_every_line(
    tmp_path: Path,
) -> None:
    out = _run(
        tmp_path,
        """
        from _streamcore import StreamcoreSparkSubmitHook
        hook = StreamcoreSparkSubmitHook(
            conn_id="spark_default", name="t", application_args=["--x", "1"],
            env_vars={"FOO": "bar"},
        )
        hook.submit("app.py")
        print(json.dumps(hook.summary))
        """,
    )
    assert out == {"job": "demo", "documents": 4, "step": "last summary wins"}


def test_the_hook_and_operator_use_only_public_provider_methods(tmp_path: Path) -> None:
    out = _run(
        tmp_path,
        """
        import inspect
        from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
        import _streamcore
        from _streamcore import StreamcoreSparkSubmitHook, StreamcoreSparkSubmitOperator
        overridden = [
            name for name in vars(StreamcoreSparkSubmitHook)
            if name.startswith("_") and not name.startswith("__") and hasattr(SparkSubmitHook, name)
        ]
        op = StreamcoreSparkSubmitOperator(task_id="consume", job="importer",
                                           application_args=["consume"], driver_memory="2g")
        print(json.dumps({
            "overridden": overridden,
            "class_swap": "__class__ =" in inspect.getsource(_streamcore),
            "application": op.application, "name": op.name, "conn_id": op.conn_id,
            "templated": sorted(op.template_fields),
        }))
        """,
    )
    assert out["overridden"] == [] and out["class_swap"] is False
    assert out["application"] == str(ROOT / "jobs" / "importer.py")
    assert (out["name"], out["conn_id"]) == ("streamcore-importer", "spark_default")
    assert "application_args" in out["templated"]  # the validate task's XCom, resolved


def test_on_spark_connect_the_job_runs_in_the_task_process(tmp_path: Path) -> None:
    """An `sc://` connection: the hook runs the job in its own process (no spark-submit), with
    the job's own exit codes: a failed job raises AirflowException with its error (retried),
    refused arguments AirflowFailException (not retried). Neither case reaches Spark."""
    home = tmp_path / "home"
    home.mkdir()
    out = _run(
        tmp_path,
        f"""
        import os
        os.environ["AIRFLOW_CONN_SPARK_DEFAULT"] = json.dumps(
            {{"conn_type": "spark", "host": "sc://127.0.0.1:1"}}
        )
        from airflow.sdk.exceptions import AirflowException, AirflowFailException
        from _streamcore import StreamcoreJobHook

        def outcome(argv):
            hook = StreamcoreJobHook(job="stream_stats", application="unused.py",
                                     application_args=argv)
            try:
                return ["ok", hook.run()]
            except AirflowFailException as exc:
                return ["fail", str(exc)]
            except AirflowException as exc:
                return ["error", str(exc)]

        window = ["--start", "2026-11-23", "--end", "2026-11-24", "--home", {str(home)!r}]
        print(json.dumps({{
            "missing": outcome(["--stream", "test/nothing", *window]),
            "refused": outcome(["--stream", "no spaces allowed", *window]),
            "remote": os.environ.get("STREAMCORE_SPARK_REMOTE"),
        }}))
        """,
    )
    kind, message = out["missing"]
    assert kind == "error" and message.startswith("jobs/stream_stats.py failed on sc://127.0.0.1:1")
    assert "stream test/nothing does not exist" in message
    kind, message = out["refused"]
    assert kind == "fail" and "rejects" in message and "(exit 2)" in message
    assert out["remote"] is None  # the job's environment is restored after it ran
