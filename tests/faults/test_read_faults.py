"""Read-path faults: records a tailer cannot turn into a LogRecord (a value its codec rejects, a
key that is not UTF-8 written by a foreign producer or below the API) and schema-registry
credentials reaching errors and logs.

Promise: a tailer never moves past a record it did not return. A record it cannot decode raises
`UndecodableRecordError` (a `CodecError`) with the tailer standing at it; every record before it
is delivered once, and `skip_one()` (or a seek past it) moves on to the next one.
"""

from __future__ import annotations

import array
import base64
import http.server
import json
import logging
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from streamcore.cli.main import main
from streamcore.codecs import JsonCodec, get_codec
from streamcore.codecs.registry import ConfluentSchemaRegistry, open_registry
from streamcore.computation import (
    Computation,
    ComputationPolicy,
    DeadLetter,
    Settings,
    StreamProcessor,
    Topology,
)
from streamcore.config import load_config
from streamcore.errors import CodecError, LogError, UndecodableRecordError
from streamcore.log import LogManager, LogOffset, LogPartition
from streamcore.log.local.manager import LocalLogManager
from streamcore.log.local.segment import encode_columns, list_segments, segment_name
from streamcore.names import Name
from streamcore.record import Record
from streamcore.redact import redact_credentials

GOOD = [json.dumps({"n": i}).encode() for i in range(6)]
BAD_VALUE = b"{not json"
BAD_KEY = b"\xff\xfebinary"


def fill(manager: LogManager, name: str, values: list[bytes]) -> LogPartition:
    manager.appender(name).append_batch([(f"k{i}", v) for i, v in enumerate(values)], partition=0)
    return LogPartition(Name.of(name), 0)


# -- 1. a value the tailer's codec rejects ------------------------------------------------------
def test_read_batch_returns_the_records_before_an_undecodable_one_and_stands_at_it(
    manager: LogManager, new_log: Callable[..., str]
) -> None:
    name = new_log(1)
    p = fill(manager, name, [GOOD[0], GOOD[1], BAD_VALUE, GOOD[3], GOOD[4]])
    with manager.tailer("g", name, codec=JsonCodec()) as tailer:
        first = tailer.read_batch(100, timeout=5)
        assert [(r.offset, r.message) for r in first] == [(0, {"n": 0}), (1, {"n": 1})]
        assert tailer.position(p) == 2
        for _ in range(2):  # it stands at the bad record: every call fails the same way
            with pytest.raises(UndecodableRecordError) as failed:
                tailer.read_batch(100, timeout=1)
            assert isinstance(failed.value, CodecError)
            assert failed.value.offset == LogOffset(p, 2)
            assert failed.value.value == BAD_VALUE and failed.value.key == b"k2"
            assert "skip_one()" in str(failed.value)
            assert tailer.position(p) == 2
        assert tailer.skip_one() == LogOffset(p, 2)
        rest = tailer.read_batch(100, timeout=5)
        assert [(r.offset, r.message) for r in rest] == [(3, {"n": 3}), (4, {"n": 4})]
        assert tailer.commit() == {p: 5}


def test_read_stands_at_an_undecodable_record_and_a_seek_moves_past_it(
    manager: LogManager, new_log: Callable[..., str]
) -> None:
    name = new_log(1)
    p = fill(manager, name, [GOOD[0], BAD_VALUE, GOOD[2]])
    with manager.tailer("g", name, codec=JsonCodec()) as tailer:
        assert tailer.read(timeout=5).message == {"n": 0}  # type: ignore[union-attr]
        with pytest.raises(UndecodableRecordError) as failed:
            tailer.read(timeout=1)
        assert failed.value.offset == LogOffset(p, 1)
        assert tailer.position(p) == 1
        tailer.commit()
        assert manager.committed(name, "g") == [1]  # the failing record is not committed
        tailer.seek(LogOffset(p, failed.value.offset.offset + 1))
        assert tailer.read(timeout=5).message == {"n": 2}  # type: ignore[union-attr]
        with pytest.raises(LogError, match="skip_one"):
            tailer.skip_one()  # nothing undecodable at the read position


def test_an_undecodable_record_first_in_a_batch_loses_nothing_after_it(
    manager: LogManager, new_log: Callable[..., str]
) -> None:
    name = new_log(1)
    p = fill(manager, name, [BAD_VALUE, *GOOD[1:5]])
    with manager.tailer("g", name, codec=JsonCodec()) as tailer:
        with pytest.raises(UndecodableRecordError):
            tailer.read_batch(3, timeout=5)
        assert tailer.position(p) == 0
        tailer.skip_one()
        got = []
        while batch := tailer.read_batch(3, timeout=1):
            got += [r.offset for r in batch]
        assert got == [1, 2, 3, 4]


