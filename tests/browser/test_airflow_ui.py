"""The Airflow UI in a real browser (headless Debian chromium driven by Playwright), against one
`scripts/airflow.sh start` with its own AIRFLOW_HOME and STREAMCORE_HOME: log in through the
streamcore plugin's login guard; trigger the importer from its Params form and see the run succeed;
from the run page, one click each to its summary and to its Great Expectations Data Docs, styled by
the local copies of their CDN assets; a bulk action triggered the same way; a backfill of the
audit DAG created in the UI's Backfill dialog. The job tasks run on a Spark Connect server of the
module's own (no JVM start per task), as every run record must say. Every request to another host
is blocked and fails the test (the Data Docs must render offline). Screenshots go to the
artifacts folder."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from airflow_harness import (
    ROOT,
    VENV_BIN,
    AirflowEnv,
    RestClient,
    free_port,
    make_airflow_env,
)
from audit_support import append_entries, entry
from chromium import headless
from playwright.sync_api import BrowserContext, Page, Request, Route, expect
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

from streamcore.config import load_config

pytestmark = [pytest.mark.airflow, pytest.mark.spark, pytest.mark.timeout(900)]
# The UI's own requests (a trigger's POST, a page's API calls) took over 5 s, Playwright's default,
# on the 2-core machine under the rest of the suite.
expect.set_options(timeout=60_000)

RUN_TIMEOUT_MS = 600_000  # a DAG run on a loaded 2-core machine: 1 to 2 min, with margin
# A click on a form's button sends its request at once; none within this time: the page dropped it.
CLICK_SENDS_MS = 30_000
CLICK_ATTEMPTS = 3
COUNT = 2000
# The audit DAG runs daily here (STREAMCORE_AUDIT_SCHEDULE): its default, every 5 minutes, would
# start scheduled batch runs during the module, and those land every entry, ahead of the backfill.
# Its tick is 12 hours from now, so no scheduled run starts while the module runs (a tick at
# midnight did, in a run that crossed it).
_NOW = datetime.now(UTC)
_HOUR = (_NOW.hour + 12) % 24
AUDIT_SCHEDULE = f"0 {_HOUR} * * *"
SLOT = timedelta(days=1)
_LATEST_TICK = _NOW.replace(hour=_HOUR, minute=0, second=0, microsecond=0)
if _LATEST_TICK > _NOW:
    _LATEST_TICK -= SLOT
# Three slots ending the day before the latest tick: the scheduled run of that tick covers the
# day before it, and the backfill's "missing runs" must not include it.
T0 = _LATEST_TICK - 4 * SLOT


def script(name: str, action: str, env: dict[str, str]) -> subprocess.Popen[str]:
    """`scripts/<name>.sh <action>` running in the background, its output captured."""
    return subprocess.Popen(
        [str(ROOT / "scripts" / f"{name}.sh"), action],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finished(process: subprocess.Popen[str], what: str, timeout: float) -> None:
    """Waits for `process`; a failure or a timeout fails the test with its output."""
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
        pytest.fail(f"{what} took over {timeout:.0f} s:\n{output}", pytrace=False)
    assert process.returncode == 0, f"{what} failed (exit {process.returncode}):\n{output}"


@pytest.fixture(scope="module")
def af(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AirflowEnv]:
    """One `scripts/airflow.sh start` whose job tasks run on a Spark Connect server of the
    module's own: under spark-submit each task paid a 15-25 s JVM start. The server starts first,
    its JVM coming up while Airflow migrates and starts, with the same STREAMCORE_HOME (its Python
    workers read that home's logs); both are stopped after the module."""
    streamcore_home = tmp_path_factory.mktemp("ui-streamcore")
    port = free_port()
    connect_env = os.environ | {
        "STREAMCORE_HOME": str(streamcore_home),
        "STREAMCORE_SPARK_CONNECT_PORT": str(port),
        "STREAMCORE_SPARK_CONNECT_HOME": str(tmp_path_factory.mktemp("ui-spark-connect")),
        "STREAMCORE_SPARK_MASTER": "local[2]",
        "STREAMCORE_SPARK_DRIVER_MEMORY": "2g",
        # Its JVM starts beside Airflow's migration and start on 2 cores shared with others: more
        # than the default 60 s, so a slow start is not mistaken for a broken one.
        "STREAMCORE_SPARK_START_TIMEOUT": "240",
    }
    starts = {"spark-connect.sh start": script("spark-connect", "start", connect_env)}
    stop_envs = {"spark-connect": connect_env}
    try:
        env = make_airflow_env(tmp_path_factory.mktemp("ui-airflow"), streamcore_home)
        env.env |= {
            "STREAMCORE_AUDIT_SCHEDULE": AUDIT_SCHEDULE,
            # The task processes inherit it from the standalone, and the environment's
            # connection wins over the `spark_default` (local[*]) init registered in the database.
            "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps(
                {"conn_type": "spark", "host": f"sc://127.0.0.1:{port}"}
            ),
        }
        stop_envs["airflow"] = env.env
        starts["airflow.sh start"] = script("airflow", "start", env.env)
        finished(starts["airflow.sh start"], "airflow.sh start", 400)
        finished(starts["spark-connect.sh start"], "spark-connect.sh start", 300)
        yield env
    finally:
        for process in starts.values():  # a start cut short: stop cleans up what it began
            if process.poll() is None:
                process.kill()
                process.wait()
        stops = {name: script(name, "stop", environ) for name, environ in stop_envs.items()}
        outputs = {name: stop.communicate(timeout=120)[0] for name, stop in stops.items()}
        for name, stop in stops.items():
            assert stop.returncode == 0, f"{name}.sh stop failed:\n{outputs[name]}"


