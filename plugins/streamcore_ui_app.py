"""The streamcore plugin's web app: run summaries and Great Expectations Data Docs, read-only.

Routes (under the plugin's prefix, `/streamcore` in Airflow):

- `/runs/{dag_id}/{run_id}`: the run's summary (its run record, written by the DAG's summary
  task to `STREAMCORE_HOME/runs/<job>/<dag id>+<run id>.json`, found by `streamcore.runs`) as a
  page; `.../json` the record itself; `.../data-docs` redirects to the Data Docs page of the
  run's validation, served under `.../data-docs/{path}` with what that page links to (its
  expectation suite's page, the site's static files) and nothing else of the site.
- `/data-docs/{path}`: the whole Data Docs site under
  `STREAMCORE_HOME/gx/gx/uncommitted/data_docs`, for a user who may read every DAG's runs.
- Pages are served with the CDN asset URLs rewritten to `/assets/...` (streamcore_ui_assets):
  `/assets/npm/{package}/{file}`, `/assets/gx/{file}` serve those local copies.

The Data Docs site holds every job's validation results, with sample values of failing rows, in
one folder; GX knows nothing of DAGs. So a page is served under a run only when the run's
record names its validation (`validation_run`, GX's run name), and that run's DAG is one the user
may read: a user who may read DAG A's runs opens A's validations, never B's.

The app knows nothing of Airflow: who may see what is decided by the two callables it is given
(streamcore_ui.py passes Airflow's own login and permissions), so it can be tested alone.
"""

import glob
import html
import json
import mimetypes
import re
from collections.abc import Callable, Iterator
from pathlib import Path, PurePosixPath
from typing import Annotated, Any
from urllib.parse import quote

import streamcore_ui_assets as assets
from fastapi import Depends, FastAPI, HTTPException
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse, Response

from streamcore.config import streamcore_home
from streamcore.runs import find_record

DOCS_SUBPATH = Path("gx") / "uncommitted" / "data_docs"  # GX's file-mode project under gx/

User = Any
# (request) -> the user, raising HTTPException (or returning a Response to send) when not logged in
Authenticate = Callable[..., Any]
# (user, dag_id or None) -> whether the user may read that DAG's runs (None: every DAG's)
Authorize = Callable[[User, str | None], bool]


def under(root: Path, relative: str) -> Path | None:
    """`root/relative` resolved, if it stays under `root` (no `..`, no symlink out), else None."""
    root = root.resolve()
    target = (root / relative).resolve()
    return target if target == root or root in target.parents else None


def _with_data_docs(record: Any) -> Iterator[dict[str, Any]]:
    """Each object in the record (a step's summary, at any depth) that produced Data Docs."""
    if isinstance(record, dict):
        if record.get("data_docs"):
            yield record
        values: Any = record.values()
    elif isinstance(record, list):
        values = record
    else:
        return
    for value in values:
        yield from _with_data_docs(value)


def validation_runs(record: dict[str, Any]) -> set[str]:
    """GX's run names of the validations the run's steps made: each checked step's summary names
    its own (`validation_run`); a record written before it did names its consumer group and batch
    instead, which made the importer's run name `<group id>-batch-<n>`."""
    names = set()
    for step in _with_data_docs(record):
        if step.get("validation_run"):
            names.add(str(step["validation_run"]))
        elif isinstance(step.get("batch"), int) and step.get("group"):
            names.add(f"{str(step['group']).replace('/', '-')}-batch-{step['batch']}")
    return {name for name in names if name and "/" not in name and name not in (".", "..")}


def run_data_docs(docs_root: Path, record: dict[str, Any]) -> str | None:
    """The Data Docs page of the run's validation, relative to `docs_root` (the newest when a
    retried step validated twice), or None when the run has none."""
    pages = [
        page
        for name in validation_runs(record)
        for page in docs_root.glob(f"local_site/validations/*/{glob.escape(name)}/*/*.html")
    ]
    if not pages:
        return None
    newest = max(pages, key=lambda p: p.stat().st_mtime)
    return newest.relative_to(docs_root).as_posix()


