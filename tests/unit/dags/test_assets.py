"""dags/_assets.py and plugins/streamcore_triggers.py without an Airflow database: the job tasks'
inlets and outlets named by streamcore.datasets, the asset event's extra from a job summary, the
records-mode switch of the audit and importer DAGs (a watched asset instead of a schedule, and
the importer without its produce step), and the trigger firing on a local log once records
arrive. Run in a fresh interpreter with its own AIRFLOW_HOME and STREAMCORE_HOME."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

from dag_snippets import run_snippet


def _run(tmp_path: Path, code: str, **env: str) -> Any:
    homes = {"AIRFLOW_HOME": str(tmp_path / "airflow"), "STREAMCORE_HOME": str(tmp_path / "sc")}
    # the switches this test sets, and no other's routing
    switches = ("STREAMCORE_AUDIT_", "STREAMCORE_IMPORTER_", "STREAMCORE_LOG_")
    return run_snippet(code, {**homes, **env}, drop=switches)


TASK_ASSETS = """
def names(assets):
    return [(a.name, getattr(a, "uri", None), a.group) for a in assets]

def tasks(module):
    dag = getattr(__import__(module), module)()
    return {t.task_id: {"in": names(t.inlets), "out": names(t.outlets)} for t in dag.tasks}
"""


def test_job_tasks_declare_their_streams_and_tables(tmp_path: Path) -> None:
    found = _run(
        tmp_path,
        TASK_ASSETS
        + textwrap.dedent(
            """
            print(json.dumps({m: tasks(m) for m in (
                "streamcore_importer", "streamcore_audit", "streamcore_bulk_action",
                "streamcore_retention", "streamcore_backfill")}))
            """
        ),
    )
    home = (tmp_path / "sc").as_posix()
    docs = ["import/docs", f"file://{home}/log/import-docs", "stream"]
    repository = ["repository", f"file://{home}/delta/repository", "table"]
    quarantine = ["quarantine", f"file://{home}/delta/quarantine", "table"]
    importer = found["streamcore_importer"]
    assert importer["produce"] == {"in": [], "out": [docs]}
    assert importer["consume"] == {"in": [docs], "out": [repository, quarantine]}
    assert importer["validate"] == importer["summary"] == {"in": [], "out": []}
    audit = found["streamcore_audit"]["land"]
    assert [a[0] for a in audit["in"]] == ["audit/entries"]
    assert [a[0] for a in audit["out"]] == ["audit", "quarantine"]
    bulk = found["streamcore_bulk_action"]["run"]
    assert bulk == {"in": [repository], "out": [repository, found_table(home, "bulk_status")]}
    archive = found["streamcore_retention"]["archive"]
    assert {a[0] for a in archive["in"]} >= {"import/docs", "audit/entries"}
    assert archive["out"] == [found_table(home, "archive")]
    assert found["streamcore_backfill"]["replay"]["in"] == [found_table(home, "archive")]


def found_table(home: str, name: str) -> list[str]:
    return [name, f"file://{home}/delta/{name}", "table"]


def test_the_asset_event_extra_is_the_batch(tmp_path: Path) -> None:
    found = _run(
        tmp_path,
        """
        from airflow.sdk import AssetAlias
        from _assets import batch_extra, record_asset_events, table_asset

        consumed = {
            "job": "importer", "step": "consume", "group": "import/repository", "batch": 3,
            "offsets": {"0": [10, 20], "1": [0, 5]}, "read": 15, "imported": 14,
            "quarantined": 1, "delta_version": 7, "table_path": "/x", "docs_per_s": 9.0,
        }
        archived = {"job": "retention", "step": "archive", "archived": 4, "streams": {
            "audit/entries": {"batch": 1, "offsets": {"0": [0, 4]}, "archived": 4,
                              "delta_version": 2}}}
        replayed = {"job": "backfill", "target": "repository", "target_kind": "table",
                    "hot_offsets": {"0": [0, 2]}, "imported": 2, "quarantined": 0,
                    "delta_version": 5}

        class Events(dict):
            def __missing__(self, key):
                self[key] = Event()
                return self[key]

        class Event:
            extra, added = None, []
            def add(self, asset, extra):
                self.added = [*self.added, [asset.name, extra]]

        repository, alias = table_asset("repository"), AssetAlias("streamcore_backfill_target")
        events = Events()
        record_asset_events({"outlet_events": events}, [repository], consumed)
        record_asset_events({"outlet_events": events}, [alias], replayed)
        print(json.dumps({
            "consumed": batch_extra(consumed), "archived": batch_extra(archived),
            "event": events[repository].extra, "alias": events[alias].added,
        }))
        """,
    )
    batch = {
        "batch": 3,
        "delta_version": 7,
        "quarantined": 1,
        "read": 15,
        "offsets": {"0": [10, 20], "1": [0, 5]},
        "rows": 14,
    }
    assert found["consumed"] == batch
    assert found["event"] == {"job": "importer", "step": "consume", **batch}
    assert found["archived"] == {
        "rows": 4,
        "streams": {
            "audit/entries": {"batch": 1, "delta_version": 2, "offsets": {"0": [0, 4]}, "rows": 4}
        },
    }
    [[name, extra]] = found["alias"]
    assert name == "repository" and extra["rows"] == 2 and extra["offsets"] == {"0": [0, 2]}


def test_records_mode_watches_the_stream_instead_of_a_schedule(tmp_path: Path) -> None:
    code = """
        from airflow.triggers.base import BaseEventTrigger
        out = {}
        for module in ("streamcore_audit", "streamcore_importer", "streamcore_retention"):
            dag = getattr(__import__(module), module)()
            condition = getattr(dag.timetable, "asset_condition", None)
            assets = list(condition.objects) if condition is not None else []
            watchers = [w for a in assets for w in a.watchers]
            out[module] = {
                "tasks": sorted(t.task_id for t in dag.tasks),
                "assets": [a.name for a in assets],
                "triggers": [w.trigger.serialize() for w in watchers],
                "event_trigger": all(isinstance(w.trigger, BaseEventTrigger) for w in watchers),
                # Every reference to a watched stream carries its watcher (see _assets).
                "referenced": sorted(
                    (a.name, w.name, w.trigger.serialize()[1]["group"])
                    for t in dag.tasks
                    for a in [*t.inlets, *t.outlets]
                    for w in getattr(a, "watchers", [])
                ),
            }
        print(json.dumps(out))
        """
    default = _run(tmp_path, code)
    assert default["streamcore_audit"]["triggers"] == []
    assert default["streamcore_importer"]["tasks"] == ["consume", "produce", "summary", "validate"]
    records = _run(
        tmp_path,
        code,
        STREAMCORE_AUDIT_RUNS_ON="records",
        STREAMCORE_IMPORTER_RUNS_ON="records",
        STREAMCORE_IMPORTER_WATCH_INTERVAL="500ms",
    )
    home = str(tmp_path / "sc")
    audit, importer = records["streamcore_audit"], records["streamcore_importer"]
    assert audit["assets"] == ["audit/entries"] and audit["event_trigger"]
    assert audit["triggers"] == [
        [
            "streamcore_triggers.StreamRecordsTrigger",
            {"stream": "audit/entries", "group": "audit/delta", "poll_interval": 2.0, "home": home},
        ]
    ]
    assert [tuple(r) for r in audit["referenced"]] == [
        ("audit/entries", "streamcore_audit_records", "audit/delta")
    ]
    assert [tuple(r) for r in records["streamcore_retention"]["referenced"]] == [
        ("audit/entries", "streamcore_audit_records", "audit/delta"),
        ("import/docs", "streamcore_importer_records", "import/repository"),
    ]
    assert default["streamcore_retention"]["referenced"] == []
    assert importer["tasks"] == ["consume", "summary", "validate"]
    assert importer["triggers"][0][1] == {
        "stream": "import/docs",
        "group": "import/repository",
        "poll_interval": 0.5,
        "home": home,
    }


def test_the_trigger_fires_when_records_arrive(tmp_path: Path) -> None:
    found = _run(
        tmp_path,
        """
        import asyncio
        from streamcore.config import load_config
        from streamcore.log import open_log_manager
        from streamcore_triggers import StreamRecordsTrigger

        async def main():
            trigger = StreamRecordsTrigger(
                stream="test/arrivals", group="test/g", poll_interval=0.1
            )
            events = trigger.run()
            first = asyncio.ensure_future(events.__anext__())
            # Nothing arrived: the trigger polls (three times, counted) and keeps waiting.
            while trigger.arrivals is None or trigger.arrivals.polls < 3:
                await asyncio.sleep(0.01)
            idle = first.done()
            with open_log_manager(load_config()) as manager:
                manager.create("test/arrivals", 2)
                manager.appender("test/arrivals").append_to(1, "k", b"v")
            event = await asyncio.wait_for(first, 30)
            await events.aclose()
            return idle, event.payload

        idle, payload = asyncio.run(main())
        print(json.dumps({"idle": idle, "payload": payload}))
        """,
    )
    assert found["idle"] is False
    payload = found["payload"]
    assert payload["stream"] == "test/arrivals" and payload["records"] == 1
    assert payload["ends"] == {"0": 0, "1": 1} and payload["committed"] == {"0": 0, "1": 0}
    assert payload["polls"] >= 2