def records(af: AirflowEnv, job: str, steps: list[str]) -> list[dict[str, Any]]:
    """The job's run records, after checking that each of their steps ran on the module's Spark
    Connect server, not through a spark-submit."""
    url = json.loads(af.env["AIRFLOW_CONN_SPARK_DEFAULT"])["host"]
    found = [json.loads(p.read_text()) for p in (af.streamcore_home / "runs" / job).glob("*.json")]
    for record in found:
        for step in steps:
            where = record[step].get("spark_connect")
            assert where == url, f"{job} step {step} ran on {where or 'spark-submit'}, not {url}"
    return found


class Browser:
    """One chromium page for the module; requests to any host but Airflow's are aborted and
    recorded in `external`."""

    def __init__(self, context: BrowserContext, base: str, artifacts: Path) -> None:
        self.context, self.base, self.artifacts = context, base, artifacts
        self.external: list[str] = []
        self.shots = 0
        context.route("**/*", self._only_airflow)
        self.page: Page = context.pages[0] if context.pages else context.new_page()
        self.page.set_default_timeout(60_000)

    def _only_airflow(self, route: Route) -> None:
        url = route.request.url
        if url.startswith((self.base + "/", "data:", "blob:")):
            route.continue_()
        else:
            self.external.append(url)
            route.abort("internetdisconnected")

    def shot(self, name: str) -> Path:
        self.shots += 1
        path = self.artifacts / f"{self.shots:02d}-{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path


@pytest.fixture(scope="module")
def browser(chromium: Path, artifacts: Path, af: AirflowEnv) -> Iterator[Browser]:
    with headless(chromium, 1000) as context:
        yield Browser(context, af.url, artifacts)


@pytest.fixture(autouse=True)
def _offline(browser: Browser) -> Iterator[None]:
    yield
    assert not browser.external, f"the page requested other hosts: {browser.external}"


def trigger_form(browser: Browser, dag_id: str) -> Any:
    """The DAG page's Trigger dialog, open on its Run Parameters."""
    page = browser.page
    page.goto(f"{browser.base}/dags/{dag_id}")
    trigger = page.get_by_test_id("trigger-dag-button")
    expect(trigger).to_be_enabled()
    trigger.click()
    dialog = page.get_by_role("dialog")
    expect(dialog.get_by_text("Run Parameters")).to_be_visible()
    return dialog


def send(page: Page, button: Any, path: str) -> None:
    """Click a form's button until the UI sends its POST to the API's `path`, then check the
    answer.

    A click that the page drops sends no request, so nothing was created and clicking again cannot
    create it twice; a click that sent one is never repeated, however long the loaded api-server
    takes to answer (over 60 s in CI). Twice a CI run kept the bulk form open after the click."""

    def is_post(request: Request) -> bool:
        return request.method == "POST" and request.url.endswith(f"/api/v2{path}")

    for _ in range(CLICK_ATTEMPTS):
        expect(button).to_be_enabled()
        try:
            with page.expect_request(is_post, timeout=CLICK_SENDS_MS) as sent:
                button.click()
        except PlaywrightTimeoutError:
            continue
        response = sent.value.response()
        assert response is not None, f"POST {path} got no answer"
        assert response.ok, f"POST {path}: HTTP {response.status} {response.text()}"
        return
    pytest.fail(f"{CLICK_ATTEMPTS} clicks sent no POST {path}", pytrace=False)


