"""jobs/backfill.py's other targets on the shared Spark session. A topology (defined here) run in
drain mode on the replayed records: its output gets them once, and a rerun appends and processes
nothing. The `repository` table, through the importer's landing: a replay puts back what the
importer landed (rows lost or back-dated), a rerun leaves the table as it is, and neither an
older interval nor an older version overwrites a newer document; the importer's positions and
txn ids stay as they were."""

from __future__ import annotations

import contextlib
import io
import json
import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import replay_topologies
from spark_session import FAST, read_delta, run_importer

from streamcore.codecs import get_codec
from streamcore.computation import Settings, Topology
from streamcore.config import load_config
from streamcore.log import LogPartition, open_log_manager
from streamcore.record import Flag, Record
from streamcore.watermark import Watermark

pytestmark = [pytest.mark.spark, pytest.mark.timeout(1200)]

DAY_MS = 86_400_000
SOURCE, TARGET, OUTPUT = "hist/events", "replay/events", "replay/copied"
GROUP = "import/repository"


def copy_topology() -> tuple[Topology, Settings]:
    return replay_topologies.copy_topology(TARGET, OUTPUT), Settings(drain_quiet=0.3)


@pytest.fixture(autouse=True)
def _topologies_of_this_module(monkeypatch: pytest.MonkeyPatch) -> None:
    """`[backfill] topologies`: a backfill may run this module's topology."""
    monkeypatch.setenv("STREAMCORE_BACKFILL_TOPOLOGIES", __name__)


def _backfill(*args: str) -> tuple[int, dict[str, Any]]:
    from jobs import backfill

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = backfill.main(list(args))
    return code, json.loads(out.getvalue().strip().splitlines()[-1])


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat()


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _keys_and_data(name: str) -> list[tuple[str, bytes, int]]:
    """(key, data, flags) of every record of `name`, partition by partition."""
    codec = get_codec("avro")
    with open_log_manager(load_config()) as manager:
        out = []
        for p, end in enumerate(manager.end_offsets(name)):
            for offset in range(end):
                _key, value, _ts = manager.record_at(LogPartition.of(name, p), offset)
                record = codec.decode(value)
                out.append((record.key, record.data, int(record.flags)))
        return out


def test_a_topology_target_drains_the_replayed_records_once(spark: Any) -> None:
    now = _now_ms()
    codec = get_codec("avro")
    sent = []
    with open_log_manager(load_config()) as manager:
        manager.create(SOURCE, 2)
        manager.create(TARGET, 2)
        appender = manager.appender(SOURCE)
        for n in range(60):  # three days, one record an hour, the last day outside the interval
            ts = now - 3 * DAY_MS + n * 3_600_000
            record = Record(f"k{n}", f"event-{n}".encode(), Watermark.of(ts).value)
            appender.append_batch(
                [(record.key, codec.encode(record))], partition=n % 2, timestamps=[ts]
            )
            sent.append(record)
    start, end = now - 3 * DAY_MS, now - 2 * DAY_MS  # the first 24 records
    argv = [
        *("--stream", SOURCE, "--start", _iso(start), "--end", _iso(end), "--target", TARGET),
        *("--target-kind", "topology", "--topology", f"{__name__}:copy_topology"),
        *("--drain-timeout", "120"),
    ]
    code, done = _backfill(*argv)
    assert code == 0, done
    assert done["appended"] == 24 and done["drained"] is True, done
    assert done["processed"] == {"replay_copy": 24}, done
    copied = _keys_and_data(OUTPUT)
    want = {(r.key, r.data) for r in sent[:24]}
    assert len(copied) == 24 and {(k, d) for k, d, _ in copied} == want
    assert all(flags & Flag.INTERNAL2 for _, _, flags in copied)  # REPLAYED, carried through

    code, again = _backfill(*argv)
    assert code == 0, again
    assert again["appended"] == 0 and again["already_replayed"] and again["drained"], again
    assert again["processed"] == {"replay_copy": 0}, again
    assert len(_keys_and_data(OUTPUT)) == 24
    assert len(_keys_and_data(TARGET)) == 24


