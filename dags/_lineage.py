"""OpenLineage of the job tasks: what `StreamcoreSparkSubmitOperator`'s OpenLineage methods return
to the Airflow OpenLineage provider, which wraps it in its START / COMPLETE / FAIL events
(docs/airflow.md, "Lineage").

- inputs and outputs: the task's declared inlets and outlets (Airflow assets built from
  `streamcore.datasets`), named by the same module's OpenLineage (namespace, name) pairs, so the
  lineage graph and the asset graph name every stream and table alike;
- the run facet `streamcore_job`: the job's summary, what it says of the batch in the keys of the
  asset event's extra (batch, offset ranges per partition, rows, quarantined rows, Delta
  version), its schema in include/openlineage/StreamcoreJobRunFacet.json;
- the data-quality facets, on the inputs of a step that validated what it read: Great
  Expectations' result as OpenLineage's `dataQualityAssertions` (one assertion per expectation
  that failed, or one for the whole suite when none failed), and the rows read as
  `dataQualityMetrics.rowCount`.

Imported by the operator's OpenLineage methods only, which the provider calls when OpenLineage
is enabled: DAG files never import it, nor OpenLineage, at parse time.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

import attr
from _assets import batch_extra
from airflow.providers.openlineage.extractors import OperatorLineage
from openlineage.client.event_v2 import InputDataset, OutputDataset
from openlineage.client.facet_v2 import (
    RunFacet,
    data_quality_assertions_dataset,
    data_quality_metrics_input_dataset,
)

from streamcore.config import load_config
from streamcore.datasets import Dataset, stream_dataset, table_dataset

RUN_FACET = "streamcore_job"
# The facet's JSON Schema ships with the project; consumers store the URL, none resolves it.
SCHEMA_URL = "include/openlineage/StreamcoreJobRunFacet.json#/$defs/StreamcoreJobRunFacet"


@attr.define
class StreamcoreJobRunFacet(RunFacet):
    """What one job step did: the job, its step, whether it failed and why; `job_run_facet` adds
    what its summary says of the batch."""

    job: str
    step: str | None = attr.field(default=None)
    status: str | None = attr.field(default=None)
    error: str | None = attr.field(default=None)

    _additional_skip_redact: ClassVar[list[str]] = ["job", "step"]

    @staticmethod
    def _get_schema() -> str:
        return SCHEMA_URL


def job_run_facet(job: str, summary: Mapping[str, Any]) -> RunFacet:
    """The `streamcore_job` facet of a job step's `summary` (jobs.spark.job's summary line): its
    job, step, status and error, then what it says of the batch in the very keys of the asset
    event's extra (`_assets.batch_extra`: batch, offsets by partition, rows, read, quarantined,
    delta_version...), so the lineage tool and the asset graph tell the same batch alike. A key
    the summary does not give is left out."""
    facet = StreamcoreJobRunFacet(
        job=str(summary.get("job") or job),
        step=summary.get("step"),
        status=summary.get("status"),
        error=summary.get("error"),
    )
    return facet.with_additional_properties(**batch_extra(summary))


def quality_facets(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The input dataset facets of a step's Great Expectations result (`validation` of its
    summary, `ValidationReport.to_json`), or {} when the step validated nothing."""
    validation = summary.get("validation")
    if not isinstance(validation, Mapping):
        return {}
    # GX's unexpected rows of an expectation, else the job's own count of the rows it failed.
    counts = {
        **(validation.get("quarantined_by_expectation") or {}),
        **{k: v for k, v in (validation.get("unexpected_counts") or {}).items() if v is not None},
    }
    failed = list(validation.get("failed_expectations") or [])
    assertions = [
        data_quality_assertions_dataset.Assertion(
            assertion=str(name),
            success=False,
            actual=None if counts.get(name) is None else f"{counts[name]} unexpected rows",
        )
        for name in failed
    ]
    if not failed:  # every expectation held: one assertion for the suite
        assertions.append(
            data_quality_assertions_dataset.Assertion(
                assertion="expectation_suite", success=bool(validation.get("success"))
            )
        )
    facets: dict[str, Any] = {
        "dataQualityAssertions": data_quality_assertions_dataset.DataQualityAssertionsDatasetFacet(
            assertions=assertions
        )
    }
    if isinstance(summary.get("read"), int):
        facets["dataQualityMetrics"] = (
            data_quality_metrics_input_dataset.DataQualityMetricsInputDatasetFacet(
                columnMetrics={}, rowCount=summary["read"]
            )
        )
    return facets


def asset_dataset(asset: Any) -> tuple[str, str] | None:
    """The OpenLineage (namespace, name) of an inlet or outlet: a stream or table asset is named
    by `streamcore.datasets` (by its group and name); another asset by its URI's
    `scheme://authority` and path (OpenLineage's naming for a location). None for an inlet that
    is not an asset (a task's XCom, say)."""
    uri, name, group = (getattr(asset, k, None) for k in ("uri", "name", "group"))
    if not isinstance(uri, str):
        return None
    if group in ("stream", "table"):
        found: Dataset = (
            stream_dataset(name, load_config())
            if group == "stream"
            else table_dataset(name, load_config())
        )
        return found.openlineage
    scheme, _, rest = uri.partition("://")
    authority, _, path = rest.partition("/")
    return (f"{scheme}://{authority}" if authority else scheme), "/" + path


def job_lineage(
    job: str,
    inlets: Iterable[Any],
    outlets: Iterable[Any],
    summary: Mapping[str, Any] | None = None,
) -> OperatorLineage:
    """The lineage of one job task: its inlets and outlets as datasets and, once the job has
    printed its summary (COMPLETE, or FAIL after the job started), the facets of the summary."""
    input_facets = quality_facets(summary) if summary else {}
    inputs = [
        InputDataset(namespace=ns, name=name, inputFacets=dict(input_facets))
        for ns, name in _named(inlets)
    ]
    inputs += [InputDataset(namespace=ns, name=name) for ns, name in source_files(summary or {})]
    outputs = [OutputDataset(namespace=ns, name=name) for ns, name in _named(outlets)]
    run_facets = {RUN_FACET: job_run_facet(job, summary)} if summary else {}
    return OperatorLineage(inputs=inputs, outputs=outputs, run_facets=run_facets)


def source_files(summary: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The files a step read that no inlet declares, known only once it ran: the file or folder
    the importer's produce read (`--source files`: the Params choose it per run), as the local
    file system's OpenLineage dataset (`file`, its absolute path)."""
    path = summary.get("path")
    if summary.get("source") == "files" and isinstance(path, str) and path.startswith("/"):
        return [("file", path)]
    return []


def _named(assets: Iterable[Any]) -> list[tuple[str, str]]:
    found = (asset_dataset(a) for a in assets or ())
    return list(dict.fromkeys(pair for pair in found if pair is not None))
