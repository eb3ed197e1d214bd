"""The asset graph of `repository` in the Airflow UI (headless Debian chromium, Playwright): the
tasks that write the table (the importer's consume, the bulk action's run) and read it (the
report DAG's task, scheduled on it), as the dag-processor registered them from dags/. No run and
no Spark: the graph is the DAG files' declared inlets, outlets and schedules. The screenshot goes
to the artifacts folder (docs/images/airflow-asset-graph.png is one)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from airflow_harness import AirflowEnv, AirflowServices, RestClient, make_airflow_env
from chromium import headless
from playwright.sync_api import expect

pytestmark = [pytest.mark.airflow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def af(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirflowEnv]:
    """api-server, scheduler and dag-processor, once the dag-processor has parsed the report
    DAG (its assets are registered with it)."""
    af = make_airflow_env(tmp_path_factory.mktemp("airflow-home"), tmp_path_factory.mktemp("sc"))
    services = AirflowServices(af)
    try:
        services.start()
        rest = RestClient(af)
        deadline = time.monotonic() + 300
        while rest.get("/api/v2/dags/streamcore_repository_report")[0] != 200:
            assert time.monotonic() < deadline, services.tail("dag-processor")
            time.sleep(1)
        yield af
    finally:
        services.stop()


def test_the_repository_asset_graph(chromium: Path, artifacts: Path, af: AirflowEnv) -> None:
    status, body = RestClient(af).get("/api/v2/assets?name_pattern=repository")
    assert status == 200, body
    [asset] = [a for a in body["assets"] if a["name"] == "repository"]
    assert asset["uri"] == (af.streamcore_home / "delta" / "repository").as_uri()
    assert {r["dag_id"] for r in asset["scheduled_dags"]} == {"streamcore_repository_report"}
    producers = {(r["dag_id"], r["task_id"]) for r in asset["producing_tasks"]}
    assert producers >= {("streamcore_importer", "consume"), ("streamcore_bulk_action", "run")}
    with headless(chromium, 900) as context:
        page = context.pages[0] if context.pages else context.new_page()
        page.set_default_timeout(120_000)
        page.goto(f"{af.url}/assets/{asset['id']}")
        page.wait_for_url("**/auth/login**")
        page.locator("input[name=username]").fill("admin")
        page.locator("input[name=password]").fill(af.password)
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url(f"{af.url}/assets/{asset['id']}")
        # The task view: the tasks writing the table and those reading it. (The
        # "Scheduling" view's request fails on PostgreSQL in Airflow 3.3.2, HTTP 500 from
        # SerializedDagModel.get_dag_dependencies.)
        page.get_by_role("button", name="Task Dependencies").click()
        graph = page.locator(".react-flow")
        expect(graph.get_by_text("consume").first).to_be_visible()
        expect(graph.get_by_text("report").first).to_be_visible()
        page.screenshot(path=str(artifacts / "asset-graph-repository.png"))