def test_a_reader_that_skips_undecodable_records_gets_every_other_one_once(
    manager: LogManager, new_log: Callable[..., str]
) -> None:
    name = new_log(2)
    appender = manager.appender(name)
    appender.append_batch([("a", GOOD[0]), ("b", BAD_VALUE), ("c", GOOD[2])], partition=0)
    appender.append_batch([("d", BAD_VALUE), ("e", GOOD[4]), ("f", GOOD[5])], partition=1)
    got, skipped = [], []
    with manager.tailer("g", name, codec=JsonCodec()) as tailer:
        for _ in range(50):
            try:
                batch = tailer.read_batch(2, timeout=0.5)
            except UndecodableRecordError:
                skipped.append(tailer.skip_one())
                continue
            got += [(r.partition.partition, r.offset) for r in batch]
            if len(got) == 4 and not batch:
                break
        assert tailer.commit() == {
            LogPartition(Name.of(name), 0): 3,
            LogPartition(Name.of(name), 1): 3,
        }
    assert sorted(got) == [(0, 0), (0, 2), (1, 1), (1, 2)]
    assert sorted((o.partition.partition, o.offset) for o in skipped) == [(0, 1), (1, 0)]


# -- 2. a key that is not UTF-8 ----------------------------------------------------------------
KEYS = [b"k0", b"k1", b"k2", b"k3", BAD_KEY, b"k5"]


def _ints(values: list[int]) -> bytes:
    return array.array("i", values).tobytes()


def _write_below_api(manager: LogManager, name: str, base: int, values: list[bytes]) -> None:
    """Append one batch of `KEYS[base:]` straight to the newest segment file, as a foreign writer
    (or an older version) could have done."""
    assert isinstance(manager, LocalLogManager)
    folder = manager.partition_folder(LogPartition(Name.of(name), 0))
    keys = KEYS[base : base + len(values)]
    key_offsets, value_offsets = [0], [0]
    for k, v in zip(keys, values, strict=True):
        key_offsets.append(key_offsets[-1] + len(k))
        value_offsets.append(value_offsets[-1] + len(v))
    parts, _ = encode_columns(
        base,
        len(values),
        _ints(key_offsets),
        b"".join(keys),
        _ints(value_offsets),
        b"".join(values),
        1,
    )
    with open(folder / segment_name(list_segments(folder)[-1]), "ab") as f:
        f.write(b"".join(bytes(x) for x in parts))


