"""dags/_lineage.py: what the job task's OpenLineage methods give the provider. The datasets are
the task's asset inlets and outlets named by streamcore.datasets; the job's summary becomes the
`streamcore_job` run facet (valid against include/openlineage/StreamcoreJobRunFacet.json) and its
Great Expectations result the data-quality facets of the inputs. Run in a fresh interpreter with
its own AIRFLOW_HOME: no Spark, no Airflow database."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from dag_snippets import run_snippet

ROOT = Path(__file__).resolve().parents[3]
CONSUMED = {
    "job": "importer",
    "step": "consume",
    "status": "ok",
    "group": "import/repository",
    "batch": 3,
    "offsets": {"0": [10, 20], "1": [0, 5]},
    "read": 15,
    "imported": 14,
    "quarantined": 1,
    "delta_version": 7,
    "seconds": 12.5,
    "validation": {
        "success": False,
        "evaluated_expectations": 9,
        "failed_expectations": ["expect_column_values_to_not_be_null"],
        "unexpected_counts": {"expect_column_values_to_not_be_null": 1},
    },
}


CASES: dict[str, dict[str, Any] | None] = {
    "start": None,
    "consumed": CONSUMED,
    "held": {**CONSUMED, "validation": {"success": True, "failed_expectations": []}},
    "produced": {"job": "importer", "step": "produce", "documents": 100, "status": "ok"},
    "from_files": {
        "job": "importer",
        "step": "produce",
        "status": "ok",
        "source": "files",
        "path": "/srv/import/docs.jsonl",
        "format": "json",
    },
    "without_gx_counts": {
        **CONSUMED,
        "validation": {
            "success": False,
            "failed_expectations": ["expect_column_values_to_not_be_null"],
            "unexpected_counts": {"expect_column_values_to_not_be_null": None},
            "quarantined_by_expectation": {"expect_column_values_to_not_be_null": 2},
        },
    },
}


@pytest.fixture(scope="module")
def lineages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """job_lineage of an importer task reading import/docs into repository and quarantine, for
    each summary of CASES, serialized as the provider's events carry it; one interpreter for all
    (importing Airflow and OpenLineage is most of its time)."""
    tmp_path = tmp_path_factory.mktemp("lineage")
    code = f"""
        import json, sys
        sys.path.insert(0, {str(ROOT / "dags")!r})
        from airflow.sdk import Asset
        from openlineage.client.serde import Serde
        from streamcore.config import load_config
        from streamcore.datasets import stream_dataset, table_dataset
        from _lineage import job_lineage

        config = load_config()
        found = [stream_dataset("import/docs", config), table_dataset("repository", config),
                 table_dataset("quarantine", config)]
        stream, table, quarantine = (Asset(d.name, uri=d.uri, group=d.kind) for d in found)
        out = {{}}
        for case, summary in {CASES!r}.items():
            got = job_lineage("importer", [stream], [table, quarantine], summary)
            out[case] = {{
                "inputs": [json.loads(Serde.to_json(d)) for d in got.inputs],
                "outputs": [json.loads(Serde.to_json(d)) for d in got.outputs],
                "run_facets": {{
                    k: json.loads(Serde.to_json(v)) for k, v in got.run_facets.items()
                }},
                "expected": [list(d.openlineage) for d in found],
            }}
        print(json.dumps(out))
    """
    env = {"AIRFLOW_HOME": str(tmp_path / "airflow"), "STREAMCORE_HOME": str(tmp_path / "home")}
    return run_snippet(code, env, timeout=120)


def test_inlets_and_outlets_are_the_datasets_named_by_streamcore_datasets(
    lineages: dict[str, Any],
) -> None:
    got = lineages["start"]
    stream, table, quarantine = got["expected"]
    assert [[d["namespace"], d["name"]] for d in got["inputs"]] == [stream]
    assert [[d["namespace"], d["name"]] for d in got["outputs"]] == [table, quarantine]
    assert stream[0] == "file" and stream[1].endswith("/log/import-docs")
    # Before the job ran (the START event): no summary, so no facets yet.
    assert got["run_facets"] == {} and got["inputs"][0].get("inputFacets", {}) == {}


def test_the_summary_is_the_run_facet_and_the_validation_the_quality_facets(
    lineages: dict[str, Any],
) -> None:
    got = lineages["consumed"]
    facet = got["run_facets"]["streamcore_job"]
    # The batch in the keys of the asset event's extra (dags/_assets.py's batch_extra).
    assert {k: facet[k] for k in ("job", "step", "status", "batch", "offsets")} == {
        "job": "importer",
        "step": "consume",
        "status": "ok",
        "batch": 3,
        "offsets": {"0": [10, 20], "1": [0, 5]},
    }
    assert (facet["read"], facet["rows"], facet["quarantined"]) == (15, 14, 1)
    assert facet["delta_version"] == 7 and facet["_schemaURL"].startswith(
        "include/openlineage/StreamcoreJobRunFacet.json"
    )
    schema = json.loads((ROOT / "include/openlineage/StreamcoreJobRunFacet.json").read_text())
    # The facet's own properties (the base RunFacet's schema lives at openlineage.io).
    jsonschema.validate(facet, schema["$defs"]["StreamcoreJobRunFacet"]["allOf"][1])

    quality = got["inputs"][0]["inputFacets"]
    assert quality["dataQualityAssertions"]["assertions"] == [
        {
            "assertion": "expect_column_values_to_not_be_null",
            "success": False,
            "actual": "1 unexpected rows",
            "params": {},
        }
    ]
    assert quality["dataQualityMetrics"]["rowCount"] == 15
    assert "inputFacets" not in got["outputs"][0] or not got["outputs"][0]["inputFacets"]


def test_a_suite_that_held_is_one_successful_assertion(lineages: dict[str, Any]) -> None:
    got = lineages["held"]
    assertions = got["inputs"][0]["inputFacets"]["dataQualityAssertions"]["assertions"]
    assert assertions == [{"assertion": "expectation_suite", "success": True, "params": {}}]


def test_a_step_without_validation_has_no_quality_facet(lineages: dict[str, Any]) -> None:
    got = lineages["produced"]
    assert got["inputs"][0].get("inputFacets", {}) == {}
    facet = got["run_facets"]["streamcore_job"]
    # Fields the summary does not give are left out of the event.
    assert facet["step"] == "produce" and "batch" not in facet and "offsets" not in facet


def test_without_gx_counts_an_assertion_tells_the_jobs_own(lineages: dict[str, Any]) -> None:
    """GX gives no unexpected count when it could not compute an expectation's metrics; the
    job's own row checks (`quarantined_by_expectation`) still counted the rows."""
    assertions = lineages["without_gx_counts"]["inputs"][0]["inputFacets"]
    assert [a["actual"] for a in assertions["dataQualityAssertions"]["assertions"]] == [
        "2 unexpected rows"
    ]