def test_a_topology_not_reading_the_target_is_refused_before_appending(
    spark: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    with open_log_manager(load_config()) as manager:
        manager.create(SOURCE, 1)
        manager.create("replay/elsewhere", 1)
    with pytest.raises(SystemExit) as refused:  # by check_args, before Spark and any append
        _backfill(
            *("--stream", SOURCE, "--start", _iso(_now_ms() - DAY_MS), "--end", _iso(_now_ms())),
            *("--target", "replay/elsewhere", "--target-kind", "topology"),
            *("--topology", f"{__name__}:copy_topology"),
        )
    assert refused.value.code == 2
    assert f"its input streams are {TARGET}" in capsys.readouterr().err
    assert _keys_and_data("replay/elsewhere") == []


# -- the repository table -------------------------------------------------------------------------
def _home() -> Path:
    return Path(os.environ["STREAMCORE_HOME"])


def _rows(table: Path) -> list[dict[str, Any]]:
    """The table's rows without what says when and by which run they were landed."""
    found = read_delta(table).drop(["imported_at", "import_batch"]).to_pylist()
    return sorted(found, key=lambda r: r["id"])


def _full_rows(table: Path) -> list[dict[str, Any]]:
    return sorted(read_delta(table).to_pylist(), key=lambda r: r["id"])


def _committed() -> list:
    with open_log_manager(load_config()) as manager:
        return manager.committed("import/docs", GROUP)


def _importer_txn(spark: Any, table: Path) -> int | None:
    from jobs.spark.delta.sink import DeltaBatchSink

    return DeltaBatchSink(spark, str(table), f"importer/{GROUP}").txn_version()


def test_a_table_target_relands_documents_through_the_importer(spark: Any) -> None:
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    start = _now_ms() - 1000
    code, produced = run_importer("produce", "--count", "200", "--partitions", "2", "--seed", "5")
    assert code == 0 and produced["documents"] == 200, produced
    code, landed = run_importer("consume", *FAST)
    assert code == 0 and landed["imported"] == 200, landed
    end = _now_ms() + 1
    table = _home() / "delta" / "repository"
    landed_rows = _rows(table)
    positions, txn = _committed(), _importer_txn(spark, table)
    time.sleep(0.01)  # the next append is after `end`

    # Lose 20 rows, back-date 20 (an older version of them), and make 10 newer than the log's.
    ids = [r["id"] for r in landed_rows]
    lost, stale, newer = ids[:20], ids[20:40], ids[40:50]
    delta = DeltaTable.forPath(spark, str(table))
    delta.delete(F.col("id").isin(lost))
    delta.update(
        F.col("id").isin(stale), {"title": F.lit("stale"), "watermark": F.col("watermark") - 1}
    )
    delta.update(
        F.col("id").isin(newer), {"title": F.lit("newer"), "watermark": F.col("watermark") + 1}
    )
    expected = [
        {**r, "title": "newer", "watermark": r["watermark"] + 1} if r["id"] in newer else r
        for r in landed_rows
    ]
    argv = [
        *("--stream", "import/docs", "--start", _iso(start), "--end", _iso(end)),
        *("--target", "repository", "--target-kind", "table", *FAST),
    ]
    code, dry = _backfill(*argv, "--dry-run")
    assert code == 0 and dry["would_land"] == 200, dry
    code, done = _backfill(*argv)
    assert code == 0, done
    assert (done["read"], done["imported"], done["quarantined"]) == (200, 200, 0), done
    assert (done["inserted"], done["updated"]) == (20, 20), done
    assert _rows(table) == expected
    batches = {r["id"]: r["import_batch"] for r in _full_rows(table)}
    assert {batches[i] for i in lost + stale} == {start}  # the rows it wrote: its interval
    # Not an importer batch: its positions and its Delta transaction are as they were.
    assert _committed() == positions and _importer_txn(spark, table) == txn

    # Run again: the same table, to the landing time of each row.
    before = _full_rows(table)
    code, again = _backfill(*argv)
    assert code == 0, again
    assert (again["inserted"], again["updated"]) == (0, 0), again
    assert _full_rows(table) == before and len(before) == 200

    # The importer lands newer versions of the same documents; the old interval, replayed
    # again, leaves them.
    code, _ = run_importer("produce", "--count", "200", "--seed", "5")
    assert code == 0
    code, relanded = run_importer("consume", *FAST)
    assert code == 0 and relanded["imported"] == 200, relanded
    newest = _rows(table)
    assert all(
        n["source_offset"] > o["source_offset"] and n["watermark"] > o["watermark"]
        for n, o in zip(newest, landed_rows, strict=True)
    )
    code, old = _backfill(*argv)
    assert code == 0 and old["read"] == 200, old
    assert (old["inserted"], old["updated"]) == (0, 0), old
    assert _rows(table) == newest

    # An interval without documents lands nothing (and validates nothing).
    code, empty = _backfill(
        *("--stream", "import/docs", "--start", _iso(start - DAY_MS), "--end", _iso(start)),
        *("--target", "repository", "--target-kind", "table", *FAST),
    )
    assert code == 0 and empty["read"] == 0 and empty["inserted"] == 0, empty
    assert _rows(table) == newest
