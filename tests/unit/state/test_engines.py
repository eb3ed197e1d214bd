"""The `StoreEngine` contract, one suite over every engine (as Quix Streams tests its stores):
bytewise order, ranges, deletes, the checkpoint written atomically with the changes and kept
apart from the keys, clear, close; for the persistent engine also reopening, crash atomicity
under SIGKILL and the directory lock between processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from streamcore.errors import InvalidArgumentError, StateError, StoreLockedError
from streamcore.state.engine import StoreEngine
from streamcore.state.engines import ENGINES, open_engine
from streamcore.state.engines.memory import MemoryEngine
from streamcore.state.lock import LOCK_FILE, StoreLock

OpenEngine = Callable[[], StoreEngine]

KEYS = [
    b"",
    b"\x00",
    b"a",
    b"ab",  # a prefix of the next one, and "a" of both
    b"abc",
    b"b",
    b"z",
    "é".encode(),  # after every ASCII key: ordered by UTF-8 bytes
    "日本".encode(),
    "日本語".encode(),
]


@pytest.fixture(params=ENGINES)
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[OpenEngine]:
    """Opens an engine of the parameter's kind; for the persistent one, each call reopens the
    same store (the previous handle is closed first). Closes what it opened."""
    kind = request.param
    opened: list[StoreEngine] = []
    shared: list[StoreEngine] = []

    def open_() -> StoreEngine:
        if kind == "memory":
            if not shared:  # a memory engine lives as long as its object: "reopen" is itself
                shared.append(open_engine("memory", None, 0.0))
            return shared[0]
        for engine in opened:
            engine.close()
        engine = open_engine(kind, tmp_path / "state" / "c" / "0" / "store", 5.0)
        opened.append(engine)
        return engine

    yield open_
    for engine in opened + shared:
        engine.close()


@pytest.fixture
def engine(opener: OpenEngine) -> StoreEngine:
    return opener()


def test_items_are_in_bytewise_order_with_prefixes_and_utf8(engine: StoreEngine) -> None:
    shuffled = KEYS[5:] + KEYS[:5]
    engine.write({key: b"v" + key for key in shuffled}, None)
    assert [k for k, _ in engine.items()] == sorted(KEYS)
    assert dict(engine.items()) == {key: b"v" + key for key in KEYS}
    assert engine.get(b"ab") == b"vab"
    assert engine.get(b"abcd") is None


@pytest.mark.parametrize(
    ("start", "end", "expected"),
    [
        (b"a", b"b", [b"a", b"ab", b"abc"]),  # start included, end excluded
        (b"ab", None, [b"ab", b"abc", b"b", b"z", *(k.encode() for k in ("é", "日本", "日本語"))]),
        (None, b"a", [b"", b"\x00"]),
        (b"aa", b"abc", [b"ab"]),  # bounds that are not keys
        ("é".encode(), "日本語".encode(), ["é".encode(), "日本".encode()]),
        (b"b", b"b", []),
        (b"z", b"a", []),  # start after end: nothing
        (b"\xff", None, []),
    ],
)
def test_ranges(
    engine: StoreEngine, start: bytes | None, end: bytes | None, expected: list[bytes]
) -> None:
    engine.write(dict.fromkeys(KEYS, b"x"), None)
    assert [k for k, _ in engine.items(start, end)] == expected


def test_deletes_and_overwrites_in_one_write(engine: StoreEngine) -> None:
    engine.write({b"a": b"1", b"b": b"2", b"c": b"3"}, b"cp-1")
    engine.write({b"a": None, b"b": b"22", b"missing": None, b"d": b"4"}, b"cp-2")
    assert list(engine.items()) == [(b"b", b"22"), (b"c", b"3"), (b"d", b"4")]
    assert engine.get(b"a") is None
    assert engine.checkpoint() == b"cp-2"


def test_writes_of_puts_only_add_and_overwrite_in_key_order(engine: StoreEngine) -> None:
    # The memory engine updates its dict in one call when a write has no delete (a restore's).
    engine.write({b"b": b"2", b"d": b"4"}, None)
    assert list(engine.items()) == [(b"b", b"2"), (b"d", b"4")]
    engine.write({b"d": b"44", b"b": b"22"}, b"cp-1")  # overwrites only
    assert list(engine.items()) == [(b"b", b"22"), (b"d", b"44")]
    engine.write({b"c": b"3", b"a": b"1", b"d": b"444"}, b"cp-2")  # new keys and an overwrite
    assert list(engine.items()) == [(b"a", b"1"), (b"b", b"22"), (b"c", b"3"), (b"d", b"444")]
    assert list(engine.items(b"b", b"d")) == [(b"b", b"22"), (b"c", b"3")]
    assert engine.checkpoint() == b"cp-2"


def test_checkpoint_round_trip_and_replacement(engine: StoreEngine) -> None:
    assert engine.checkpoint() is None
    engine.write({b"a": b"1"}, b"\x00\x01checkpoint-1")
    assert engine.checkpoint() == b"\x00\x01checkpoint-1"
    engine.write({b"b": b"2"}, None)  # no checkpoint given: the last one stays
    assert engine.checkpoint() == b"\x00\x01checkpoint-1"
    engine.write({}, b"checkpoint-2")  # a checkpoint alone
    assert engine.checkpoint() == b"checkpoint-2"
    engine.write({}, None)  # nothing at all: no change
    assert engine.checkpoint() == b"checkpoint-2"
    assert list(engine.items()) == [(b"a", b"1"), (b"b", b"2")]


def test_the_checkpoint_is_not_a_key(engine: StoreEngine) -> None:
    engine.write({b"checkpoint": b"user", b"k": b"v", b"streamcore-checkpoint": b"u2"}, b"cp")
    assert engine.get(b"checkpoint") == b"user"
    assert engine.checkpoint() == b"cp"
    assert [k for k, _ in engine.items()] == [b"checkpoint", b"k", b"streamcore-checkpoint"]
    assert engine.approximate_count() == 3  # the checkpoint is not counted


def test_approximate_count(engine: StoreEngine) -> None:
    assert engine.approximate_count() == 0
    engine.write({key: b"x" for key in KEYS}, b"cp")
    assert engine.approximate_count() == len(KEYS)
    engine.write({b"a": b"y", b"new": b"y"}, b"cp2")  # an overwrite is not a new key
    if isinstance(engine, MemoryEngine):
        assert engine.approximate_count() == len(KEYS) + 1
    else:  # RocksDB's estimate counts the overwrite until a compaction merges it
        assert abs(engine.approximate_count() - (len(KEYS) + 1)) <= 1


def test_clear_removes_keys_and_checkpoint(engine: StoreEngine) -> None:
    engine.write({key: b"x" for key in KEYS}, b"cp")
    engine.clear()
    assert list(engine.items()) == []
    assert engine.get(b"a") is None
    assert engine.checkpoint() is None
    assert engine.approximate_count() == 0
    engine.write({b"after": b"1"}, b"cp-after")  # usable after a clear
    assert list(engine.items()) == [(b"after", b"1")]
    assert engine.checkpoint() == b"cp-after"
    engine.clear()
    engine.clear()  # an empty engine clears too
    assert list(engine.items()) == []


def test_a_write_during_an_iteration_does_not_disturb_it(engine: StoreEngine) -> None:
    engine.write({b"a": b"1", b"b": b"2", b"c": b"3"}, None)
    seen = []
    for key, value in engine.items():
        seen.append((key, value))
        engine.write({b"b": None, b"bb": b"new"}, None)
    assert seen == [(b"a", b"1"), (b"b", b"2"), (b"c", b"3")]
    assert list(engine.items()) == [(b"a", b"1"), (b"bb", b"new"), (b"c", b"3")]


def test_close_is_idempotent(engine: StoreEngine) -> None:
    engine.close()
    engine.close()


def test_unknown_engine_names_the_engines(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match=r"'lmdb'.*'memory', 'rocksdb'"):
        open_engine("lmdb", tmp_path, 1.0)
    with pytest.raises(InvalidArgumentError, match="directory"):
        open_engine("rocksdb", None, 1.0)


# -- the persistent engine ---------------------------------------------------------------------

PERSISTENT = [kind for kind in ENGINES if kind != "memory"]


@pytest.mark.parametrize("kind", PERSISTENT)
def test_reopen_keeps_data_and_checkpoint(kind: str, tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "store"  # parents created
    engine = open_engine(kind, path, 5.0)
    engine.write({key: b"v" + key for key in KEYS}, b"cp-1")
    engine.write({b"a": None}, b"cp-2")
    engine.close()
    engine = open_engine(kind, path, 5.0)
    try:
        assert list(engine.items()) == [(k, b"v" + k) for k in sorted(KEYS) if k != b"a"]
        assert engine.checkpoint() == b"cp-2"
        engine.clear()
    finally:
        engine.close()
    engine = open_engine(kind, path, 5.0)  # a clear is kept too
    try:
        assert list(engine.items()) == []
        assert engine.checkpoint() is None
    finally:
        engine.close()


@pytest.mark.parametrize("kind", PERSISTENT)
def test_a_closed_engine_refuses_calls(kind: str, tmp_path: Path) -> None:
    engine = open_engine(kind, tmp_path / "store", 5.0)
    engine.close()
    with pytest.raises(StateError, match="closed"):
        engine.get(b"a")
    with pytest.raises(StateError, match="closed"):
        engine.write({b"a": b"1"}, b"cp")


def _python(script: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _line(child: subprocess.Popen[str]) -> str:
    assert child.stdout is not None
    line = child.stdout.readline()
    if not line:  # the child died: show why
        assert child.stderr is not None
        raise AssertionError(f"the child ended ({child.wait()}): {child.stderr.read()}")
    return line.strip()


def _kill(child: subprocess.Popen[str]) -> None:
    child.send_signal(signal.SIGKILL)
    child.wait()  # reaped: its descriptors, and so its flock, are gone
    for stream in (child.stdout, child.stderr):
        if stream is not None:
            stream.close()


WRITER = """
    import sys
    from pathlib import Path
    from streamcore.state.engines import open_engine

    engine = open_engine(sys.argv[1], Path(sys.argv[2]), 10.0)
    keys = [b"key-%05d" % i for i in range(int(sys.argv[3]))]
    batch = 0
    while True:
        value = str(batch).encode()
        engine.write(dict.fromkeys(keys, value), value)
        print(batch, flush=True)
        batch += 1
