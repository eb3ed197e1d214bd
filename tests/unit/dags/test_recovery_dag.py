"""The DAG streamcore_recovery parses (a DagBag of its one file, in a fresh interpreter with its
own AIRFLOW_HOME: no Airflow database or server) with its tasks, wiring and Params, and its thin
tasks turn the library's refusals (`streamcore.recovery.actions`) into AirflowFailException. The
runs themselves are tested end to end in tests/integration/test_airflow_dags.py."""

from __future__ import annotations

from pathlib import Path

from dag_snippets import run_snippet

ROOT = Path(__file__).resolve().parents[3]
DAG_FILE = ROOT / "dags" / "streamcore_recovery.py"


def test_the_recovery_dag_parses_and_refuses_before_the_logs(tmp_path: Path) -> None:
    code = f"""
        import json, sys
        sys.path.insert(0, {str(ROOT / "dags")!r})
        from airflow.dag_processing.dagbag import DagBag
        from airflow.sdk.exceptions import AirflowFailException

        bag = DagBag(dag_folder={str(DAG_FILE)!r})
        dag = bag.dags["streamcore_recovery"]
        import streamcore_recovery as m

        defaults = {{k: p.value for k, p in m.PARAMS.items()}}

        def refusal(**fields):
            try:
                m.plan({{**defaults, **fields}}, "manual__r1", "ops")
            except AirflowFailException as exc:
                return str(exc)

        print(json.dumps({{
            "errors": bag.import_errors,
            "tasks": {{t.task_id: sorted(t.upstream_task_ids) for t in dag.tasks}},
            "params": sorted(dag.params),
            "actions": dag.params.get_param("action").schema["enum"],
            "reset_to": dag.params.get_param("reset_to").schema["enum"],
            "no_reason": refusal(action="redrive", dry_run=False),
            "no_queue": refusal(action="outbox-retry"),
        }}))
        """
    out = run_snippet(code, {"AIRFLOW_HOME": str(tmp_path / "airflow")}, timeout=120)
    assert out["errors"] == {}
    assert out["tasks"] == {
        "validate": [],
        "route": ["validate"],
        "in_task": ["route", "validate"],
        "spark": ["route", "validate"],
        "summary": ["in_task", "spark", "validate"],
    }
    params = "action stream group offsets computation error since until redrive_all to"
    params += " reset_to reset_value partition queue job_id older_than_s reason force dry_run"
    params += " spark_threshold"
    assert out["params"] == sorted(params.split())
    assert out["actions"] == [
        "list",
        "redrive",
        "skip",
        "reset",
        "outbox-errors",
        "outbox-retry",
        "outbox-purge",
    ]
    assert out["reset_to"] == ["end", "start", "offset", "date", "watermark"]
    assert out["no_reason"] == "a run that changes something needs a reason (Param reason)"
    assert out["no_queue"] == "action outbox-retry needs the Param queue"
