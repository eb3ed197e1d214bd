"""The importer DAG: documents → `import/docs` → data quality → Delta `repository`.

validate → produce (spark-submit jobs/importer.py produce) → consume (… consume) → summary.
"""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import Any

import pendulum
from _assets import StepAssets, assets, runs_on_records, stream_asset
from _streamcore import default_args, job_tasks, streamcore_home
from airflow.sdk import Param, dag
from airflow.sdk.exceptions import AirflowFailException

STREAM = "import/docs"
GROUP = "import/repository"
TABLE = "repository"
# `[importer] runs_on = "records"` (STREAMCORE_IMPORTER_RUNS_ON): consume runs start when
# documents arrive on import/docs, written by something else (no produce step).
RUNS_ON = runs_on_records("streamcore_importer")
STEPS = ["consume"] if RUNS_ON.records else ["produce", "consume"]

DOC = """
# streamcore importer

Imports documents into the Delta table **`repository`** (upsert by id) through the stream
`import/docs`, with Great Expectations checks on the way:

- **validate** checks the parameters together (e.g. `files` needs an existing `path` under the
  allowed import roots: `STREAMCORE_IMPORT_ROOTS`, default `STREAMCORE_HOME`), the Spark
  connection, `spark-submit` and the jars. A bad run stops here, before any Spark job.
- **produce**: `spark-submit jobs/importer.py produce` generates `count` random documents, or
  reads `path`, and appends them as Avro Records to `import/docs` (`partitions`).
- **consume**: `spark-submit jobs/importer.py consume` reads what group `import/repository` has
  not consumed yet (at most `batch_size` records, 0 = all), validates it, quarantines failing rows,
  MERGEs the rest into `repository` exactly once, then commits the group's positions. It fails
  when the share of failing rows exceeds `failure_threshold`.
- **summary** logs a table of what the run did and keeps it in
  `STREAMCORE_HOME/runs/importer/<dag id>+<run id>.json`.

**Runs on records**, with `[importer] runs_on = "records"` (or
`STREAMCORE_IMPORTER_RUNS_ON=records`): the DAG has no produce step, and a run starts when
documents arrive on `import/docs` past what group `import/repository` has consumed (a trigger in
Airflow's triggerer looks at the stream's end offsets every `[importer] watch_interval`, default
2s); an idle stream starts no run. The documents come from whoever appends them (an
application, `streamcore` tools). The default is `manual`: runs start from the Trigger form.

Random documents are seeded by the run id unless `seed` is given: retrying a run regenerates the
same ids (the MERGE by id absorbs them), a new run adds new documents.

Spark master: connection `spark_default` (`local[*]` by default; `spark://host:7077` for a
cluster). Re-running or clearing a run is safe: consume is idempotent and crash-safe. Data Docs of
each validation are under `STREAMCORE_HOME/gx/`.
"""