"""


@pytest.mark.parametrize("kind", PERSISTENT)
@pytest.mark.parametrize("kill_after", [1, 7, 25])
def test_a_batch_and_its_checkpoint_survive_sigkill_together(
    kind: str, kill_after: int, tmp_path: Path
) -> None:
    """A writer of batches (every key = the batch number, the checkpoint too) is killed while it
    writes more: the store holds one whole batch, the one its checkpoint names."""
    path = tmp_path / "store"
    keys = 3000
    child = _python(WRITER, kind, str(path), str(keys))
    try:
        while int(_line(child)) < kill_after:
            pass
    finally:
        _kill(child)
    engine = open_engine(kind, path, 5.0)
    try:
        checkpoint = engine.checkpoint()
        assert checkpoint is not None
        assert int(checkpoint) >= kill_after  # what the child reported written is there
        values = {value for _, value in engine.items()}
        assert values == {checkpoint}
        assert sum(1 for _ in engine.items()) == keys
    finally:
        engine.close()


HOLDER = """
    import sys
    from pathlib import Path
    from streamcore.state.engines import open_engine

    engine = open_engine(sys.argv[1], Path(sys.argv[2]), 10.0)
    engine.write({b"k": b"v"}, b"cp")
    print("open", flush=True)
    sys.stdin.read()  # hold the store until killed