def _produce_foreign(manager: LogManager, name: str, base: int, values: list[bytes]) -> None:
    """A foreign producer (plain confluent-kafka, no streamcore) writes `KEYS[base:]`."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": manager.bootstrap_servers})  # type: ignore[attr-defined]
    topic = manager.topic(name)  # type: ignore[attr-defined]
    for key, value in zip(KEYS[base:], values, strict=True):
        producer.produce(topic, key=key, value=value, partition=0)
    assert producer.flush(10) == 0


BinaryKeyLog = Callable[[list[bytes]], tuple[LogManager, str]]


@pytest.fixture(params=["local", pytest.param("kafka", marks=pytest.mark.kafka)])
def binary_key_log(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BinaryKeyLog]:
    """`binary_key_log(values)` -> (manager, name) of a 1-partition log holding the 6 values
    with `KEYS`: records 0..2 appended through the API, 3..5 by a foreign writer; record 4 has a
    key that is not UTF-8."""
    from log_fixtures import MANAGER_FACTORIES

    managers = [MANAGER_FACTORIES[request.param](tmp_path)]

    def make(values: list[bytes]) -> tuple[LogManager, str]:
        name = "test/binary-key"
        manager = managers[-1]
        manager.create(name, 1)
        with manager.appender(name) as appender:
            appender.append_batch(
                [(k.decode(), v) for k, v in zip(KEYS[:3], values[:3], strict=True)], partition=0
            )
        if request.param == "kafka":
            _produce_foreign(manager, name, 3, values[3:])
            return manager, name
        manager.close()  # the writer lets go of the partition, as for another process
        _write_below_api(manager, name, 3, values[3:])
        managers.append(MANAGER_FACTORIES["local"](tmp_path))
        return managers[-1], name

    yield make
    for manager in managers:
        manager.close()


def test_a_binary_key_is_a_codec_error_at_that_record_not_a_crash(
    binary_key_log: BinaryKeyLog,
) -> None:
    manager, name = binary_key_log(GOOD)
    p = LogPartition(Name.of(name), 0)
    with manager.tailer("g", name) as tailer:
        got: list[tuple[int, str]] = []
        while len(got) < 4:
            got += [(r.offset, r.key) for r in tailer.read_batch(100, timeout=5)]
        assert got == [(0, "k0"), (1, "k1"), (2, "k2"), (3, "k3")]
        for _ in range(2):
            with pytest.raises(UndecodableRecordError) as failed:
                tailer.read_batch(100, timeout=1)
            assert failed.value.offset == LogOffset(p, 4)
            assert (failed.value.key, failed.value.value) == (BAD_KEY, GOOD[4])
            assert "UTF-8" in str(failed.value) and "skip_one()" in str(failed.value)
            assert tailer.position(p) == 4
        with pytest.raises(UndecodableRecordError):
            tailer.read(timeout=1)
        assert tailer.skip_one() == LogOffset(p, 4)
        last = tailer.read(timeout=5)
        assert last is not None and (last.offset, last.key) == (5, "k5")
        assert tailer.commit() == {p: 6}


def test_a_binary_key_in_read_arrow_stands_at_that_record(binary_key_log: BinaryKeyLog) -> None:
    manager, name = binary_key_log(GOOD)
    p = LogPartition(Name.of(name), 0)
    with manager.tailer("g", name) as tailer:
        offsets: list[int] = []
        while len(offsets) < 4:
            batch = tailer.read_arrow(timeout=5)
            assert batch is not None
            batch.validate(full=True)  # a string column holds only valid UTF-8
            offsets += batch.column("offset").to_pylist()
        assert offsets == [0, 1, 2, 3]
        with pytest.raises(UndecodableRecordError) as failed:
            tailer.read_arrow(timeout=1)
        assert failed.value.offset == LogOffset(p, 4)
        assert tailer.position(p) == 4
        tailer.skip_one()
        batch = tailer.read_arrow(timeout=5)
        assert batch is not None and batch.column("key").to_pylist() == ["k5"]


def test_lag_and_latency_past_a_binary_key(binary_key_log: BinaryKeyLog) -> None:
    manager, name = binary_key_log(GOOD)
    manager.commit_position(LogPartition(Name.of(name), 0), "g", 5)  # type: ignore[attr-defined]
    (latency,) = manager.latency_per_partition(name, "g")
    assert latency.key == "\\xff\\xfebinary" and latency.lag.lag == 1


class _Copy(Computation):
    def __init__(self) -> None:
        super().__init__("copy", 1, 1)

    def process_record(self, context: Any, input_stream: str, record: Record) -> None:
        context.produce_record("o1", record)
        context.ask_for_checkpoint()


def test_a_processor_dead_letters_a_binary_key_and_goes_on(
    binary_key_log: BinaryKeyLog,
) -> None:
    """The processor reads raw records and decodes them itself: a binary key must take its
    undecodable path (here the dead-letter stream), not terminate the unit on every restart."""
    codec = get_codec("json")
    records = [Record.of(k.decode(errors="replace"), b"v%d" % i) for i, k in enumerate(KEYS)]
    manager, name = binary_key_log([codec.encode(r) for r in records])
    topology = Topology.builder().add_computation(_Copy, [f"i1:{name}", "o1:test/out"]).build()
    settings = Settings(drain_quiet=0.3, default_codec="json").set_policy(
        "copy", ComputationPolicy(max_retries=0, dlq="test/dlq-copy")
    )
    processor = StreamProcessor(manager, topology, settings).start()
    try:
        assert processor.drain_and_stop(60)
    finally:
        processor.stop()
    assert processor.failed_computations() == []
    with manager.tailer("check", "test/out", codec) as tailer:
        assert [r.message.data for r in tailer] == [b"v0", b"v1", b"v2", b"v3", b"v5"]
    with manager.tailer("check", "test/dlq-copy", codec) as tailer:
        letters = [DeadLetter.of(r.message) for r in tailer]
    assert [(d.offset, d.record.data) for d in letters] == [(4, codec.encode(records[4]))]
    assert manager.committed(name, "copy") == [6]


# -- 3. schema-registry credentials -------------------------------------------------------------
SECRET = "s3cr3t-Pa55"
URL = f"https://alice:{SECRET}@registry.example:8081"


def test_redact_credentials_masks_the_password_of_every_url() -> None:
    assert redact_credentials(URL) == "https://alice:***@registry.example:8081"
    text = f"at {URL}/subjects and http://bob:x%40y@h2/ too; no creds in http://h3/"
    assert redact_credentials(text) == (
        "at https://alice:***@registry.example:8081/subjects and http://bob:***@h2/ too; "
        "no creds in http://h3/"
    )
    assert redact_credentials("https://u:p@ss@host/x") == "https://u:***@host/x"


def test_registry_credentials_never_reach_reprs(tmp_path: Path) -> None:
    registry = ConfluentSchemaRegistry(URL)
    config = load_config(home=tmp_path, schema_registry_url=URL)
    for text in (repr(registry), repr(config), str(config), repr(open_registry(config))):
        assert SECRET not in text and "alice:***@registry.example" in text


class _FailingClient:
    def __init__(self, error: Exception) -> None:
        self.error = error

    def register_schema(self, subject: str, schema: Any) -> int:
        raise self.error

    def get_schema(self, schema_id: int) -> Any:
        raise self.error


def test_registry_credentials_never_reach_errors(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    found = type("NotFound", (Exception,), {"http_status_code": 404})(f"no such id at {URL}")
    cases = [
        ConfluentSchemaRegistry(URL, client=_FailingClient(found)),
        ConfluentSchemaRegistry(URL, client=_FailingClient(OSError(f"cannot reach {URL}"))),
    ]
    messages = []
    for registry in cases:
        for call in (lambda r: r.get(7), lambda r: r.register("s", '"string"')):
            with pytest.raises(CodecError) as failed:
                call(registry)
            messages.append(str(failed.value))
    with pytest.raises(CodecError) as failed:  # the client rejects the url itself
        ConfluentSchemaRegistry(f"ftp://alice:{SECRET}@registry.example")
    messages.append(str(failed.value))
    for message in messages:
        assert SECRET not in message and "alice:***@" in message
    assert SECRET not in caplog.text


class _Registry(http.server.BaseHTTPRequestHandler):
    """A schema registry that knows one schema, id 1 (`"string"`)."""

    auth: list[str] = []

    def do_GET(self) -> None:
        type(self).auth.append(self.headers.get("Authorization", ""))
        if self.path == "/schemas/ids/1":
            status, body = 200, {"schema": '"string"', "schemaType": "AVRO"}
        else:
            status, body = 404, {"error_code": 40403, "message": "Schema not found"}
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def registry_url() -> Iterator[str]:
    """The URL, with credentials, of a live `_Registry` (bounded: shut down at teardown)."""
    pytest.importorskip("confluent_kafka.schema_registry")
    _Registry.auth = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Registry)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://alice:{SECRET}@127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    thread.join(5)
    server.server_close()


def test_registry_credentials_are_sent_as_basic_auth_not_logged(
    registry_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The credentials still authenticate, and no log line (ours or the HTTP client's) shows
    them."""
    caplog.set_level(logging.DEBUG)
    assert ConfluentSchemaRegistry(registry_url).get(1).raw == "string"
    assert _Registry.auth == ["Basic " + base64.b64encode(f"alice:{SECRET}".encode()).decode()]
    assert "HTTP Request" in caplog.text  # the client did log the request, without them
    assert SECRET not in caplog.text