PARAMS = {
    "source": Param(
        "random",
        enum=["random", "files"],
        title="Source",
        description="random: generate `count` documents; files: read the documents in `path`.",
    ),
    "path": Param(
        None,
        type=["null", "string"],
        title="Path",
        description="source=files only: a file or folder of JSON lines, CSV, Parquet or Avro "
        "documents (include/schemas/Document.avsc fields), as seen by the Spark driver, under "
        "the allowed import roots (STREAMCORE_IMPORT_ROOTS, default STREAMCORE_HOME).",
    ),
    "format": Param(
        None,
        type=["null", "string"],
        enum=[None, "jsonl", "csv", "parquet", "avro"],
        # The form names an enum's choices by their values; the null choice would read "null".
        values_display={
            "null": "from the file extension",
            "jsonl": "JSON lines",
            "csv": "CSV",
            "parquet": "Parquet",
            "avro": "Avro",
        },
        title="File format",
        description="source=files only: jsonl, csv, parquet or avro; empty = from the extension.",
    ),
    "count": Param(
        100_000,
        type="integer",
        minimum=1,
        maximum=100_000_000,
        title="Documents",
        description="source=random: how many documents to generate.",
    ),
    "partitions": Param(
        4,
        type="integer",
        minimum=1,
        maximum=1000,
        title="Partitions",
        description="Partitions of import/docs when the producer creates it (also its write "
        "parallelism).",
    ),
    "avg_blob_size": Param(
        1024,
        type="integer",
        minimum=0,
        maximum=1 << 30,
        title="Average blob size",
        description="source=random: average blob size in bytes of the generated documents.",
    ),
    "seed": Param(
        None,
        type=["null", "integer"],
        minimum=0,
        title="Seed",
        description="source=random: seed of the generator (ids derive from seed and index). "
        "Empty = derived from the run id: a retry regenerates the same documents (the MERGE by "
        "id absorbs them), another run adds new ones.",
    ),
    "batch_size": Param(
        0,
        type="integer",
        minimum=0,
        title="Batch size",
        description="Most records the consumer imports in this run (0 = everything not yet "
        "consumed); the rest waits for the next run.",
    ),
    "failure_threshold": Param(
        0.05,
        type="number",
        minimum=0,
        maximum=1,
        title="Failure threshold",
        description="Largest share of rows failing expectations that still lets the run succeed "
        "(failing rows go to the quarantine table either way).",
    ),
}


def importer_arguments(params: dict[str, Any], home: Path, run_id: str) -> dict[str, list[str]]:
    """The produce and consume arguments of jobs/importer.py for `params` of run `run_id`, with
    the checks of parameters that go together (AirflowFailException naming the parameter and the
    fix); validate then runs the job's own argument checks on them (ranges, path under the
    import roots, format), as for every job."""
    source, path, fmt = params["source"], params.get("path"), params.get("format")
    produce = ["produce", "--source", source, "--partitions", str(params["partitions"])]
    if source == "files":
        if not path:
            raise AirflowFailException(
                "source=files needs `path`: the file or folder of documents to import"
            )
        produce += ["--path", str(Path(path).resolve())]
        if fmt:
            produce += ["--format", fmt]
    else:
        if path or fmt:
            raise AirflowFailException(
                f"path/format ({path!r}, {fmt!r}) are set but source is random; set "
                "source=files or clear them"
            )
        produce += ["--count", str(params["count"])]
        produce += ["--avg-blob-size", str(params["avg_blob_size"])]
        seed = params.get("seed")
        produce += ["--seed", str(zlib.crc32(run_id.encode()) if seed is None else seed)]
    common = ["--stream", STREAM, "--home", str(home)]
    consume = [
        "consume",
        "--group",
        GROUP,
        "--table",
        TABLE,
        "--batch-size",
        str(params["batch_size"]),
        "--failure-threshold",
        str(params["failure_threshold"]),
    ]
    return {"produce": produce + common, "consume": consume + common}


@dag(
    dag_id="streamcore_importer",
    schedule=(
        [stream_asset(STREAM)]  # with its watcher
        if RUNS_ON.records
        else None
    ),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,  # runs share the consumer group: one at a time
    tags=["streamcore", "importer"],
    params=PARAMS,
    doc_md=DOC,
    default_args=default_args(retries=1),
)
def streamcore_importer() -> None:
    job_tasks(
        "importer",
        STEPS,
        lambda params, context: {
            step: argv
            for step, argv in importer_arguments(
                params, streamcore_home(), context["dag_run"].run_id
            ).items()
            if step in STEPS
        },
        retries={"consume": 2},  # crash-safe and idempotent: a retry after a lost worker is safe
        assets={
            "produce": StepAssets(outlets=assets(streams=[STREAM])),
            "consume": StepAssets(assets(streams=[STREAM]), assets(tables=[TABLE, "quarantine"])),
        },
        driver_memory="2g",
    )


streamcore_importer()
