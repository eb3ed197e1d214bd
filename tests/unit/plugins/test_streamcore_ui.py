"""The streamcore plugin's app (plugins/streamcore_ui_app.py) with FastAPI's TestClient, on a
STREAMCORE_HOME made here and the Data Docs assets that `scripts/browser.sh assets` fetched. The
app is given its login check as a dependency; Airflow's own (the JWT cookie or bearer token) is
what tests/browser exercises against a running Airflow, so here a request is logged in when it
carries the bearer token TOKEN, and user "viewer" may read only the importer's runs
(tests/integration/test_ui_plugin_access.py asks Airflow's own auth manager, through the
api-server)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fastapi import Header, HTTPException
from fastapi.testclient import TestClient

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "plugins"))

import streamcore_ui_app  # noqa: E402
import streamcore_ui_assets  # noqa: E402

from streamcore.runs import record_path  # noqa: E402

TOKEN = "token-of-ada"
AUDIT_PAGE = ("AuditEntry", "audit-batch-7")
RUN_ID = "manual__2026-11-24T17:20:29.293168+00:00"
DOCS = Path("gx") / "gx" / "uncommitted" / "data_docs" / "local_site"
PAGE = """<html><head>
<link rel="stylesheet" href="https://maxcdn.bootstrapcdn.com/bootstrap/4.3.1/css/bootstrap.min.css"/>
<script src="https://stackpath.bootstrapcdn.com/bootstrap/4.3.1/js/bootstrap.min.js"
 integrity="sha384-x" crossorigin="anonymous"></script>
