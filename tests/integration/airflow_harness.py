"""A throw-away Airflow for tests: its own AIRFLOW_HOME (made by `scripts/airflow.sh init`), real
processes, and a reader of Delta tables that does not use Spark.

Airflow reads its configuration once at import, so everything that imports airflow runs in a
subprocess with the test environment; the pytest process never imports it.
"""

from __future__ import annotations

import atexit
import configparser
import contextlib
import json
import os
import shlex
import signal
import socket
import subprocess
import textwrap
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq
from postgres_server import ensure_postgres

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = ROOT / ".venv" / "bin"
DAGS = ROOT / "dags"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class AirflowEnv:
    home: Path
    streamcore_home: Path
    port: int
    password: str = "streamcore-test"
    env: dict[str, str] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def make_airflow_env(home: Path, streamcore_home: Path) -> AirflowEnv:
    """AIRFLOW_HOME at `home` set up by scripts/airflow.sh init (config, its own migrated
    database on the test session's PostgreSQL server, connection spark_default). The database is
    dropped when the test process exits."""
    ensure_postgres()  # started by the session (and stopped at its end) rather than by the script
    af = AirflowEnv(home=home, streamcore_home=streamcore_home, port=free_port())
    af.env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "STREAMCORE_HOME": str(streamcore_home),
        "STREAMCORE_AIRFLOW_PORT": str(af.port),
        "STREAMCORE_AIRFLOW_PASSWORD": af.password,
        "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYSPARK_PYTHON": str(VENV_BIN / "python"),
    }
    af.env.pop("PYTEST_CURRENT_TEST", None)
    # Each home gets a database of its own (named after it), dropped at exit: never a database
    # a shell's environment names (the cluster's, after `eval "$(scripts/cluster.sh env)"`).
    for name in ("STREAMCORE_AIRFLOW_DB_URL", "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"):
        af.env.pop(name, None)
    done = subprocess.run(
        [str(ROOT / "scripts" / "airflow.sh"), "init"],
        env=af.env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"airflow.sh init failed:\n{done.stdout}\n{done.stderr}"
    atexit.register(_drop_database, metadata_db_url(af))
    return af


def metadata_db_url(af: AirflowEnv) -> str:
    """The metadata database URL scripts/airflow.sh wrote into the home's airflow.cfg."""
    config = configparser.ConfigParser(interpolation=None)
    config.read(af.home / "airflow.cfg")
    return config["database"]["sql_alchemy_conn"]


def _drop_database(url: str) -> None:
    """Drops the database of `url`, closing what still uses it (an Airflow process killed without
    its children): each test home's database would otherwise stay on the shared server."""
    import psycopg
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    with (
        contextlib.suppress(psycopg.Error),
        psycopg.connect(
            host=parsed.host,
            port=parsed.port,
            user=parsed.username,
            password=parsed.password,
            dbname="postgres",
            autocommit=True,
        ) as conn,
    ):
        conn.execute(f'DROP DATABASE IF EXISTS "{parsed.database}" WITH (FORCE)')


def run_python(af: AirflowEnv, code: str, timeout: float = 900) -> Any:
    """Runs `code` in a fresh interpreter with the Airflow environment; the code prints its result
    as JSON (an object, a list, a number...), the last line of stdout that parses as JSON: the
    OpenLineage provider may log the DAG run's COMPLETE event after it, from its own process."""
    prelude = f"import json, sys\nsys.path.insert(0, {str(DAGS)!r})\n"
    done = subprocess.run(
        [str(VENV_BIN / "python"), "-c", prelude + textwrap.dedent(code)],
        env=af.env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if done.returncode == 0:
        for line in reversed(done.stdout.splitlines()):
            try:
                return json.loads(line)
            except ValueError:
                continue
    raise AssertionError(
        f"subprocess failed ({done.returncode}):\n{done.stdout[-4000:]}\n{done.stderr[-8000:]}"
    )


def dag_test(af: AirflowEnv, dag_id: str, conf: dict[str, Any]) -> dict[str, Any]:
    """One `dag.test(run_conf=conf)` of `dag_id` in a fresh interpreter: the run's state, run id
    and task states, or `{"rejected": message}` when the Params refuse `conf`."""
    return run_python(
        af,
        f"""
        from pathlib import Path
        from airflow.dag_processing.dagbag import BundleDagBag
        from airflow.sdk.exceptions import ParamValidationError
        folder = Path("dags").resolve()
        dag = BundleDagBag(dag_folder=folder, bundle_path=folder).dags[{dag_id!r}]
        try:
            run = dag.test(run_conf={conf!r})
        except ParamValidationError as exc:
            print(json.dumps({{"rejected": str(exc)}}))
            raise SystemExit(0)
        states = {{ti.task_id: str(ti.state) for ti in run.get_task_instances()}}
        print(json.dumps({{"state": str(run.state), "run_id": run.run_id, "tasks": states}}))
        """,
    )


class AirflowServices:
    """api-server, scheduler and dag-processor as separate processes, each in its own process
    group (task runners and their spark-submit JVMs are children of the scheduler's group)."""

    def __init__(self, af: AirflowEnv) -> None:
        self.af = af
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, timeout: float = 180) -> None:
        for name in ("api-server", "scheduler", "dag-processor"):
            with open(self.af.home / "logs" / f"{name}.log", "ab") as log:
                self.processes[name] = subprocess.Popen(
                    [str(VENV_BIN / "airflow"), name],
                    env=self.af.env,
                    cwd=ROOT,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, proc in self.processes.items():
                if proc.poll() is not None:
                    raise AssertionError(
                        f"airflow {name} exited with {proc.returncode}: {self.tail(name)}"
                    )
            health = self.health()
            if health and health.get("scheduler", {}).get("status") == "healthy":
                return
            time.sleep(1)
        raise AssertionError(f"Airflow not healthy after {timeout} s: {self.health()}")

    def health(self) -> dict[str, Any] | None:
        try:
            with urllib.request.urlopen(f"{self.af.url}/api/v2/monitor/health", timeout=3) as r:
                return json.load(r)
        except (urllib.error.URLError, OSError, ValueError):
            return None

    def tail(self, name: str, chars: int = 3000) -> str:
        return (self.af.home / "logs" / f"{name}.log").read_text(errors="replace")[-chars:]

    def stop(self) -> None:
        for proc in self.processes.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        for proc in self.processes.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        for proc in self.processes.values():
            # Task runners and spark-submit may outlive their parent in the group.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)


@contextlib.contextmanager
def spark_connect(af: AirflowEnv, folder: Path, master: str = "local[2]") -> Iterator[str]:
    """A Spark Connect server of scripts/spark-connect.sh for `af` (same STREAMCORE_HOME, a free
    port, state under `folder`, executors on `master`), named by `af.env`'s `spark_default`
    while it runs: the job tasks of `dag.test()` and of the scheduler's task runners are then
    thin clients of it, without a spark-submit JVM start each (docs/spark-connect.md). Yields
    its URL; stopped after."""
    port = free_port()
    url = f"sc://127.0.0.1:{port}"
    env = {
        **af.env,
        "STREAMCORE_SPARK_CONNECT_PORT": str(port),
        "STREAMCORE_SPARK_CONNECT_HOME": str(folder),
        "STREAMCORE_SPARK_MASTER": master,
        "STREAMCORE_SPARK_DRIVER_MEMORY": "2g",
        # The script's 60 s assume an idle machine: at load 25 the server took longer to answer.
        "STREAMCORE_SPARK_START_TIMEOUT": "300",
    }
    script = [str(ROOT / "scripts" / "spark-connect.sh")]
    started = subprocess.run(
        [*script, "start"], env=env, capture_output=True, text=True, timeout=400
    )
    saved = af.env.get("AIRFLOW_CONN_SPARK_DEFAULT")
    try:
        assert started.returncode == 0, f"spark-connect.sh start:\n{started.stdout}{started.stderr}"
        af.env["AIRFLOW_CONN_SPARK_DEFAULT"] = json.dumps({"conn_type": "spark", "host": url})
        yield url
    finally:
        if saved is None:
            af.env.pop("AIRFLOW_CONN_SPARK_DEFAULT", None)
        else:
            af.env["AIRFLOW_CONN_SPARK_DEFAULT"] = saved
        subprocess.run([*script, "stop"], env=env, capture_output=True, text=True, timeout=120)


@contextlib.contextmanager
def airflow_on_connect(tmp: Any) -> Iterator[AirflowEnv]:
    """A fresh Airflow home (`make_airflow_env`, folders from pytest's `tmp_path_factory` `tmp`)
    whose job tasks run on its own Spark Connect server (`spark_connect`) until the block ends."""
    af = make_airflow_env(tmp.mktemp("airflow-home"), tmp.mktemp("sc-home"))
    with spark_connect(af, tmp.mktemp("spark-connect")):
        yield af


class RestClient:
    """The REST API v2 with a JWT from POST /auth/token."""

    def __init__(self, af: AirflowEnv) -> None:
        self.af = af
        self.token = self._request(
            "POST", "/auth/token", {"username": "admin", "password": af.password}, auth=False
        )[1]["access_token"]

    def _request(
        self, method: str, path: str, body: Any = None, auth: bool = True
    ) -> tuple[int, Any]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if auth:
            headers["Authorization"] = f"Bearer {self.token}"
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.af.url + path, data=data, headers=headers, method=method
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as r:
                return r.status, json.load(r)
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"null")

    def get(self, path: str) -> tuple[int, Any]:
        return self._request("GET", path)

    def post(self, path: str, body: Any) -> tuple[int, Any]:
        return self._request("POST", path, body)

    def patch(self, path: str, body: Any) -> tuple[int, Any]:
        return self._request("PATCH", path, body)


def delta_active_files(table: Path) -> list[Path]:
    """The data files of the latest version of a Delta table, by replaying `_delta_log/*.json`
    (add/remove actions in commit order). Deletion vectors are not applied here, so a table
    using them is refused rather than misread."""
    active: dict[str, bool] = {}
    commits = sorted((table / "_delta_log").glob("*.json"))
    assert commits, f"no Delta log in {table}"
    for commit in commits:
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            if "add" in action:
                assert not action["add"].get("deletionVector"), "deletion vectors are not supported"
                active[action["add"]["path"]] = True
            elif "remove" in action:
                active.pop(action["remove"]["path"], None)
    return [table / unquote(p) for p in active]


def read_delta(table: Path, columns: list[str] | None = None) -> pa.Table:
    files = delta_active_files(table)
    if not files:
        return pa.table({})
    return pa.concat_tables(pq.read_table(f, columns=columns) for f in files)


def latest_delta_version(table: Path) -> int:
    return max(int(p.stem) for p in (table / "_delta_log").glob("*.json"))


def _manager(streamcore_home: Path, config: Any) -> Any:
    """The log manager of `config`, else of the local log under `streamcore_home`."""
    from streamcore.config import LogDefaults, StreamcoreConfig
    from streamcore.log import open_log_manager

    config = config or StreamcoreConfig(home=streamcore_home, log=LogDefaults())
    return open_log_manager(config), config


def log_documents(
    streamcore_home: Path, stream: str = "import/docs", config: Any = None
) -> list[dict[str, Any]]:
    """Every Document in `stream`, decoded by streamcore's own codecs (Record envelope, then the
    Avro single-object payload): what the producer wrote, independently of Spark. `config`: the
    configuration whose logs to read (default: the local log under `streamcore_home`)."""
    from streamcore.codecs import get_codec
    from streamcore.log import LogPartition

    manager, config = _manager(streamcore_home, config)
    envelope = get_codec("avro", config=config)
    document = get_codec("avro", "org.streamcore.importer.Document", config=config)
    docs = []
    try:
        for partition, end in enumerate(manager.end_offsets(stream)):
            for offset in range(end):
                found = manager.record_at(LogPartition.of(stream, partition), offset)
                assert found is not None, f"{stream}-{partition}:{offset} is missing"
                record = envelope.decode(found[1])
                doc = document.decode(record.data)
                assert record.key == doc["id"], (record.key, doc["id"])
                docs.append(doc)
    finally:
        manager.close()
    return docs


def group_positions(
    streamcore_home: Path, group: str, stream: str = "import/docs", config: Any = None
) -> list[Any]:
    manager, _ = _manager(streamcore_home, config)
    try:
        return [manager.committed(stream, group), manager.end_offsets(stream)]
    finally:
        manager.close()


def assert_imported(streamcore_home: Path, consumed: dict[str, Any], config: Any = None) -> None:
    """The Delta `repository` table, read without Spark, holds exactly the documents of the log
    (ids and titles), once each; the quarantine has the rest; the group's positions reached the
    end; the summary's counts and version are the table's. `config`: whose logs (default: the
    local log under `streamcore_home`)."""
    docs = log_documents(streamcore_home, config=config)
    assert docs, "the producer wrote nothing"
    table = read_delta(streamcore_home / "delta" / "repository", ["id", "title"])
    ids = table.column("id").to_pylist()
    assert len(ids) == len(set(ids)), "duplicate ids in repository"
    quarantined: set[str] = set()
    if consumed["quarantined"]:
        q = read_delta(streamcore_home / "delta" / "quarantine")
        quarantined = {i for i in q.column("id").to_pylist() if i is not None}
    assert set(ids) | quarantined == {d["id"] for d in docs}
    assert len(ids) == consumed["imported"]
    assert consumed["read"] == len(docs) == consumed["imported"] + consumed["quarantined"]
    titles = dict(zip(ids, table.column("title").to_pylist(), strict=True))
    assert all(titles[d["id"]] == d["title"] for d in docs if d["id"] in titles)
    assert consumed["delta_version"] == latest_delta_version(
        streamcore_home / "delta" / "repository"
    )
    committed, end = group_positions(streamcore_home, "import/repository", config=config)
    assert committed == end, f"positions {committed} did not reach the end {end}"


def parse_exports(text: str) -> dict[str, str]:
    """The variables of `export NAME=VALUE` lines (`scripts/cluster.sh env`), values unquoted as
    the shell would."""
    pairs = (line.removeprefix("export ").split("=", 1) for line in text.splitlines())
    return {name: shlex.split(value)[0] if value else "" for name, value in pairs}
