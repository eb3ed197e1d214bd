"""The streamcore Airflow plugin: a DAG run's summary and Great Expectations Data Docs, one click
from the run's page in the Airflow UI, behind Airflow's own login.

Two tabs on every DAG run page ("Run summary", "Data Docs": Airflow 3 external views with
destination `dag_run`) show the pages of the FastAPI app of streamcore_ui_app.py, mounted at
`/streamcore`. A request carries the UI's JWT cookie (or an `Authorization: Bearer` token from
POST /auth/token), validated by Airflow's auth manager; a browser without a login is sent to
Airflow's login page, an API client gets 401. Reading a run's summary needs permission to read
that DAG's runs. See docs/ui.md.
"""

from __future__ import annotations

from typing import Annotated, Any

import streamcore_ui_app
from airflow.plugins_manager import AirflowPlugin
from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

PREFIX = "/streamcore"
# Airflow's API security module is imported when a request comes, not here: every Airflow process
# (scheduler, DAG processor, task runners) loads the plugins, and that import costs them about 1 s.
_bearer = HTTPBearer(auto_error=False)  # as Airflow's own `bearer_scheme`


def _auth_manager() -> Any:
    from airflow.api_fastapi.app import get_auth_manager

    return get_auth_manager()


async def airflow_user(
    request: Request,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Any:
    """The logged-in Airflow user, exactly as Airflow's own API resolves it; a browser page
    request without a valid login is redirected to the login page, which comes back here."""
    from airflow.api_fastapi.core_api.security import get_user

    try:
        return await get_user(request, None, bearer)
    except HTTPException as exc:
        wants_page = "text/html" in request.headers.get("accept", "")
        if not wants_page or exc.status_code not in (401, 403):
            raise
        login = _auth_manager().get_url_login(next_url=str(request.url))
        raise HTTPException(
            status.HTTP_307_TEMPORARY_REDIRECT, "log in to Airflow first", {"Location": login}
        ) from exc


def may_read_runs(user: Any, dag_id: str | None) -> bool:
    """Airflow's permission to read the runs of `dag_id` (any DAG's when None)."""
    from airflow.api_fastapi.auth.managers.models.resource_details import (
        DagAccessEntity,
        DagDetails,
    )

    return _auth_manager().is_authorized_dag(
        method="GET",
        access_entity=DagAccessEntity.RUN,
        details=DagDetails(id=dag_id) if dag_id else None,
        user=user,
    )


app = streamcore_ui_app.create_app(airflow_user, may_read_runs, prefix=PREFIX)


class StreamcoreUIPlugin(AirflowPlugin):
    name = "streamcore_ui"
    fastapi_apps = [{"app": app, "url_prefix": PREFIX, "name": "streamcore runs and Data Docs"}]
    external_views = [
        {
            "name": "Run summary",
            "href": PREFIX + "/runs/{DAG_ID}/{RUN_ID}",
            "destination": "dag_run",
            "url_route": "streamcore-summary",
        },
        {
            "name": "Data Docs",
            "href": PREFIX + "/runs/{DAG_ID}/{RUN_ID}/data-docs",
            "destination": "dag_run",
            "url_route": "streamcore-data-docs",
        },
    ]
