"""The `streamcore` command line, run in-process through `main([...])` (plus one real console
script run): every command's output values, JSON output, exit codes and error messages."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import fastavro
import pytest
from cli_support import Result, cli_runner

from streamcore.cli.main import main
from streamcore.codecs import get_codec
from streamcore.config import load_config
from streamcore.log import LogPartition, partition_for_key
from streamcore.log.local.manager import LocalLogManager
from streamcore.record import Flag, Record
from streamcore.text import human_bytes, human_duration, render_table
from streamcore.watermark import Watermark

BASE_MS = 1_600_000_000_000  # 2020-09-13T12:26:40Z


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def cli(home: Path, capsys: pytest.CaptureFixture[str]) -> Callable[..., Result]:
    return cli_runner(home, capsys)


@pytest.fixture
def open_manager(home: Path) -> Iterator[Callable[[], LocalLogManager]]:
    """Managers for the test's own writes, on the CLI's home; close them before the CLI writes."""
    made: list[LocalLogManager] = []

    def make() -> LocalLogManager:
        m = LocalLogManager(config=load_config(home=home))
        made.append(m)
        return m

    yield make
    for m in made:
        m.close()


def record(
    i: int, ts: int = BASE_MS, *, key: str | None = None, flags: Flag = Flag.DEFAULT
) -> Record:
    return Record(key or f"k{i}", f"data-{i}".encode(), Watermark.of(ts + i, i % 7).value, flags)


def fill(
    make: Callable[[], LocalLogManager],
    name: str,
    partitions: int,
    per_partition: dict[int, list[tuple[Record, int]]],
    codec: str = "avro",
) -> None:
    """Create `name` and append, per partition, (Record, append timestamp) pairs."""
    m = make()
    m.create(name, partitions)
    enc = get_codec(codec)
    with m.appender(name) as appender:
        for p, items in per_partition.items():
            appender.append_batch(
                [(r.key, enc.encode(r)) for r, _ in items],
                partition=p,
                timestamps=[ts for _, ts in items],
            )
    m.close()


def simple_log(make: Callable[[], LocalLogManager], name: str = "test/a", count: int = 10) -> None:
    """`count` records k0..k{count-1} spread over 2 partitions by parity, 1 s apart."""
    parts: dict[int, list[tuple[Record, int]]] = {0: [], 1: []}
    for i in range(count):
        parts[i % 2].append((record(i), BASE_MS + i * 1000))
    fill(make, name, 2, parts)


def commit(make: Callable[[], LocalLogManager], name: str, group: str, offsets: list[int]) -> None:
    m = make()
    for p, offset in enumerate(offsets):
        m.commit_position(LogPartition.of(name, p), group, offset)
    m.close()


def raw_records(
    make: Callable[[], LocalLogManager], name: str
) -> list[tuple[int, int, str, bytes, int]]:
    """(partition, offset, key, value, timestamp) of every record, by partition then offset."""
    m = make()
    out = []
    with m.tailer("test/reader", name) as tailer:
        for rec in tailer:
            out.append(
                (rec.partition.partition, rec.offset, rec.key, bytes(rec.message), rec.timestamp)
            )
    m.close()
    return sorted(out)


# -- rendering helpers ------------------------------------------------------------------------
def test_table_right_aligns_numbers_and_has_a_rule() -> None:
    text = render_table(["name", "count"], [["a", 5], ["bbbb", 12345]])
    lines = text.splitlines()
    assert lines[0] == "name  count"
    assert lines[1] == "----  -----"
    assert lines[2] == "a         5"
    assert lines[3] == "bbbb  12345"


def test_human_units() -> None:
    assert human_duration(63_000) == "1m 3s"
    assert human_duration(350) == "350ms"
    assert human_duration(90_061_000) == "1d 1h 1m"
    assert human_bytes(1536) == "1.5 KiB"
    assert human_bytes(12) == "12 B"


# -- argument errors --------------------------------------------------------------------------
def test_no_command_is_a_usage_error(cli: Callable[..., Result]) -> None:
    res = cli()
    assert res.rc == 2
    assert "usage: streamcore" in res.err


def test_missing_log_option(cli: Callable[..., Result]) -> None:
    res = cli("cat")
    assert res.rc == 2
    assert "the following arguments are required: -l/--log" in res.err


def test_unknown_log_is_exit_2_with_hint(cli: Callable[..., Result]) -> None:
    for argv in (["lag", "-l", "no/such"], ["cat", "-l", "no/such"], ["groups", "-l", "no/such"]):
        res = cli(*argv)
        assert res.rc == 2, argv
        assert res.err.startswith("streamcore: error: log no/such does not exist")
        assert "streamcore logs" in res.err
        assert "Traceback" not in res.err


def test_invalid_log_name_is_exit_2(cli: Callable[..., Result]) -> None:
    res = cli("create", "-l", "bad-ns/x")
    assert res.rc == 2
    assert "invalid namespace 'bad-ns'" in res.err


def test_unknown_codec_is_exit_2(cli: Callable[..., Result], open_manager) -> None:
    simple_log(open_manager)
    res = cli("cat", "-l", "test/a", "--codec", "pickle")
    assert res.rc == 2
    assert "unknown codec 'pickle'" in res.err
    assert "avro" in res.err and "raw" in res.err


def test_bad_to_offset_is_exit_2(cli: Callable[..., Result], open_manager) -> None:
    simple_log(open_manager)
    res = cli("position", "-l", "test/a", "-g", "g/x", "--to-offset", "one:two")
    assert res.rc == 2
    assert "expected PARTITION:OFFSET" in res.err
    res = cli("position", "-l", "test/a", "-g", "g/x", "--to-offset", "0:99")
    assert res.rc == 2
    assert "test/a partition 0 ends at 5; offset 99 does not exist yet" in res.err
    res = cli("position", "-l", "test/a", "-g", "g/x", "--to-offset", "7:0")
    assert res.rc == 2
    assert "partitions 0..1" in res.err
    res = cli("position", "-l", "test/a", "-g", "g/x")
    assert res.rc == 2
    assert "one of the arguments --to-start --to-end --to-offset" in res.err


def test_other_errors_exit_1_without_traceback_unless_verbose(
    cli: Callable[..., Result], open_manager
) -> None:
    simple_log(open_manager)
    res = cli("create", "-l", "test/a")
    assert res.rc == 1
    assert "log test/a exists already with 2 partitions" in res.err
    assert "Traceback" not in res.err
    res = cli("-v", "create", "-l", "test/a")
    assert res.rc == 1
    assert "Traceback" in res.err


def test_global_options_after_the_command(
    cli: Callable[..., Result], home: Path, open_manager
) -> None:
    simple_log(open_manager)
    rc = main(["logs", "--json", "--home", str(home)])
    assert rc == 0
    res = cli("logs", "--json")
    assert [x["log"] for x in res.json()["logs"]] == ["test/a"]


# -- logs, create, delete, groups -------------------------------------------------------------
def test_create_then_logs(cli: Callable[..., Result], open_manager, home: Path) -> None:
    res = cli("create", "-l", "test/new", "-p", "3", "--retention", "12h", "--fsync", "batch")
    assert res.rc == 0
    assert res.out.strip() == "created log test/new (3 partitions, retention 12h)"
    assert json.loads((home / "log" / "test-new" / "metadata.json").read_text())["fsync"] == "batch"
    simple_log(open_manager)
    res = cli("logs")
    assert res.rc == 0
    lines = res.out.splitlines()
    assert lines[0].split() == [
        "log",
        "backend",
        "partitions",
        "records",
        "size",
        "retention",
        "groups",
        "oldest",
        "(UTC)",
        "newest",
        "(UTC)",
    ]
    row_a = next(line for line in lines if line.startswith("test/a "))
    assert row_a.split()[:4] == ["test/a", "local", "2", "10"]
    assert "2020-09-13 12:26:40.000" in row_a and "2020-09-13 12:26:49.000" in row_a
    assert "4d" in row_a
    row_new = next(line for line in lines if line.startswith("test/new "))
    assert row_new.split()[:6] == ["test/new", "local", "3", "0", "0", "B"]
    assert "12h" in row_new

    doc = cli("logs", "--json").json()
    by_name = {x["log"]: x for x in doc["logs"]}
    assert by_name["test/a"]["records"] == 10
    assert by_name["test/a"]["end_offsets"] == [5, 5]
    assert by_name["test/a"]["oldest"] == "2020-09-13T12:26:40.000Z"
    assert by_name["test/a"]["newest"] == "2020-09-13T12:26:49.000Z"
    assert by_name["test/a"]["size_bytes"] > 10 * 6
    assert by_name["test/new"]["retention_ms"] == 12 * 3_600_000


def test_create_bad_retention_and_if_not_exists(cli: Callable[..., Result]) -> None:
    res = cli("create", "-l", "test/x", "--retention", "four days")
    assert res.rc == 2
    assert "invalid --retention 'four days'" in res.err
    assert cli("create", "-l", "test/x", "-p", "2").rc == 0
    res = cli("create", "-l", "test/x", "--if-not-exists", "--json")
    assert res.rc == 0
    assert res.json() == {
        "log": "test/x",
        "created": False,
        "partitions": 2,
        "retention_ms": 4 * 86_400_000,
    }


def test_delete_needs_yes(cli: Callable[..., Result], open_manager, home: Path) -> None:
    simple_log(open_manager)
    res = cli("delete", "-l", "test/a")
    assert res.rc == 2
    assert "without --yes" in res.err
    assert (home / "log" / "test-a").is_dir()
    res = cli("delete", "-l", "test/a", "--yes")
    assert res.rc == 0
    assert res.out.strip() == "deleted log test/a (10 records)"
    assert not (home / "log" / "test-a").exists()
    assert cli("logs", "--json").json()["logs"] == []


def test_groups(cli: Callable[..., Result], open_manager) -> None:
    simple_log(open_manager)
    commit(open_manager, "test/a", "app/one", [2, 1])
    commit(open_manager, "test/a", "app/two", [5, 5])
    res = cli("groups", "-l", "test/a")
    assert res.rc == 0
    rows = [line.split() for line in res.out.splitlines()[2:]]
    assert rows == [["app/one", "3", "10", "7", "0"], ["app/two", "10", "10", "0", "0"]]
    doc = cli("groups", "-l", "test/a", "--json").json()
    assert doc == {
        "log": "test/a",
        "groups": [
            {"group": "app/one", "pos": 3, "end": 10, "lag": 7, "lost": 0},
            {"group": "app/two", "pos": 10, "end": 10, "lag": 0, "lost": 0},
        ],
    }


# -- lag, latency -----------------------------------------------------------------------------
def test_lag_all_logs_one_group_and_per_partition(cli: Callable[..., Result], open_manager) -> None:
    simple_log(open_manager, "test/a")
    simple_log(open_manager, "test/b", count=4)
    commit(open_manager, "test/a", "app/one", [2, 1])
    commit(open_manager, "test/b", "app/one", [2, 2])
    commit(open_manager, "test/b", "app/two", [0, 1])
    res = cli("lag")
    rows = [line.split() for line in res.out.splitlines()[2:]]
    assert rows == [
        ["test/a", "app/one", "3", "10", "7", "0"],
        ["test/b", "app/one", "4", "4", "0", "0"],
        ["test/b", "app/two", "1", "4", "3", "0"],
    ]
    res = cli("lag", "-l", "test/b", "-g", "app/two", "--verbose")
    rows = [line.split() for line in res.out.splitlines()[2:]]
    assert rows == [
        ["test/b", "app/two", "all", "1", "4", "3", "0"],
        ["test/b", "app/two", "0", "0", "2", "2", "0"],
        ["test/b", "app/two", "1", "1", "2", "1", "0"],
    ]
    doc = cli("lag", "-l", "test/a", "--json").json()
    group = doc["logs"][0]["groups"][0]
    assert (group["group"], group["pos"], group["end"], group["lag"]) == ("app/one", 3, 10, 7)
    assert [p["lag"] for p in group["partitions"]] == [3, 4]


def test_lag_lists_logs_without_groups(cli: Callable[..., Result], open_manager) -> None:
    simple_log(open_manager)
    res = cli("lag")
    assert res.out.splitlines()[2].split() == ["test/a", "(no", "group)", "-", "10", "-", "-"]


def test_latency_uses_record_watermarks(cli: Callable[..., Result], open_manager) -> None:
    now = time.time_ns() // 1_000_000
    wm_ts = now - 63_000
    parts = {
        0: [
            (Record("first", b"x", Watermark.of(wm_ts).value), now),
            (Record("second", b"y", Watermark.of(now).value), now),
        ]
    }
    fill(open_manager, "test/lat", 1, parts)
    commit(open_manager, "test/lat", "app/slow", [1])  # processed "first" only
    commit(open_manager, "test/lat", "app/done", [2])
    doc = cli("latency", "-l", "test/lat", "--json").json()
    groups = {g["group"]: g for g in doc["logs"][0]["groups"]}
    slow = groups["app/slow"]
    assert 63_000 <= slow["latency_ms"] < 63_000 + 30_000
    assert slow["key"] == "first"
    assert (slow["pos"], slow["end"], slow["lag"]) == (1, 2, 1)
    assert groups["app/done"]["latency_ms"] == 0
    res = cli("latency", "-l", "test/lat", "-g", "app/slow", "--verbose")
    assert res.rc == 0
    lines = res.out.splitlines()
    assert lines[0].split()[:6] == ["log", "group", "partition", "lag", "latency_ms", "latency"]
    assert re.search(r"test/lat\s+app/slow\s+all\s+1\s+6\d{4}\s+1m [34]s", lines[2])
    assert lines[2].rstrip().endswith("first")
    assert len(lines) == 4  # header, rule, all, partition 0


def test_latency_with_raw_codec_uses_append_time(cli: Callable[..., Result], open_manager) -> None:
    now = time.time_ns() // 1_000_000
    fill(open_manager, "test/lat", 1, {0: [(record(0), now - 5000), (record(1), now)]})
    commit(open_manager, "test/lat", "app/g", [1])
    doc = cli("latency", "-l", "test/lat", "--codec", "raw", "--json").json()
    latency = doc["logs"][0]["groups"][0]["latency_ms"]
    assert 5000 <= latency < 35_000  # append time, not the 2020 watermark


# -- cat, tail --------------------------------------------------------------------------------
LINE = re.compile(
    r"^(?P<pos>test-a-0\d:\+\d+) \| (?P<wm>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}:\d+) \| "
    r"(?P<flags>\[[A-Z_, ]+\]) \| (?P<key>\S+) \| (?P<len>\d+) \| (?P<data>.*)$"
)


def test_cat_renders_like_nuxeo(cli: Callable[..., Result], open_manager) -> None:
    simple_log(open_manager)
    res = cli("cat", "-l", "test/a")
    assert res.rc == 0
    lines = res.out.splitlines()
    assert len(lines) == 10
    parsed = [LINE.match(line) for line in lines]
    assert all(parsed), lines
    first = next(m for m in parsed if m["key"] == "k3")
    assert first["pos"] == "test-a-01:+1"
    assert first["wm"] == "2020-09-13 12:26:40.003:3"
    assert first["flags"] == "[DEFAULT]"
    assert (first["len"], first["data"]) == ("6", "data-3")
    # per partition, offsets in order
    for p in (0, 1):
        offsets = [
            int(m["pos"].split("+")[1]) for m in parsed if m["pos"].startswith(f"test-a-0{p}")
        ]
        assert offsets == [0, 1, 2, 3, 4]


def test_cat_options(cli: Callable[..., Result], open_manager) -> None:
    simple_log(open_manager)
    commit(open_manager, "test/a", "app/g", [4, 5])
    assert len(cli("cat", "-l", "test/a", "-n", "3").out.splitlines()) == 3
    res = cli("cat", "-l", "test/a", "-g", "app/g")
    assert [LINE.match(x)["key"] for x in res.out.splitlines()] == ["k8"]
    assert (
        cli("lag", "-l", "test/a", "-g", "app/g", "--json").json()["logs"][0]["groups"][0]["pos"]
        == 9
    )
    res = cli("cat", "-l", "test/a", "-p", "1", "--data-format", "hex")
    lines = res.out.splitlines()
    assert len(lines) == 5
    assert lines[0].endswith(" | k1 | 6 | " + b"data-1".hex())
    res = cli("cat", "-l", "test/a", "-p", "0", "-n", "1", "--data-format", "none")
    assert res.out.strip().endswith("| k0 | 6")
    res = cli("cat", "-l", "test/a", "-p", "0", "-n", "1", "--codec", "raw")
    pos, when, flags, key, length, _data = res.out.strip().split(" | ")
    assert (pos, when, flags, key) == ("test-a-00:+0", "2020-09-13 12:26:40.000", "[raw]", "k0")
    assert int(length) > 6  # the encoded envelope
    assert cli("cat", "-l", "test/a", "-p", "2").rc == 2


def test_cat_json_lines(cli: Callable[..., Result], open_manager) -> None:
    fill(
        open_manager,
        "test/a",
        1,
        {0: [(record(0, flags=Flag.DEFAULT | Flag.COMMIT), BASE_MS), (record(1), BASE_MS + 1)]},
    )
    docs = cli("cat", "-l", "test/a", "--json", "--data-format", "base64").json_lines()
    assert [d["key"] for d in docs] == ["k0", "k1"]
    assert docs[0]["flags"] == ["DEFAULT", "COMMIT"]
    assert docs[0]["watermark"] == Watermark.of(BASE_MS, 0).value
    assert docs[0]["position"] == "test-a-00:+0"
    assert docs[1]["time"] == "2020-09-13T12:26:40.001Z"
    assert docs[1]["data"] == "ZGF0YS0x"  # base64 of data-1


def test_cat_shows_undecodable_records_raw(cli: Callable[..., Result], open_manager) -> None:
    m = open_manager()
    m.create("test/bad", 1)
    with m.appender("test/bad") as a:
        a.append("junk", b"not an envelope")
    m.close()
    res = cli("cat", "-l", "test/bad")
    assert res.rc == 0
    assert "[undecodable] | junk | 15 | not an envelope" in res.out
    assert "1 record(s) could not be decoded with codec avro" in res.err


def test_tail_last_records(cli: Callable[..., Result], open_manager) -> None:
    simple_log(open_manager)
    res = cli("tail", "-l", "test/a", "-n", "3")
    assert [LINE.match(x)["key"] for x in res.out.splitlines()] == ["k7", "k8", "k9"]
    docs = cli("tail", "-l", "test/a", "-n", "2", "--json").json_lines()
    assert [(d["partition"], d["offset"], d["key"]) for d in docs] == [(0, 4, "k8"), (1, 4, "k9")]
    assert cli("tail", "-l", "test/a", "-n", "0").out == ""


def test_tail_follow_sees_new_records(cli: Callable[..., Result], open_manager) -> None:
    simple_log(open_manager)

    def later() -> None:
        time.sleep(0.5)
        m = LocalLogManager(config=open_manager().config)
        with m.appender("test/a") as a:
            a.append(
                "fresh",
                get_codec("avro").encode(Record("fresh", b"new!", Watermark.of_now().value)),
            )
        m.close()

    thread = threading.Thread(target=later)
    thread.start()
    started = time.monotonic()
    res = cli("tail", "-l", "test/a", "-n", "1", "-f", "--max-seconds", "2.5")
    thread.join()
    assert res.rc == 0
    assert time.monotonic() - started >= 2.0
    keys = [LINE.match(x)["key"] for x in res.out.splitlines()]
    assert keys == ["k9", "fresh"]


def test_console_script_tail_follow_stops_on_sigint(home: Path, open_manager) -> None:
    simple_log(open_manager)
    script = Path(sys.executable).parent / "streamcore"
    proc = subprocess.Popen(
        [str(script), "--home", str(home), "tail", "-l", "test/a", "-n", "1", "-f", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True)
    reader.start()
    try:
        assert json.loads(lines.get(timeout=30))["key"] == "k9"
        m = open_manager()
        with m.appender("test/a") as a:
            a.append(
                "live", get_codec("avro").encode(Record("live", b"z", Watermark.of_now().value))
            )
        m.close()
        assert json.loads(lines.get(timeout=30))["key"] == "live"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "Traceback" not in proc.stderr.read()


# -- position ---------------------------------------------------------------------------------
def lag_of(cli: Callable[..., Result], group: str) -> list[tuple[int, int]]:
    doc = cli("lag", "-l", "test/a", "-g", group, "--json").json()
    return [(p["pos"], p["lag"]) for p in doc["logs"][0]["groups"][0]["partitions"]]


def test_position_variants_then_lag(cli: Callable[..., Result], open_manager) -> None:
    # partition 0: 10 records at 40s..49s; partition 1: 5 records at 40s..44s
    parts = {
        0: [(record(i), BASE_MS + i * 1000) for i in range(10)],
        1: [(record(i, key=f"p1-{i}"), BASE_MS + i * 1000) for i in range(5)],
    }
    fill(open_manager, "test/a", 2, parts)
    g = "app/g"
    res = cli("position", "-l", "test/a", "-g", g, "--to-end")
    assert res.rc == 0
    assert "moved group app/g on test/a (to-end), 2 of 2 partition(s)" in res.out
    assert lag_of(cli, g) == [(10, 0), (5, 0)]

    assert cli("position", "-l", "test/a", "-g", g, "--to-offset", "1:2").rc == 0
    assert lag_of(cli, g) == [(10, 0), (2, 3)]
    assert cli("position", "-l", "test/a", "-g", g, "-p", "0", "--to-offset", "7").rc == 0
    assert lag_of(cli, g) == [(7, 3), (2, 3)]

    doc = cli(
        "position", "-l", "test/a", "-g", g, "--after-date", "2020-09-13T12:26:45Z", "--json"
    ).json()
    assert doc["action"] == "after-date 2020-09-13T12:26:45.000Z"
    assert [(p["before"], p["after"]) for p in doc["partitions"]] == [(7, 5), (2, 5)]
    assert lag_of(cli, g) == [(5, 5), (5, 0)]  # partition 1 has nothing after the date: end

    assert cli("position", "-l", "test/a", "-g", g, "-p", "1", "--to-start").rc == 0
    assert lag_of(cli, g) == [(5, 5), (0, 5)]
    assert cli("position", "-l", "test/a", "-g", g, "--reset").rc == 0
    assert lag_of(cli, g) == [(0, 10), (0, 5)]
    res = cli("position", "-l", "test/a", "-g", g, "--after-date", "yesterday")
    assert res.rc == 2
    assert "not an ISO 8601 date" in res.err


# -- copy -------------------------------------------------------------------------------------
def test_copy_keeps_partitions_order_and_timestamps(
    cli: Callable[..., Result], open_manager
) -> None:
    parts = {
        p: [(record(i, key=f"k{p}-{i}"), BASE_MS + i * 10 + p) for i in range(40)] for p in range(3)
    }
    fill(open_manager, "test/src", 3, parts)
    res = cli("copy", "--src", "test/src", "--dest", "test/dst", "--batch", "7")
    assert res.rc == 0
    assert res.out.startswith("copied 120 records")
    assert "copy test/src -> test/dst: 120 records" in res.err
    assert raw_records(open_manager, "test/dst") == raw_records(open_manager, "test/src")
    doc = cli("logs", "--json").json()
    assert {x["log"]: x["partitions"] for x in doc["logs"]} == {"test/src": 3, "test/dst": 3}
    res = cli("copy", "--src", "test/src", "--dest", "test/dst")
    assert res.rc == 2
    assert "--dest test/dst exists already" in res.err


def test_copy_of_history_rolls_the_destination_by_record_time(
    cli: Callable[..., Result], open_manager
) -> None:
    """Eight days of history (four records a day) copied in batches of 10,000: the destination
    gets a segment per day (its segment_roll), so retention can purge it day by day; the one
    batch spanning the eight days used to land in one segment."""
    day = 86_400_000
    fill(open_manager, "test/src", 1, {0: [(record(i), BASE_MS + i * day // 4) for i in range(32)]})
    assert cli("copy", "--src", "test/src", "--dest", "test/dst").rc == 0
    folder = open_manager().partition_folder(LogPartition.of("test/dst", 0))
    assert sorted(p.name for p in folder.glob("*.log")) == [f"{4 * d:020d}.log" for d in range(8)]
    assert raw_records(open_manager, "test/dst") == raw_records(open_manager, "test/src")


def test_copy_transcodes_and_commits_group(cli: Callable[..., Result], open_manager) -> None:
    fill(open_manager, "test/src", 1, {0: [(record(i), BASE_MS + i) for i in range(5)]})
    commit(open_manager, "test/src", "app/copier", [2])
    doc = cli(
        "copy",
        "--src",
        "test/src",
        "--dest",
        "test/json",
        "--dest-codec",
        "json",
        "-g",
        "app/copier",
        "--json",
    ).json()
    assert (doc["records"], doc["mode"]) == (3, "transcode")
    json_codec = get_codec("json")
    copied = [json_codec.decode(v) for _, _, _, v, _ in raw_records(open_manager, "test/json")]
    assert [(r.key, r.data, r.watermark) for r in copied] == [
        (f"k{i}", f"data-{i}".encode(), Watermark.of(BASE_MS + i, i % 7).value) for i in (2, 3, 4)
    ]
    assert (
        cli("lag", "-l", "test/src", "-g", "app/copier", "--json").json()["logs"][0]["groups"][0][
            "lag"
        ]
        == 0
    )


# -- dump, append -----------------------------------------------------------------------------
def test_dump_append_round_trip(cli: Callable[..., Result], open_manager, tmp_path: Path) -> None:
    parts = {
        p: [
            (
                record(
                    i, key=f"doc-{p}-{i}", flags=Flag.DEFAULT | (Flag.USER1 if i % 3 == 0 else 0)
                ),
                BASE_MS + i,
            )
            for i in range(25)
        ]
        for p in range(3)
    }
    fill(open_manager, "test/src", 3, parts)
    out = tmp_path / "dump.avro"
    res = cli("dump", "-l", "test/src", "--output", str(out))
    assert res.rc == 0
    assert res.out.startswith(f"dumped 75 records of test/src to {out}")

    with out.open("rb") as fo:  # a standard Avro container any tool reads with Record.avsc
        reader = fastavro.reader(fo)
        assert reader.metadata["streamcore.log"] == "test/src"
        assert reader.metadata["streamcore.partitions"] == "3"
        assert reader.writer_schema["name"] == "org.nuxeo.lib.stream.computation.Record"
        rows = list(reader)
    assert len(rows) == 75
    assert {(r["partition"], r["offset"]) for r in rows} == {
        (p, i) for p in range(3) for i in range(25)
    }
    assert rows[0]["appendTimestamp"] == BASE_MS

    res = cli("append", "-l", "test/copy", "--input", str(out), "--batch", "10")
    assert res.rc == 0
    assert "appended 75 records" in res.out and "new log test/copy" in res.out
    avro = get_codec("avro")
    src = [(p, o, k, avro.decode(v)) for p, o, k, v, _ in raw_records(open_manager, "test/src")]
    dst = [(p, o, k, avro.decode(v)) for p, o, k, v, _ in raw_records(open_manager, "test/copy")]
    assert [(p, o, k, r.key, r.data, r.watermark, r.flags) for p, o, k, r in dst] == [
        (p, o, k, r.key, r.data, r.watermark, r.flags) for p, o, k, r in src
    ]

    # into a log with another partition count: by key
    assert cli("create", "-l", "test/other", "-p", "2").rc == 0
    doc = cli("append", "-l", "test/other", "-i", str(out), "--json").json()
    assert (doc["records"], doc["kept_partition"], doc["created"]) == (75, 0, False)
    for p, _, key, _, _ in raw_records(open_manager, "test/other"):
        assert p == partition_for_key(key, 2)

    res = cli("dump", "-l", "test/src", "--output", str(out))
    assert res.rc == 2 and "--force" in res.err


def test_dump_options_and_raw(cli: Callable[..., Result], open_manager, tmp_path: Path) -> None:
    simple_log(open_manager)
    commit(open_manager, "test/a", "app/g", [3, 5])
    out = tmp_path / "part.avro"
    doc = cli("dump", "-l", "test/a", "-o", str(out), "-g", "app/g", "-p", "0", "--json").json()
    assert doc["records"] == 2
    with out.open("rb") as fo:
        assert [r["key"] for r in fastavro.reader(fo)] == ["k6", "k8"]
    raw = tmp_path / "raw.avro"
    assert cli("dump", "-l", "test/a", "-o", str(raw), "--codec", "raw", "-n", "4").rc == 0
    assert (
        cli("append", "-l", "test/raw", "-i", str(raw), "--codec", "raw", "--keep-timestamps").rc
        == 0
    )
    src = {(k, v, t) for _, _, k, v, t in raw_records(open_manager, "test/a")}
    dst = raw_records(open_manager, "test/raw")
    assert len(dst) == 4 and {(k, v, t) for _, _, k, v, t in dst} <= src


def test_append_rejects_non_avro_input(cli: Callable[..., Result], tmp_path: Path) -> None:
    bad = tmp_path / "bad.avro"
    bad.write_bytes(b"hello")
    res = cli("append", "-l", "test/x", "-i", str(bad))
    assert res.rc == 2
    assert "is not an Avro container file" in res.err
    res = cli("append", "-l", "test/x", "-i", str(tmp_path / "missing.avro"))
    assert res.rc == 2
    assert "No such file" in res.err


# -- purge ------------------------------------------------------------------------------------
def test_purge_removes_expired_segments(
    cli: Callable[..., Result], open_manager, home: Path
) -> None:
    m = open_manager()
    m.create("test/old", 1, retention="1s", segment_bytes=4096)
    old = time.time_ns() // 1_000_000 - 3_600_000  # appended an hour ago: expired
    with m.appender("test/old") as a:
        for i in range(20):
            a.append_batch([(f"k{i}-{j}", b"x" * 100) for j in range(10)], timestamps=[old] * 10)
    m.close()
    commit(open_manager, "test/old", "app/late", [0])
    folder = home / "log" / "test-old" / "P-00"
    segments = sorted(folder.glob("*.log"))
    assert len(segments) > 2
    # app/late has read nothing: the expired segments stay for it, and the run says so
    res = cli("purge", "-l", "test/old")
    assert "purged 0 segment(s), 0 record(s) from test/old" in res.out
    assert "app/late" in res.out and "--force" in res.out
    assert len(sorted(folder.glob("*.log"))) == len(segments)
    plan = cli("purge", "-l", "test/old", "--force", "--dry-run", "--json").json()
    assert plan["dry_run"] and plan["segments_removed"] == len(segments) - 1
    assert len(sorted(folder.glob("*.log"))) == len(segments)  # a dry run changes nothing
    doc = cli("purge", "-l", "test/old", "--force", "--json").json()
    assert doc["segments_removed"] == len(segments) - 1  # the active segment stays
    assert doc["records_removed"] == plan["records_removed"] > 0
    assert doc["partitions"][0]["first_offset"] == doc["records_removed"]
    # neither app/late nor the archiver (test/old is archived by default) had read them
    lost = doc["records_removed"]
    assert doc["partitions"][0]["lost"] == {"app/late": lost, "retention/archiver": lost}
    lag = cli("lag", "-l", "test/old", "--json").json()["logs"][0]["groups"][0]
    assert lag["lost"] == doc["records_removed"]
    res = cli("purge", "-l", "test/old")
    assert "purged 0 segment(s), 0 record(s) from test/old" in res.out


# -- demo -------------------------------------------------------------------------------------
def test_demo_command(cli: Callable[..., Result], home: Path) -> None:
    res = cli("demo", "--count", "3000", "--batch", "1000", "--partitions", "2")
    assert res.rc == 0
    assert "streamcore demo: 3,000 records of 100 bytes, 2 partitions, codec avro" in res.out
    assert re.search(r"demo/consumer\s+before consuming\s+0\s+3000\s+3000", res.out)
    assert re.search(r"demo/consumer\s+after consuming\s+3000\s+3000\s+0", res.out)
    assert str(home / "log" / "demo-records") in res.out
    assert "read: 3,000/3,000 records (100%)" in res.err
    doc = cli("demo", "--count", "500", "--json").json()
    assert (doc["written"], doc["read"], doc["lag_after"]["lag"]) == (500, 500, 0)
    res = cli("demo", "--codec", "nope")
    assert res.rc == 2 and "unknown codec 'nope'" in res.err