def test_registry_credentials_never_reach_the_command_line(
    registry_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """`streamcore cat` of a record whose schema id the registry does not know."""
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("STREAMCORE_CODEC_SCHEMA_REGISTRY_URL", registry_url)
    home = tmp_path / "home"
    with LocalLogManager(config=load_config(home=home)) as manager:
        manager.create("test/confluent", 1)
        manager.appender("test/confluent").append("k", b"\x00\x00\x00\x00\x07\x02")
    argv = ["cat", "-l", "test/confluent", "--codec", "avro-confluent", "--json"]
    rc = main(["--home", str(home), *argv])
    out, err = capsys.readouterr()
    shown = out + err + caplog.text
    assert "schema id 7" in shown and "alice:***@127.0.0.1" in shown, (rc, shown)
    assert SECRET not in shown


@pytest.mark.parametrize("binary_key_log", ["local"], indirect=True)  # the log of --home
def test_the_command_line_names_the_commands_past_a_binary_key(
    binary_key_log: BinaryKeyLog, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, name = binary_key_log([b"v%d" % i for i in range(6)])
    rc = main(["--home", str(tmp_path), "cat", "-l", name, "--codec", "raw"])
    out, err = capsys.readouterr()
    assert rc == 1
    assert out.count("\n") == 4, out  # records 0..3, then the key of record 4 stops the read
    assert "is not UTF-8" in err
    assert f"streamcore cat -l {name} -p 0 --codec raw" in err
    assert f"streamcore position -l {name} -g GROUP --to-offset 0:5" in err