def test_the_file_a_produce_read_is_an_input(lineages: dict[str, Any]) -> None:
    """The importer's produce from files reads the file its run's Params chose: no inlet can
    declare it, its summary names it, and it becomes an input beside the declared ones."""
    got = lineages["from_files"]
    stream = got["expected"][0]
    assert [[d["namespace"], d["name"]] for d in got["inputs"]] == [
        stream,
        ["file", "/srv/import/docs.jsonl"],
    ]
    assert got["inputs"][1].get("inputFacets", {}) == {}
    assert [[d["namespace"], d["name"]] for d in lineages["produced"]["inputs"]] == [stream]


def test_spark_submit_gets_the_task_run_as_openlineage_parent(tmp_path: Path) -> None:
    """With `[openlineage] spark_inject_parent_job_info` (scripts/airflow.sh sets it), the job
    task's Spark confs name its run as the parent of the Spark application's (openlineage-spark
    reads them); without it they are left as given."""
    code = f"""
        import json, os, sys
        from datetime import datetime, timezone
        from types import SimpleNamespace
        sys.path.insert(0, {str(ROOT / "dags")!r})
        from airflow.providers.openlineage.plugins.adapter import OpenLineageAdapter
        from _streamcore import _with_openlineage_parent

        when = datetime(2026, 1, 2, tzinfo=timezone.utc)
        run = SimpleNamespace(conf={{}}, clear_number=0, logical_date=when)
        ti = SimpleNamespace(dag_id="streamcore_importer", task_id="consume", try_number=1,
                             map_index=-1, dag_run=run, get_template_context=lambda: {{}})
        conf = _with_openlineage_parent({{"spark.x": "1"}}, {{"ti": ti}})
        expected = OpenLineageAdapter.build_task_instance_run_id(
            dag_id="streamcore_importer", task_id="consume", try_number=1, logical_date=when,
            map_index=-1)
        print(json.dumps({{"conf": conf, "expected": str(expected)}}))
    """
    outs = []
    for on in ("true", "false"):
        env = {
            "AIRFLOW_HOME": str(tmp_path / on),
            "AIRFLOW__OPENLINEAGE__NAMESPACE": "streamcore",
            "AIRFLOW__OPENLINEAGE__SPARK_INJECT_PARENT_JOB_INFO": on,
        }
        outs.append(run_snippet(code, env, timeout=120))
    injected, left = outs
    assert injected["conf"] == {
        "spark.x": "1",
        "spark.openlineage.parentJobNamespace": "streamcore",
        "spark.openlineage.parentJobName": "streamcore_importer.consume",
        "spark.openlineage.parentRunId": injected["expected"],
        "spark.openlineage.rootParentRunId": injected["conf"]["spark.openlineage.rootParentRunId"],
        "spark.openlineage.rootParentJobName": "streamcore_importer",
        "spark.openlineage.rootParentJobNamespace": "streamcore",
    }
    assert left["conf"] == {"spark.x": "1"}