<script src="https://cdn.jsdelivr.net/npm/vega@5"></script>
<script src="https://cdn.example.org/unknown.js"></script>
</head><body><img src="https://great-expectations-web-assets.s3.us-east-2.amazonaws.com/logo-long.png?d=1">
<a href="https://greatexpectations.io">GX</a></body></html>"""


@pytest.fixture(scope="module")
def assets() -> Path:
    done = subprocess.run(
        [ROOT / "scripts" / "browser.sh", "assets"], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return streamcore_ui_assets.assets_dir()


@pytest.fixture
def home(tmp_path: Path) -> Path:
    record = {
        "dag_id": "streamcore_importer",
        "run_id": RUN_ID,
        "params": {"count": 2000},
        "report": "documents imported  2,000\n<script>alert(1)</script>",
        "consume": {"data_docs": "index.html", "group": "import/repository", "batch": 3},
    }
    path = record_path("importer", "streamcore_importer", RUN_ID, tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(record))
    audit = {  # another DAG's run, of the same run id, whose validation names its GX run
        "dag_id": "streamcore_audit",
        "run_id": RUN_ID,
        "report": "entries landed 3",
        "land": {"data_docs": "index.html", "validation_run": "audit-batch-7", "batch": 7},
    }
    path = record_path("audit", "streamcore_audit", RUN_ID, tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(audit))
    for suite, run_name in (("Document", "import-repository-batch-3"), AUDIT_PAGE):
        validation = tmp_path / DOCS / "validations" / suite / run_name / "t"
        validation.mkdir(parents=True)
        (validation / f"spark-{suite}-frames.html").write_text(PAGE.replace("GX", run_name))
        (tmp_path / DOCS / "expectations").mkdir(exist_ok=True)
        (tmp_path / DOCS / "expectations" / f"{suite}.html").write_text(PAGE)
    (tmp_path / DOCS / "static" / "styles").mkdir(parents=True)
    (tmp_path / DOCS / "static" / "styles" / "data_docs.css").write_text("body {}")
    (tmp_path / DOCS / "index.html").write_text(PAGE)
    (tmp_path / "gx" / "great_expectations.yml").write_text("secret: not served\n")
    return tmp_path


def _user(authorization: str | None = Header(None)) -> str:
    if authorization not in (f"Bearer {TOKEN}", "Bearer viewer"):
        raise HTTPException(401, "Not authenticated")
    return authorization.removeprefix("Bearer ")


def _may_read(user: Any, dag_id: str | None) -> bool:
    return user == TOKEN or dag_id == "streamcore_importer"


@pytest.fixture
def client(home: Path, assets: Path) -> TestClient:
    app = streamcore_ui_app.create_app(
        _user, _may_read, home=lambda: home, assets_root=lambda: assets
    )
    return TestClient(app, follow_redirects=False)


def get(client: TestClient, path: str, token: str = TOKEN) -> Any:
    return client.get(path, headers={"Authorization": f"Bearer {token}"})


def test_every_route_refuses_a_request_without_the_login(client: TestClient) -> None:
    quoted = RUN_ID.replace(":", "%3A").replace("+", "%2B")
    for path in (
        f"/runs/streamcore_importer/{quoted}",
        f"/runs/streamcore_importer/{quoted}/json",
        f"/runs/streamcore_importer/{quoted}/data-docs",
        "/data-docs/local_site/index.html",
        "/assets/npm/bootstrap@4.3.1/dist/css/bootstrap.min.css",
        "/assets/gx/logo-long.png",
    ):
        assert client.get(path).status_code == 401, path
        assert get(client, path, "wrong").status_code == 401, path
        assert get(client, path).status_code in (200, 307), path
    # Permission to read one DAG's runs is not permission to read another's.
    assert get(client, f"/runs/streamcore_importer/{quoted}", "viewer").status_code == 200
    assert get(client, "/runs/streamcore_audit/x", "viewer").status_code == 403


def test_a_run_summary_page_and_its_record(client: TestClient) -> None:
    page = get(client, f"/runs/streamcore_importer/{RUN_ID}")
    assert page.status_code == 200
    assert "documents imported  2,000" in page.text
    assert "<script>alert(1)</script>" not in page.text  # the report is escaped
    assert "&lt;script&gt;" in page.text
    assert f'href="/streamcore/runs/streamcore_importer/{RUN_ID}/data-docs"' in page.text
    assert get(client, f"/runs/streamcore_importer/{RUN_ID}/json").json()["params"] == {
        "count": 2000
    }
    # The run's own validation page (the record of a run before `validation_run`: found by its
    # consumer group and batch), served under the run.
    docs = get(client, f"/runs/streamcore_importer/{RUN_ID}/data-docs")
    assert docs.status_code == 307
    quoted = RUN_ID.replace(":", "%3A").replace("+", "%2B")
    assert docs.headers["location"] == (
        f"/streamcore/runs/streamcore_importer/{quoted}/data-docs/local_site/validations/"
        "Document/import-repository-batch-3/t/spark-Document-frames.html"
    )
    page = get(client, docs.headers["location"].removeprefix("/streamcore"))
    assert page.status_code == 200 and "import-repository-batch-3" in page.text
    missing = get(client, "/runs/streamcore_importer/manual__other")
    assert missing.status_code == 404 and "No run summary yet" in missing.text
    audit = get(client, f"/runs/streamcore_audit/{RUN_ID}")  # the same run id, another DAG
    assert "entries landed 3" in audit.text and "documents imported" not in audit.text


def test_runs_of_two_dags_with_one_run_id_keep_both_summaries(
    client: TestClient, home: Path
) -> None:
    """Two bulk schedules of one cron: their runs share the run id and the job (bulk_action).
    Each summary task's record (written by dags/_streamcore.py, in a process of its own as
    Airflow's task would) survives the other's, and the plugin serves each for its own DAG."""
    run_id = "scheduled__2026-11-24T03:00:00+00:00"
    dags = ("streamcore_bulk_trash_old_notes", "streamcore_bulk_archive_old_files")
    write = "\n".join(
        [
            "import json, sys",
            f"sys.path.insert(0, {str(ROOT / 'dags')!r})",
            "from _streamcore import write_run_record",
            *(
                f"write_run_record('bulk_action', {dag!r}, {run_id!r}, "
                f"{{'dag_id': {dag!r}, 'run_id': {run_id!r}, 'report': 'summary of {dag}'}})"
                for dag in dags
            ),
        ]
    )
    env = {**os.environ, "STREAMCORE_HOME": str(home), "AIRFLOW_HOME": str(home / "airflow")}
    done = subprocess.run(
        [sys.executable, "-c", write], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert len(list((home / "runs" / "bulk_action").glob("*.json"))) == 2
    for dag in dags:
        page = get(client, f"/runs/{dag}/{run_id}")
        assert page.status_code == 200 and f"summary of {dag}" in page.text, dag
        assert get(client, f"/runs/{dag}/{run_id}/json").json()["dag_id"] == dag


def test_data_docs_are_scoped_to_the_runs_a_user_may_read(client: TestClient) -> None:
    """The site holds every DAG's validations with sample values. "viewer" may read the
    importer's runs only: it opens the importer run's validation, its suite and the site's
    static files under that run, and nothing of the audit DAG's: not under the audit run, not
    under the importer run, not through the whole site (nor its index)."""
    importer = f"/runs/streamcore_importer/{RUN_ID}/data-docs"
    audit = f"/runs/streamcore_audit/{RUN_ID}/data-docs"
    own = "local_site/validations/Document/import-repository-batch-3/t/spark-Document-frames.html"
    other = "local_site/validations/AuditEntry/audit-batch-7/t/spark-AuditEntry-frames.html"
    for path in (
        own,
        "local_site/expectations/Document.html",
        "local_site/static/styles/data_docs.css",
    ):
        assert get(client, f"{importer}/{path}", "viewer").status_code == 200, path
    for path in (other, "local_site/expectations/AuditEntry.html", "local_site/index.html", ""):
        assert get(client, f"{importer}/{path}", "viewer").status_code == 403, path
    assert get(client, audit, "viewer").status_code == 403
    assert get(client, f"{audit}/{other}", "viewer").status_code == 403
    for path in (other, own, "local_site/index.html"):
        assert get(client, f"/data-docs/{path}", "viewer").status_code == 403, path
    # A user who may read every DAG's runs: the audit run's own page, and the whole site.
    located = get(client, audit).headers["location"].removeprefix("/streamcore")
    assert located.endswith(other) and "audit-batch-7" in get(client, located).text
    assert get(client, f"{importer}/{other}").status_code == 403  # still not the importer's
    for path in (other, own, "local_site/index.html"):
        assert get(client, f"/data-docs/{path}").status_code == 200, path
    # The local copies of public CSS/JS need the login only.
    css = "/assets/npm/bootstrap@4.3.1/dist/css/bootstrap.min.css"
    assert get(client, css, "viewer").status_code == 200


def test_a_run_name_is_not_a_pattern(client: TestClient, home: Path) -> None:
    """A record's GX run name is matched as it is: `*` names no other run's pages."""
    path = record_path("audit", "streamcore_glob", RUN_ID, home)
    step = {"data_docs": "index.html", "validation_run": "*"}
    path.write_text(json.dumps({"dag_id": "streamcore_glob", "run_id": RUN_ID, "land": step}))
    base = f"/runs/streamcore_glob/{RUN_ID}/data-docs"
    assert get(client, base).status_code == 404
    own = "local_site/validations/Document/import-repository-batch-3/t/spark-Document-frames.html"
    for path in (own, "local_site/expectations/Document.html"):
        assert get(client, f"{base}/{path}").status_code == 403, path


def test_paths_outside_the_data_docs_are_refused(client: TestClient, home: Path) -> None:
    for path in (
        "/data-docs/../../great_expectations.yml",
        "/data-docs/%2e%2e/%2e%2e/great_expectations.yml",
        "/data-docs/..%2f..%2fgreat_expectations.yml",
        "/assets/npm/..%2f..%2f/etc/passwd",
        "/assets/npm/bootstrap@4.3.1/..%2f..%2f..%2fpyproject.toml",
        "/assets/gx/..%2f..%2f__init__.py",
    ):
        response = get(client, path)
        assert response.status_code == 404, (path, response.status_code)
        assert "not served" not in response.text and "[project]" not in response.text
    (home / "elsewhere.html").write_text("outside")
    (home / DOCS / "link.html").symlink_to(home / "elsewhere.html")
    assert get(client, "/data-docs/local_site/link.html").status_code == 404


def test_cdn_urls_are_served_from_the_local_packages(client: TestClient) -> None:
    page = get(client, "/data-docs/local_site/index.html")
    assert page.status_code == 200
    text = page.text
    assert "/streamcore/assets/npm/bootstrap@4.3.1/dist/css/bootstrap.min.css" in text
    assert "/streamcore/assets/npm/bootstrap@4.3.1/dist/js/bootstrap.min.js" in text
    assert "/streamcore/assets/npm/vega@5.33.1/build/vega.min.js" in text
    assert 'src="/streamcore/assets/gx/logo-long.png"' in text
    assert "integrity=" not in text  # the CDN's hash, dropped with its URL
    assert 'href="https://greatexpectations.io"' in text  # links stay links
    # The one asset without a local copy is kept, listed and shown, not dropped.
    assert "https://cdn.example.org/unknown.js" in text
    assert page.headers["x-streamcore-missing-assets"] == "https://cdn.example.org/unknown.js"
    assert 'class="streamcore-missing-assets"' in text
    for url in re.findall(r'(?:src|href)="(/streamcore/assets/[^"]+)"', text):
        asset = get(client, url.removeprefix("/streamcore"))
        assert asset.status_code == 200 and asset.content, url
    css = get(client, "/assets/npm/bootstrap@4.3.1/dist/css/bootstrap.min.css")
    assert css.headers["content-type"].startswith("text/css") and ".card{" in css.text


def test_every_cdn_asset_of_the_gx_templates_has_a_local_copy(assets: Path) -> None:
    """The pinned packages cover what the installed GX's page templates link: a GX upgrade that
    links a new asset fails here, naming it."""
    templates = Path(streamcore_ui_assets.GX_STATIC).parents[1] / "templates"
    page = "\n".join(p.read_text() for p in templates.rglob("*.j2"))
    _, missing = streamcore_ui_assets.rewrite(page, "/streamcore/assets", assets)
    # GX's dark-mode logo (a CSS background) is on its web-assets bucket only; nothing ships it.
    assert [u for u in missing if not u.endswith("/full_logo_dark.png")] == []
