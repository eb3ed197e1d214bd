"""`streamcore outbox stats | errors | retry | purge` on both databases."""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa

from streamcore.cli.main import main
from streamcore.outbox import ERROR, INIT, ConsumerFailedError, VirtualQueue, put_many
from streamcore.outbox.claim import now_ms
from streamcore.outbox.schema import jobs


def fill(make_outbox, registry):
    registry.register("mail", lambda p: 1 / 0 if p == 2 else p)
    outbox = make_outbox()
    with outbox.engine.begin() as conn:
        put_many(conn, "mail", [1, 2, 3], ids=["a", "b", "c"], registry=registry)
    VirtualQueue(outbox).consume_one("mail")
    with pytest.raises(ConsumerFailedError):
        VirtualQueue(outbox).consume_one("mail")
    return outbox


def run_json(capsys, *argv: str) -> dict:
    capsys.readouterr()
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_stats_errors_retry_purge(make_outbox, registry, outbox_url, capsys):
    outbox = fill(make_outbox, registry)
    stats = run_json(capsys, "outbox", "stats", "--url", outbox_url)
    assert stats["queues"] == [
        {"queue": "mail", "init": 1, "processing": 0, "done": 1, "error": 1, "total": 3}
    ]
    assert stats["processing_times"][0]["count"] == 1
    assert main(["outbox", "stats", "--url", outbox_url]) == 0
    assert "mail" in capsys.readouterr().out

    errors = run_json(capsys, "outbox", "errors", "mail", "--url", outbox_url)
    [error] = errors["errors"]
    assert (error["id"], error["error_type"], error["payload"]) == ("b", "ZeroDivisionError", 2)
    assert "ZeroDivisionError: division by zero" in error["error_traceback"]
    assert main(["outbox", "errors", "mail", "--url", outbox_url]) == 0
    assert "division by zero" in capsys.readouterr().out

    assert run_json(capsys, "outbox", "retry", "mail", "--url", outbox_url)["retried"] == 1
    with outbox.engine.connect() as conn:
        assert conn.execute(sa.select(jobs.c.status).where(jobs.c.id == "b")).scalar() == INIT
        conn.execute(sa.update(jobs).where(jobs.c.id == "a").values(done_ms=now_ms() - 7200_000))
        conn.commit()
    purged = run_json(capsys, "outbox", "purge", "--older-than", "1h", "--url", outbox_url)
    assert purged["purged"] == 1
    assert ERROR not in {q["queue"] for q in outbox.queue_stats()}


def test_clear_errors(tmp_path, capsys):
    assert main(["outbox", "stats", "--home", str(tmp_path)]) == 1
    assert "no outbox database at" in capsys.readouterr().err
    assert main(["outbox", "purge", "--older-than", "soon", "--home", str(tmp_path)]) == 2
    assert "invalid --older-than 'soon'" in capsys.readouterr().err
