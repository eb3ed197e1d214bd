"""The streamcore Airflow plugin: a DAG run's summary and Great Expectations Data Docs, one click
from the run's page in the Airflow UI, behind Airflow's own login.

Two tabs on every DAG run page ("Run summary", "Data Docs": Airflow 3 external views with
destination `dag_run`) show the pages of the FastAPI app of streamcore_ui_app.py, mounted at
`/streamcore`. A request carries the UI's JWT cookie (or an `Authorization: Bearer` token from
POST /auth/token), validated by Airflow's auth manager; a browser without a login is sent to
Airflow's login page, an API client gets 401. Reading a run's summary and Data Docs needs
permission to read that DAG's runs, asked as Airflow's own API asks (with the DAG's team in
multi-team mode); the whole Data Docs site, every DAG's runs. See docs/ui.md.
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
    """Airflow's permission to read the runs of `dag_id`, or of every DAG when None. Each DAG is
    asked with its team, as Airflow's `requires_access_dag` does: an auth manager scopes DAGs by
    team (SimpleAuthManager's `user:role:team` in multi-team mode), and without the team it
    would answer for any DAG."""
    from airflow.api_fastapi.auth.managers.models.resource_details import (
        DagAccessEntity,
        DagDetails,
    )
    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    if dag_id is not None:
        teams = {dag_id: DagModel.get_team_name(dag_id)}
    else:
        with create_session() as session:
            dag_ids = list(session.scalars(select(DagModel.dag_id)))
        teams = DagModel.get_dag_id_to_team_name_mapping(dag_ids)
        teams = {dag: teams.get(dag) for dag in dag_ids}
    manager = _auth_manager()
    return all(
        manager.is_authorized_dag(
            method="GET",
            access_entity=DagAccessEntity.RUN,
            details=DagDetails(id=dag, team_name=team),
            user=user,
        )
        for dag, team in teams.items()
    )


app = streamcore_ui_app.create_app(airflow_user, may_read_runs, prefix=PREFIX)


class StreamcoreUIPlugin(AirflowPlugin):
    """Mounts the FastAPI app at `/streamcore` and adds the "Run summary" and "Data Docs" tabs to
    every DAG run page."""

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