def submit_and_wait(browser: Browser, dialog: Any, dag_id: str, name: str) -> str:
    """Trigger, follow to the run page, wait until the run succeeded; the run id."""
    page = browser.page
    send(page, dialog.get_by_test_id("trigger-dag-submit"), f"/dags/{dag_id}/dagRuns")
    expect(dialog).to_be_hidden()  # the run exists: the form closes on the API's answer
    page.wait_for_url(re.compile(rf"/dags/{dag_id}/runs/[^/]+$"))
    run_id = page.url.rsplit("/", 1)[1]
    state = page.get_by_test_id("header-card").get_by_test_id("state-badge")
    expect(state).to_have_text(re.compile("success|failed", re.I), timeout=RUN_TIMEOUT_MS)
    browser.shot(f"{name}-run")
    assert state.inner_text().strip().lower() == "success", f"{dag_id} run {run_id} failed"
    return run_id


def test_plugin_pages_need_the_airflow_login(browser: Browser, af: AirflowEnv) -> None:
    page = browser.page
    page.goto(f"{af.url}/streamcore/data-docs/local_site/index.html")
    page.wait_for_url(re.compile(r"/auth/login"))
    browser.shot("login")
    page.locator("input[name=username]").fill("admin")
    page.locator("input[name=password]").fill(af.password)
    page.get_by_role("button", name="Sign in").click()
    # The login sends the browser back to the page it asked for (no Data Docs yet: 404).
    page.wait_for_url(f"{af.url}/streamcore/data-docs/local_site/index.html")
    assert "no Data Docs page" in page.content()
    # An API client: 401 without a token, served with one from POST /auth/token.
    url = f"{af.url}/streamcore/runs/streamcore_importer/none/json"
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(url, timeout=30)
    assert refused.value.code == 401
    token = RestClient(af).token
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(
            urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"}), timeout=30
        )
    assert missing.value.code == 404  # logged in; that run has no record


def test_importer_run_with_its_summary_and_data_docs(browser: Browser, af: AirflowEnv) -> None:
    page = browser.page
    dialog = trigger_form(browser, "streamcore_importer")
    count = dialog.get_by_role("spinbutton", name="Documents")
    count.fill(str(COUNT))
    count.press("Tab")  # the form takes the value on blur
    expect(count).to_have_value(str(COUNT))
    browser.shot("importer-trigger-form")
    run_id = submit_and_wait(browser, dialog, "streamcore_importer", "importer")
    (record,) = records(af, "importer", ["produce", "consume"])
    assert record["run_id"] == urllib.parse.unquote(run_id)

    page.get_by_role("tab", name="Run summary").or_(page.get_by_text("Run summary")).first.click()
    summary = page.frame_locator("iframe").locator("#report")
    expect(summary).to_contain_text(re.compile(rf"documents inserted\s+{COUNT:,}"))
    browser.shot("importer-summary")

    page.get_by_role("tab", name="Data Docs").or_(page.get_by_text("Data Docs")).first.click()
    docs = page.frame_locator("iframe")
    expect(docs.locator("body")).to_contain_text("Document")
    # The run's own validation page, served under the run (the plugin shows no other DAG's).
    frame = next(f for f in page.frames if "/data-docs/local_site/" in f.url)
    assert "/streamcore/runs/streamcore_importer/" in frame.url, frame.url
    assert "/validations/" in frame.url, frame.url
    # Styled by the local bootstrap: its .card has a border radius (0px unstyled), its stylesheet
    # loaded with its rules, every stylesheet came from this server and none is reported missing.
    styles = frame.evaluate(
        """() => ({
            radius: getComputedStyle(document.querySelector('.card')).borderTopLeftRadius,
            sheets: [...document.styleSheets].map(s => s.href).filter(Boolean),
            bootstrapRules: [...document.styleSheets].filter(s => (s.href || '').includes(
                '/streamcore/assets/npm/bootstrap@')).map(s => s.cssRules.length),
            missing: document.querySelectorAll('.streamcore-missing-assets').length,
        })"""
    )
    assert styles["radius"] not in ("", "0px"), styles
    assert styles["bootstrapRules"] and styles["bootstrapRules"][0] > 100, styles
    assert all(h.startswith(f"{af.url}/streamcore/") for h in styles["sheets"]), styles
    assert styles["missing"] == 0, styles
    browser.shot("importer-data-docs")


