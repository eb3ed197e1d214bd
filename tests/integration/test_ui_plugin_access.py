"""Who may see which run summaries and Data Docs, asked of Airflow's own auth manager through a
real api-server: SimpleAuthManager in multi-team mode, two DAG bundles owned by two teams, and
two viewers, ann of team_a and bob of team_b. Airflow's REST API lets each read their own team's
DAG runs only; the streamcore plugin must answer the same for the run summaries, and the Data
Docs site, which holds every DAG's validations with sample values, must show each viewer their
own DAG's validations only (the whole site: to a role that may read every DAG's runs)."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from airflow_harness import VENV_BIN, AirflowEnv, AirflowServices, make_airflow_env

from streamcore.runs import record_path

pytestmark = [pytest.mark.airflow]

RUN_ID = "manual__2026-11-24T17:20:29.293168+00:00"
TEAMS = {"team_a": "team_a_dag", "team_b": "team_b_dag"}
USERS = {"ann": "team_a", "bob": "team_b"}
DAG_FILE = """
from airflow.sdk import dag, task


@dag(dag_id={dag_id!r}, schedule=None, tags=["streamcore"])
def probe():
    @task
    def noop():
        pass

    noop()


probe()
"""
SITE = Path("gx") / "gx" / "uncommitted" / "data_docs"


def page_of(dag_id: str) -> str:
    """The Data Docs page of the validation of `dag_id`'s run, relative to the site's folder."""
    return f"local_site/validations/Probe/{dag_id}-batch-1/20261124T172029/probe-frames.html"


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any) -> None:
        return None


OPENER = urllib.request.build_opener(NoRedirect)


@pytest.fixture(scope="module")
def af(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirflowEnv]:
    af = make_airflow_env(
        tmp_path_factory.mktemp("airflow-home"), tmp_path_factory.mktemp("sc-home")
    )
    bundles = []
    for team, dag_id in TEAMS.items():
        folder = tmp_path_factory.mktemp(f"bundle-{team}")
        (folder / f"{dag_id}.py").write_text(DAG_FILE.format(dag_id=dag_id))
        bundles.append(
            {
                "name": f"bundle_{team}",
                "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
                "kwargs": {"path": str(folder)},
                "team_name": team,
            }
        )
    af.env.update(
        {
            "AIRFLOW__CORE__MULTI_TEAM": "True",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": ",".join(
                ["admin:admin", *(f"{user}:viewer:{team}" for user, team in USERS.items())]
            ),
            "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": json.dumps(bundles),
        }
    )
    for team in TEAMS:
        done = subprocess.run(
            [str(VENV_BIN / "airflow"), "teams", "create", team],
            env=af.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stdout + done.stderr
    for dag_id in TEAMS.values():
        path = record_path("probe", dag_id, RUN_ID, af.streamcore_home)
        path.parent.mkdir(parents=True, exist_ok=True)
        step = {"data_docs": "index.html", "validation_run": f"{dag_id}-batch-1"}
        record = {"dag_id": dag_id, "run_id": RUN_ID, "report": f"summary of {dag_id}"}
        path.write_text(json.dumps({**record, "check": step}))
        page = af.streamcore_home / SITE / page_of(dag_id)
        page.parent.mkdir(parents=True)
        page.write_text(f"<html><body>failing values of {dag_id}: 4242</body></html>")
    (af.streamcore_home / SITE / "local_site" / "index.html").write_text("<html>all runs</html>")

    services = AirflowServices(af)
    try:
        services.start()
        admin = token(af, "admin", af.password)
        deadline = time.monotonic() + 180
        while not all(
            get(af, f"/api/v2/dags/{dag_id}", admin)[0] == 200 for dag_id in TEAMS.values()
        ):  # the dag-processor's first parse of both bundles
            assert time.monotonic() < deadline, services.tail("dag-processor")
            time.sleep(2)
        yield af
    finally:
        services.stop()


def token(af: AirflowEnv, username: str, password: str) -> str:
    request = urllib.request.Request(
        f"{af.url}/auth/token",
        data=json.dumps({"username": username, "password": password}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)["access_token"]


def get(af: AirflowEnv, path: str, bearer: str) -> tuple[int, str, str]:
    """GET `path` with the token, redirects not followed: (status, Location, body)."""
    request = urllib.request.Request(af.url + path, headers={"Authorization": f"Bearer {bearer}"})
    try:
        with OPENER.open(request, timeout=30) as response:
            return response.status, response.headers.get("Location", ""), response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Location", ""), exc.read().decode(errors="replace")


@pytest.fixture(scope="module")
def tokens(af: AirflowEnv) -> dict[str, str]:
    # SimpleAuthManager generated the viewers' passwords into the passwords file at start.
    passwords = json.loads((af.home / "passwords.json").read_text())
    return {user: token(af, user, passwords[user]) for user in ("admin", *USERS)}


@pytest.mark.timeout(900)
def test_each_viewer_sees_their_own_dags_runs_and_data_docs_only(
    af: AirflowEnv, tokens: dict[str, str]
) -> None:
    for user, team in USERS.items():
        bearer = tokens[user]
        own = TEAMS[team]
        (other,) = (dag_id for dag_id in TEAMS.values() if dag_id != own)
        # Airflow's own API scopes the runs by team: the plugin must agree with it.
        assert get(af, f"/api/v2/dags/{own}/dagRuns", bearer)[0] == 200, user
        assert get(af, f"/api/v2/dags/{other}/dagRuns", bearer)[0] == 403, user

        status, _, body = get(af, f"/streamcore/runs/{own}/{RUN_ID}", bearer)
        assert status == 200 and f"summary of {own}" in body, (user, status, body[:300])
        status, location, _ = get(af, f"/streamcore/runs/{own}/{RUN_ID}/data-docs", bearer)
        assert status == 307 and location.endswith(page_of(own)), (user, status, location)
        status, _, body = get(af, location, bearer)
        assert status == 200 and f"failing values of {own}" in body, (user, status)

        for path in (
            f"/streamcore/runs/{other}/{RUN_ID}",
            f"/streamcore/runs/{other}/{RUN_ID}/json",
            f"/streamcore/runs/{other}/{RUN_ID}/data-docs",
            f"/streamcore/runs/{other}/{RUN_ID}/data-docs/{page_of(other)}",
            f"/streamcore/runs/{own}/{RUN_ID}/data-docs/{page_of(other)}",
            f"/streamcore/data-docs/{page_of(other)}",
            f"/streamcore/data-docs/{page_of(own)}",
            "/streamcore/data-docs/local_site/index.html",
        ):
            status, _, body = get(af, path, bearer)
            assert status == 403, (user, path, status, body[:300])
            assert "failing values" not in body and "summary of" not in body

    # The admin may read every DAG's runs: the whole site.
    for dag_id in TEAMS.values():
        status, _, body = get(af, f"/streamcore/data-docs/{page_of(dag_id)}", tokens["admin"])
        assert status == 200 and f"failing values of {dag_id}" in body
    status, _, body = get(af, "/streamcore/data-docs/local_site/index.html", tokens["admin"])
    assert status == 200 and "all runs" in body
