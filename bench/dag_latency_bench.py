"""DAG-run latency, spark-submit against a warm Spark Connect server (issue 16, section 2).

Setup, untimed: a throw-away STREAMCORE_HOME and AIRFLOW_HOME (`scripts/airflow.sh init`), and a
Spark Connect server of this run (`scripts/spark-connect.sh start`, on a free port, master
`--master`, default local[*]), stopped at the end.

Timed, for each way of running the job task (`spark_default`'s host local[*]: spark-submit of
`jobs/audit.py`; sc://127.0.0.1:PORT: the job in the task's process on the server):

* `dag.test()` of `streamcore_audit` in batch mode (as scheduled), wall time of the run from its
  start to its end, median of `--runs`: an empty micro-batch (nothing to land: validate skips
  the run, so neither way starts Spark), a 1-entry micro-batch (the fixed cost of a run that
  does land) and a `--records` (default 1,000) micro-batch. One untimed 1-entry run warms each
  way first (the server's first query; the OS caches for spark-submit);
* `csvExport` of `--export-docs` documents (default 2,000; Nuxeo's example exported 1,844 in
  about 1.4 s), from submit to COMPLETED, median of `--runs`: `jobs/bulk_action.py` by
  spark-submit, and in process on a Connect session (what the bulk DAG's task does on Connect).

Prints a table of seconds and the ratio spark-submit / Connect, the 5 s target of an empty
micro-batch on Connect, and the exports next to Nuxeo's.

    flock /tmp/bench.lock python bench/dag_latency_bench.py [--runs 3] [--records 1000] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from streamcore.config import project_root
from streamcore.text import render_table

ROOT = project_root()

VENV_BIN = ROOT / ".venv" / "bin"
DAG = "streamcore_audit"
TARGET_EMPTY_S = 5.0  # an empty micro-batch DAG run on Connect, end to end (issue 16)
NUXEO_EXPORT = (1844, 1.4)  # documents, seconds (reference/nuxeo-stream.md, section 4)
QUERY = "type IN ('Folder', 'File', 'Note')"  # every generated document


def say(text: str) -> None:
    print(f"[bench] {text}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def entries(count: int) -> list[dict[str, Any]]:
    """`count` valid audit entries, an hour back (the job refuses dates in its future)."""
    start = datetime.now(UTC) - timedelta(hours=1)
    return [
        {
            "event_id": uuid.uuid4().hex,
            "event_type": ("documentCreated", "documentModified", "download")[n % 3],
            "category": "eventDocumentCategory",
            "doc_id": str(uuid.UUID(int=n % 1000)),
            "doc_path": f"/default-domain/workspaces/ws-{n % 10}/doc-{n % 1000}",
            "doc_type": "File",
            "principal": f"user-{n % 50}",
            "event_date": start + timedelta(milliseconds=n),
            "lifecycle_state": "project",
            "repository": "default",
            "extended": {"n": str(n)},
        }
        for n in range(count)
    ]


def append_entries(home: Path, count: int) -> None:
    """`count` entries on the audit stream, as the relay appends them."""
    from streamcore.audit import STREAM, audit_record
    from streamcore.codecs import get_codec
    from streamcore.config import load_config
    from streamcore.log import open_log_manager

    if not count:
        return
    config = load_config(home=home)
    manager = open_log_manager(config)
    try:
        if not manager.exists(STREAM):
            manager.create(STREAM, 1)
        codec = get_codec("avro", config=config)
        items = entries(count)
        records = [audit_record(e) for e in items]
        manager.appender(STREAM).append_batch(
            [(r.key, codec.encode(r)) for r in records],
            timestamps=[int(e["event_date"].timestamp() * 1000) + 1000 for e in items],
        )
    finally:
        manager.close()


def python(env: dict[str, str], code: str, timeout: float = 900) -> dict[str, Any]:
    """Run `code` in a fresh interpreter (Airflow reads its configuration at import); its last
    stdout line is a JSON object. The DAG folder and bench/ are on its PYTHONPATH: the DAG files'
    helpers (`_streamcore`) and the benches' builders (`bulk_bench`) are not installed."""
    prelude = "import json, sys, time\n"
    path = [str(ROOT / "dags"), str(ROOT / "bench"), env.get("PYTHONPATH", "")]
    done = subprocess.run(
        [str(VENV_BIN / "python"), "-c", prelude + textwrap.dedent(code)],
        env={**env, "PYTHONPATH": os.pathsep.join(filter(None, path))},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise SystemExit(f"subprocess failed ({done.returncode}):\n{done.stderr[-6000:]}")
    return json.loads(lines[-1])


def dag_run(env: dict[str, str]) -> dict[str, Any]:
    """One `dag.test()` of the audit DAG: its wall time, state, task states and what it landed."""
    return python(
        env,
        f"""
        from pathlib import Path
        from airflow.dag_processing.dagbag import BundleDagBag
        folder = Path("dags").resolve()
        dag = BundleDagBag(dag_folder=folder, bundle_path=folder).dags[{DAG!r}]
        started = time.monotonic()
        run = dag.test(run_conf={{}})
        seconds = time.monotonic() - started
        states = {{ti.task_id: str(ti.state) for ti in run.get_task_instances()}}
        from streamcore.runs import record_path
        record = record_path("audit", {DAG!r}, run.run_id)
        land = json.loads(record.read_text())["land"] if record.exists() else {{}}
        print(json.dumps({{"seconds": seconds, "state": str(run.state), "tasks": states,
                           "landed": land.get("landed", 0)}}))
        """,
    )


def timed_dag_runs(env: dict[str, str], home: Path, count: int, runs: int) -> list[float]:
    seconds = []
    for _ in range(runs):
        append_entries(home, count)
        run = dag_run(env)
        want = "skipped" if count == 0 else "success"
        if run["state"] != "success" or run["tasks"]["land"] != want or run["landed"] != count:
            raise SystemExit(f"a {count}-entry run did not land {count} entries: {run}")
        seconds.append(run["seconds"])
    return seconds


def export_table(env: dict[str, str], docs: int) -> None:
    """The `exports` repository-shaped table of `docs` random documents (on the server)."""
    python(
        env,
        f"""
        from bulk_bench import repository_frame
        from jobs.spark.delta.catalog import Catalog
        from jobs.spark.session import build_session
        from streamcore.config import load_config
        spark = build_session("dag-latency-bench")
        catalog = Catalog(spark, load_config())
        path = catalog.ensure("exports")
        repository_frame(spark, catalog, {docs}, seed=2).write.format("delta").mode(
            "append").save(path)
        print(json.dumps({{"rows": spark.read.format("delta").load(path).count()}}))
        """,
    )


def submit_export(env: dict[str, str]) -> str:
    return python(
        env,
        f"""
        from streamcore.bulk import BulkService
        with BulkService() as service:
            command = service.submit("csvExport", {QUERY!r}, {{}}, username="bench",
                                     repository="exports")
        print(json.dumps({{"command": command.command_id}}))
        """,
    )["command"]


def export_state(env: dict[str, str], command: str) -> str:
    return python(
        env,
        f"""
        from streamcore.bulk import BulkService
        with BulkService() as service:
            print(json.dumps({{"state": service.status({command!r}).state.value}}))
        """,
    )["state"]


def exports_by_spark_submit(env: dict[str, str], runs: int) -> list[float]:
    """csvExport by spark-submit of jobs/bulk_action.py, as the bulk DAG's task runs it; the
    command is submitted in the timed process, as `streamcore bulk submit` does."""
    from jobs.spark.submit import submit_config

    config = submit_config()
    command_line = [str(VENV_BIN / "spark-submit"), "--master", config["master"]]
    command_line += ["--jars", config["jars"]]
    for key, value in {**config["conf"], "spark.ui.enabled": "false"}.items():
        command_line += ["--conf", f"{key}={value}"]
    seconds = []
    for _ in range(runs):
        started = time.monotonic()
        command = submit_export(env)
        subprocess.run(
            [*command_line, str(ROOT / "jobs" / "bulk_action.py"), "--command-id", command],
            env={**env, **config["env_vars"]},
            check=True,
            capture_output=True,
            timeout=900,
        )
        seconds.append(time.monotonic() - started)
        if export_state(env, command) != "COMPLETED":
            raise SystemExit(f"csvExport {command} by spark-submit did not complete")
    return seconds


def exports_on_connect(env: dict[str, str], runs: int) -> list[float]:
    """csvExport in one process on a Connect session (the bulk DAG's task on Connect), after an
    untimed one: submit to COMPLETED, each."""
    return python(
        env,
        f"""
        from jobs import bulk_action
        from jobs.spark.job import execute_job
        from streamcore.bulk import BulkService

        def export():
            started = time.monotonic()
            with BulkService() as service:
                command = service.submit("csvExport", {QUERY!r}, {{}}, username="bench",
                                         repository="exports").command_id
            summary, code = execute_job(bulk_action, ["--command-id", command])
            if code != 0 or summary.get("state") != "COMPLETED":
                raise SystemExit(f"csvExport on Connect did not complete: {{summary}}")
            return time.monotonic() - started

        export()
        print(json.dumps({{"seconds": [export() for _ in range({runs})]}}))
        """,
    )["seconds"]


def script(name: str, env: dict[str, str], *args: str) -> None:
    done = subprocess.run(
        [str(ROOT / "scripts" / name), *args], env=env, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"scripts/{name} {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per case (median; default 3)")
    parser.add_argument("--records", type=int, default=1_000, help="entries of the big batch")
    parser.add_argument("--export-docs", type=int, default=2_000, help="csvExport documents")
    parser.add_argument("--master", default="local[*]", help="master of both ways (local[*])")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    if min(args.runs, args.records, args.export_docs) < 1:
        parser.error("--runs, --records and --export-docs must be positive")

    work = Path(tempfile.mkdtemp(prefix="dag-latency-bench-"))
    home = work / "home"
    port = free_port()
    connect = f"sc://127.0.0.1:{port}"
    base = {
        **os.environ,
        "STREAMCORE_HOME": str(home),
        "AIRFLOW_HOME": str(work / "airflow"),
        "STREAMCORE_AIRFLOW_PORT": str(free_port()),
        "STREAMCORE_SPARK_MASTER": args.master,
        "STREAMCORE_SPARK_CONNECT_PORT": str(port),
        "STREAMCORE_SPARK_CONNECT_HOME": str(work / "spark-connect"),
        "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYSPARK_PYTHON": str(VENV_BIN / "python"),
    }
    os.environ["STREAMCORE_HOME"] = str(home)
    ways = {
        "spark-submit": {"conn_type": "spark", "host": args.master},
        "Spark Connect": {"conn_type": "spark", "host": connect},
    }
    envs = {way: {**base, "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps(c)} for way, c in ways.items()}
    cases = {"empty": 0, "1 entry": 1, f"{args.records:,} entries": args.records}
    latency: dict[str, dict[str, list[float]]] = {}
    exports: dict[str, list[float]] = {}
    try:
        say(f"setup: airflow.sh init and a Spark Connect server on {connect} ({work})")
        script("airflow.sh", base, "init")
        script("spark-connect.sh", base, "start")
        for way, env in envs.items():
            say(f"{way}: an untimed 1-entry run")
            timed_dag_runs(env, home, 1, 1)
            latency[way] = {}
            for case, count in cases.items():
                say(f"{way}: {args.runs} DAG runs, {case}")
                latency[way][case] = timed_dag_runs(env, home, count, args.runs)
        say(f"csvExport: a table of {args.export_docs:,} documents")
        remote = {**base, "STREAMCORE_SPARK_REMOTE": connect}
        export_table(remote, args.export_docs)
        say(f"csvExport: {args.runs} runs by spark-submit")
        exports["spark-submit"] = exports_by_spark_submit(base, args.runs)
        say(f"csvExport: {args.runs} runs on Spark Connect")
        exports["Spark Connect"] = exports_on_connect(remote, args.runs)
    finally:
        subprocess.run([str(ROOT / "scripts" / "spark-connect.sh"), "stop"], env=base, check=False)
        shutil.rmtree(work, ignore_errors=True)

    result = report(args, latency, exports)
    if args.json:
        print(json.dumps(result))
    else:
        print_report(result)
    return 0


def print_report(result: dict[str, Any]) -> None:
    rows = [
        (case, r["spark-submit"], r["Spark Connect"], r["ratio"])
        for case, r in result["dag_runs"].items()
    ]
    print(render_table(["audit DAG run (median s)", "spark-submit", "Connect", "ratio"], rows))
    empty = result["dag_runs"]["empty"]["Spark Connect"]
    verdict = "met" if empty < TARGET_EMPTY_S else "MISSED"
    print(f"\nempty micro-batch on Connect: {empty:.2f} s (target < {TARGET_EMPTY_S} s): {verdict}")
    docs, seconds = NUXEO_EXPORT
    export_rows = [
        (f"{way} (median)", found["documents"], found["median"], found["best"])
        for way, found in result["csvExport"].items()
    ]
    export_rows.append(("Nuxeo's example (reference)", docs, seconds, seconds))
    print()
    headers = ["csvExport, submit to COMPLETED", "documents", "median s", "best s"]
    print(render_table(headers, export_rows))


def report(
    args: argparse.Namespace,
    latency: dict[str, dict[str, list[float]]],
    exports: dict[str, list[float]],
) -> dict[str, Any]:
    dag_runs = {}
    for case in latency["spark-submit"]:
        submit = statistics.median(latency["spark-submit"][case])
        remote = statistics.median(latency["Spark Connect"][case])
        dag_runs[case] = {
            "spark-submit": round(submit, 2),
            "Spark Connect": round(remote, 2),
            "ratio": round(submit / remote, 2),
            "runs": {way: [round(s, 2) for s in latency[way][case]] for way in latency},
        }
    return {
        "master": args.master,
        "runs": args.runs,
        "records": args.records,
        "dag_runs": dag_runs,
        "target_empty_s": TARGET_EMPTY_S,
        "csvExport": {
            way: {
                "documents": args.export_docs,
                "median": round(statistics.median(found), 2),
                "best": round(min(found), 2),
                "runs": [round(s, 2) for s in found],
            }
            for way, found in exports.items()
        },
        "nuxeo_csvExport": {"documents": NUXEO_EXPORT[0], "seconds": NUXEO_EXPORT[1]},
    }


if __name__ == "__main__":
    sys.exit(main())