"""


@pytest.mark.parametrize("kind", PERSISTENT)
def test_a_second_process_gets_store_locked_error_then_the_store_after_sigkill(
    kind: str, tmp_path: Path
) -> None:
    path = tmp_path / "store"
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(HOLDER), kind, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert _line(child) == "open"
        started = time.monotonic()
        with pytest.raises(StoreLockedError) as raised:
            open_engine(kind, path, 0.5)
        waited = time.monotonic() - started
        error = raised.value
        assert error.retryable
        assert error.pid == child.pid
        assert str(path) in str(error)
        assert f"pid {child.pid}" in str(error)
        assert "stop the other processor" in str(error)
        assert "SIGKILL" in str(error)
        assert waited < 30  # bounded: the 0.5 s wait, plus whatever a busy machine adds
    finally:
        assert child.stdin is not None
        child.stdin.close()
        _kill(child)
    engine = open_engine(kind, path, 5.0)  # the kernel released the dead holder's lock
    try:
        assert engine.get(b"k") == b"v"
        assert engine.checkpoint() == b"cp"
    finally:
        engine.close()


@pytest.mark.parametrize("kind", PERSISTENT)
def test_a_second_handle_in_the_same_process_is_refused_until_the_first_closes(
    kind: str, tmp_path: Path
) -> None:
    path = tmp_path / "store"
    first = open_engine(kind, path, 5.0)
    with pytest.raises(StoreLockedError, match=f"pid {os.getpid()}"):
        open_engine(kind, path, 0.2)
    first.close()
    second = open_engine(kind, path, 5.0)
    second.close()


def test_rocksdb_lock_held_without_streamcore_is_a_store_locked_error(tmp_path: Path) -> None:
    """RocksDB's own LOCK held by a handle that did not take streamcore's lock: still the bounded
    wait and `StoreLockedError`, never RocksDB's raw error."""
    from rocksdict import Options, Rdict

    path = tmp_path / "store"
    options = Options(raw_mode=True)
    options.create_if_missing(True)
    raw = Rdict(str(path / "db"), options)
    try:
        with pytest.raises(StoreLockedError, match="without streamcore's lock") as raised:
            open_engine("rocksdb", path, 0.3)
        assert raised.value.pid is None
        StoreLock(path, 0.0).release()  # streamcore's lock was let go after the failed open
    finally:
        raw.close()
    engine = open_engine("rocksdb", path, 5.0)
    engine.close()


def test_store_lock_writes_its_holder_and_releases(tmp_path: Path) -> None:
    with StoreLock(tmp_path / "x", timeout=1.0, poll=0.01) as lock:
        assert lock.held
        pid, host, since = (tmp_path / "x" / LOCK_FILE).read_text().split()
        assert int(pid) == os.getpid() and host and since.endswith("+00:00")
        with pytest.raises(StoreLockedError):
            StoreLock(tmp_path / "x", timeout=0.0)
    assert not lock.held
    lock.release()  # idempotent
    StoreLock(tmp_path / "x", timeout=0.0).release()