def test_bulk_action_from_the_form(browser: Browser, af: AirflowEnv) -> None:
    dialog = trigger_form(browser, "streamcore_bulk_action")
    action = dialog.get_by_role("combobox").first
    action.click()
    browser.page.get_by_role("option", name="csvExport", exact=True).click()
    expect(dialog.get_by_text("csvExport", exact=True)).to_be_visible()
    # The option list closes with an animation; a click while it is open only dismisses it.
    expect(browser.page.locator("[role=listbox]:visible")).to_have_count(0)
    browser.shot("bulk-trigger-form")
    run_id = submit_and_wait(browser, dialog, "streamcore_bulk_action", "bulk")
    (record,) = records(af, "bulk_action", ["run"])
    assert record["run_id"] == urllib.parse.unquote(run_id)
    run = record["run"]
    assert (run["state"], run["processed"]) == ("COMPLETED", run["total"]), run
    assert run["total"] > 0, "no imported Note was exported"
    # The export, read back with the csv module: a header, then one row per document, sorted.
    with zipfile.ZipFile(run["result"]["url"]) as archive:
        (name,) = archive.namelist()
        rows = list(csv.reader(io.StringIO(archive.read(name).decode(), newline="")))
    ids = [row[rows[0].index("id")] for row in rows[1:]]
    assert len(ids) == run["total"] and ids == sorted(ids), rows[:3]
    shown = subprocess.run(
        [str(VENV_BIN / "streamcore"), "bulk", "status", run["command_id"], "--json"],
        env=af.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["state"] == "COMPLETED"


def pick(dialog: Any, page: Page, index: int, when: datetime) -> None:
    """Set the `index`-th date-time input of the dialog (a popover with Date and Time, UTC)."""
    dialog.get_by_test_id("datetime-input").nth(index).click()
    popover = page.locator("[data-scope=popover][data-part=content][data-state=open]")
    popover.get_by_placeholder("YYYY/MM/DD").fill(when.strftime("%Y/%m/%d"))
    popover.get_by_placeholder("HH:mm").fill(when.strftime("%H:%M"))
    page.keyboard.press("Escape")
    expect(popover).to_have_count(0)


def wait_for_runs(rest: RestClient, run_type: str, count: int) -> list[dict[str, Any]]:
    """The audit DAG's `count` runs of `run_type`, once all have ended."""
    deadline = time.monotonic() + RUN_TIMEOUT_MS / 1000
    while True:
        _, body = rest.get(f"/api/v2/dags/streamcore_audit/dagRuns?run_type={run_type}")
        runs = body["dag_runs"]
        if len(runs) == count and all(r["state"] in ("success", "failed") for r in runs):
            return runs
        assert time.monotonic() < deadline, f"{run_type} runs not done: {runs}"
        time.sleep(3)


def test_audit_backfill_from_the_ui(browser: Browser, af: AirflowEnv) -> None:
    page = browser.page
    rest = RestClient(af)
    # Unpaused (a paused DAG's backfill runs never start), the DAG runs its latest scheduled
    # interval in batch mode at once: with the log still empty, that run has nothing to land.
    append_entries([], load_config(home=af.streamcore_home))
    page.goto(f"{af.url}/dags/streamcore_audit")
    page.get_by_test_id("toggle-pause").click()
    expect(page.get_by_test_id("toggle-pause")).to_have_attribute("data-state", "checked")
    (scheduled,) = wait_for_runs(rest, "scheduled", 1)
    assert scheduled["state"] == "success", scheduled
    # 12 entries in each of 3 daily slots from T0.
    entries = [entry(n, event_date=T0 + n * SLOT / 12) for n in range(36)]
    append_entries(entries, load_config(home=af.streamcore_home))

    dialog = trigger_form(browser, "streamcore_audit")
    dialog.get_by_text("Backfill", exact=True).click()
    expect(dialog.get_by_text("Date Range")).to_be_visible()
    # Runs are scheduled at the ends of their intervals: these two cover slots 1 and 2.
    pick(dialog, page, 0, T0 + 2 * SLOT)
    pick(dialog, page, 1, T0 + 3 * SLOT)
    expect(dialog.get_by_text("2 runs will be triggered")).to_be_visible()
    run = dialog.get_by_role("button", name="Run Backfill")
    expect(run).to_be_enabled()
    browser.shot("audit-backfill-form")
    send(page, run, "/backfills")
    expect(dialog).to_be_hidden()

    runs = wait_for_runs(rest, "backfill", 2)
    assert [r["state"] for r in runs] == ["success", "success"], runs
    # The scheduled run skipped its job (nothing to land) and wrote no record.
    landings = records(af, "audit", ["land"])
    assert sorted(r["run_id"] for r in landings) == sorted(r["dag_run_id"] for r in runs)
    # Each run landed its interval: the entries of slots 1 and 2, not those of slot 0.
    from deltalake import DeltaTable

    landed = DeltaTable(str(af.streamcore_home / "delta" / "audit")).to_pyarrow_table()
    assert sorted(landed.column("event_id").to_pylist()) == [f"e-{n:05d}" for n in range(12, 36)]
    page.goto(f"{af.url}/dags/streamcore_audit/runs")
    expect(page.get_by_text("backfill").first).to_be_visible()
    browser.shot("audit-backfill-runs")