def in_run_scope(docs_root: Path, target: Path, record: dict[str, Any]) -> bool:
    """Whether `target` (resolved, under `docs_root`) is one of the pages a run may show: its own
    validations' pages (`validations/<suite>/<run name>/...`), the pages of those validations'
    suites (`expectations/<suite>.html`), and the site's static files. Not the index, which lists
    every job's runs, nor another run's validation."""
    parts = PurePosixPath(target.relative_to(docs_root).as_posix()).parts
    if len(parts) < 3 or parts[0] != "local_site":
        return False
    section, rest = parts[1], parts[2:]
    names = validation_runs(record)
    if section == "static":
        return True
    if section == "validations":
        return len(rest) >= 2 and rest[1] in names
    if section == "expectations" and len(rest) == 1:
        validations = docs_root / "local_site" / "validations"
        found = (validations.glob(f"*/{glob.escape(name)}") for name in names)
        suites = {folder.parent.name for folders in found for folder in folders}
        return rest[0].removesuffix(".html") in suites
    return False


def _page(title: str, body: str) -> str:
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 1.5rem; color: #1a202c; }}
h1 {{ font-size: 1.3rem; }} pre {{ background: #f7fafc; padding: 1rem; border: 1px solid #e2e8f0; }}
nav a {{ margin-right: 1.2rem; }} table {{ border-collapse: collapse; }}
td, th {{ text-align: left; padding: 0.2rem 0.8rem 0.2rem 0; vertical-align: top; }}
.missing {{ background: #fff5f5; border: 1px solid #feb2b2; padding: 0.5rem 1rem; }}
</style></head><body>{body}</body></html>"""


def _missing_banner(missing: list[str]) -> str:
    items = "".join(f"<li><code>{html.escape(url)}</code></li>" for url in missing)
    return (
        '<div class="streamcore-missing-assets" style="background:#fff5f5;border:1px solid '
        '#feb2b2;padding:.5rem 1rem;margin:.5rem;font-family:sans-serif">'
        "<strong>streamcore:</strong> these Data Docs assets have no local copy, so this page "
        "loads them from the internet (and looks unstyled offline). Fetch them with "
        f"<code>scripts/browser.sh assets</code>:<ul>{items}</ul></div>"
    )


def create_app(
    authenticate: Authenticate,
    authorize: Authorize,
    *,
    home: Callable[[], Path] = streamcore_home,
    assets_root: Callable[[], Path] = assets.assets_dir,
    prefix: str = "/streamcore",
) -> FastAPI:
    """The app, to be mounted at `prefix` (the routes it writes into pages start with it)."""
    app = FastAPI(title="streamcore runs and Data Docs", docs_url=None, redoc_url=None)
    # Evaluated here, not postponed (no `from __future__ import annotations` in this module):
    # FastAPI must see the dependency in the signatures below.
    LoggedIn = Annotated[Any, Depends(authenticate)]

    def docs_root() -> Path:
        """The Data Docs site of the GX project under STREAMCORE_HOME/gx."""
        return home() / "gx" / DOCS_SUBPATH

    def allowed(user: User, dag_id: str | None) -> None:
        if not authorize(user, dag_id):
            raise HTTPException(403, "your Airflow role may not read these runs")

    def record_or_404(dag_id: str, run_id: str) -> tuple[Path, dict[str, Any]]:
        found = find_record(dag_id, run_id, home())
        if found is None:
            raise HTTPException(
                404,
                f"no run record for run {run_id!r} of {dag_id!r} under {home() / 'runs'}: the "
                "summary task writes it when the run's jobs have finished",
            )
        return found

    @app.get("/runs/{dag_id}/{run_id}", response_class=HTMLResponse)
    def run_summary(dag_id: str, run_id: str, user: LoggedIn) -> Response:
        allowed(user, dag_id)
        found = find_record(dag_id, run_id, home())
        base = f"{prefix}/runs/{html.escape(dag_id)}/{html.escape(run_id)}"
        title = f"{dag_id} · {run_id}"
        if found is None:
            body = (
                f"<h1>{html.escape(title)}</h1><p class='missing'>No run summary yet: the "
                "summary task writes it once the run's jobs have finished (a failed run may "
                "have none). Reload this tab when the run is done.</p>"
            )
            return HTMLResponse(_page(title, body), status_code=404)
        path, record = found
        docs = run_data_docs(docs_root(), record)
        links = [f'<a href="{base}/json">run record (JSON)</a>']
        if docs:
            links.insert(0, f'<a id="data-docs" href="{base}/data-docs">Data Docs of this run</a>')
        params = record.get("params") or {}
        rows = "".join(
            f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(json.dumps(v))}</td></tr>"
            for k, v in sorted(params.items())
        )
        body = (
            f"<h1>{html.escape(title)}</h1><nav>{''.join(links)}</nav>"
            f"<h2>Summary</h2><pre id='report'>{html.escape(str(record.get('report', '')))}</pre>"
            f"<h2>Parameters</h2><table>{rows}</table>"
            f"<p><small>{html.escape(str(path))}</small></p>"
        )
        return HTMLResponse(_page(title, body))

    @app.get("/runs/{dag_id}/{run_id}/json")
    def run_record(dag_id: str, run_id: str, user: LoggedIn) -> Response:
        allowed(user, dag_id)
        return JSONResponse(record_or_404(dag_id, run_id)[1])

    def run_docs_url(dag_id: str, run_id: str, page: str) -> str:
        return f"{prefix}/runs/{quote(dag_id, safe='')}/{quote(run_id, safe='')}/data-docs/{page}"

    def serve(target: Path | None, path: str) -> Response:
        """A file of the Data Docs site (`target`, resolved under it, or None when `path` is
        not), a page with its CDN asset URLs rewritten to the local copies."""
        if target is None:
            raise HTTPException(404, "not under the Data Docs folder")
        if target.is_dir():
            target = target / "index.html"
        if not target.is_file():
            raise HTTPException(404, f"no Data Docs page {path!r}")
        if target.suffix != ".html":
            return FileResponse(target)
        page, missing = assets.rewrite(target.read_text(), f"{prefix}/assets", assets_root())
        # Only a missing stylesheet or script changes how the page looks; a missing image (GX's
        # dark-mode logo, which no package ships) is listed in the header alone.
        visible = [u for u in missing if re.search(r"\.(css|js)$|/npm/[^/]+$", u)]
        if visible:
            page = page.replace("<body>", "<body>" + _missing_banner(visible), 1)
        headers = {"X-Streamcore-Missing-Assets": " ".join(missing)} if missing else {}
        return HTMLResponse(page, headers=headers)

    @app.get("/runs/{dag_id}/{run_id}/data-docs")
    def run_docs(dag_id: str, run_id: str, user: LoggedIn) -> Response:
        allowed(user, dag_id)
        _, record = record_or_404(dag_id, run_id)
        docs = run_data_docs(docs_root(), record)
        if docs is None:
            raise HTTPException(404, f"run {run_id!r} of {dag_id!r} has no Data Docs")
        return RedirectResponse(run_docs_url(dag_id, run_id, docs), status_code=307)

    @app.get("/runs/{dag_id}/{run_id}/data-docs/{path:path}")
    def run_docs_page(dag_id: str, run_id: str, path: str, user: LoggedIn) -> Response:
        allowed(user, dag_id)
        _, record = record_or_404(dag_id, run_id)
        root = docs_root().resolve()
        target = under(root, path)
        if target is not None and not in_run_scope(root, target, record):
            raise HTTPException(
                403,
                f"{path!r} is not a Data Docs page of run {run_id!r} of {dag_id!r}: a run shows "
                f"its own validations only; the whole site, every DAG's, is {prefix}/data-docs/ "
                "for a role that may read every DAG's runs",
            )
        return serve(target, path)

    @app.get("/data-docs/{path:path}")
    def data_docs(path: str, user: LoggedIn) -> Response:
        if not authorize(user, None):
            raise HTTPException(
                403,
                "the whole Data Docs site holds every DAG's validations: your Airflow role may "
                "not read every DAG's runs; open a run's Data Docs from its page instead",
            )
        return serve(under(docs_root(), path), path)

    @app.get("/assets/npm/{package}/{path:path}")
    def npm_asset(package: str, path: str, user: LoggedIn) -> Response:
        # Public npm packages' files: the login is enough.
        root = assets_root()
        folder = under(root, package)
        target = under(folder, path) if folder is not None and folder != root else None
        if target is None or not target.is_file():
            raise HTTPException(
                404, f"no local asset {package}/{path}: run `scripts/browser.sh assets`"
            )
        return FileResponse(target, media_type=mimetypes.guess_type(target.name)[0])

    @app.get("/assets/gx/{name}")
    def gx_asset(name: str, user: LoggedIn) -> Response:
        target = under(assets.GX_STATIC, name)
        if target is None or not target.is_file():
            raise HTTPException(404, f"Great Expectations ships no image {name!r}")
        return FileResponse(target)

    return app
