"""`make airflow` / `make airflow-stop`: scripts/airflow.sh starts `airflow standalone` detached,
prints how to log in, serves tokens, and its stop ends every process of the group."""

from __future__ import annotations

import os
import subprocess
import time
import urllib.request

import pytest
from airflow_harness import ROOT, AirflowEnv, make_airflow_env

pytestmark = pytest.mark.airflow

SCRIPT = str(ROOT / "scripts" / "airflow.sh")


def script(af: AirflowEnv, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SCRIPT, *args], env=af.env, capture_output=True, text=True, timeout=timeout
    )


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_start_token_status_and_stop_of_the_whole_group(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    af = make_airflow_env(tmp_path_factory.mktemp("airflow-home"), tmp_path_factory.mktemp("sc"))
    started = script(af, "start")
    pgid = None
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        assert f"log in as admin / {af.password}" in started.stdout
        pgid = int((af.home / "standalone.pid").read_text())
        assert os.getpgid(pgid) == pgid  # standalone leads its own group
        assert script(af, "status").returncode == 0
        token = script(af, "token")
        assert token.returncode == 0, token.stderr
        request = urllib.request.Request(
            f"{af.url}/api/v2/dags?dag_id_pattern=streamcore",
            headers={"Authorization": f"Bearer {token.stdout.strip()}"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 200
        members = subprocess.run(
            ["pgrep", "-g", str(pgid)], capture_output=True, text=True
        ).stdout.split()
        assert len(members) >= 4, members  # standalone, api-server, scheduler, dag-processor...
        assert "already running" in script(af, "start").stdout
    finally:
        stopped = script(af, "stop")
    assert stopped.returncode == 0, stopped.stderr
    assert pgid is not None
    deadline = time.monotonic() + 5
    while group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not group_alive(pgid), "processes of the standalone group survived stop"
    assert script(af, "status").returncode == 3
