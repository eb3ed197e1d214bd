"""Crash consistency of the local log: SIGKILL a writer process at random moments and check that
every acknowledged record survives, intact, in order, without gaps, and that nothing corrupt is
ever served — before recovery (readers only) and after it (a writer reopens the partitions).

`STREAMCORE_CRASH_TRIALS` (default 50) sets the number of random-moment trials; a fifth as many
(at least 3) more kill the writer in the middle of writing a large batch. `STREAMCORE_CRASH_SEED`
replays a run.
"""

from __future__ import annotations

import hashlib
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from streamcore.config import LogDefaults, StreamcoreConfig
from streamcore.log import LogPartition
from streamcore.log.local.manager import LocalLogManager
from streamcore.log.local.segment import list_segments, scan_segment, segment_name
from streamcore.names import Name

pytestmark = pytest.mark.slow

TRIALS = int(os.environ.get("STREAMCORE_CRASH_TRIALS", "50"))
LARGE_TRIALS = max(3, TRIALS // 5)
SEED = int(os.environ.get("STREAMCORE_CRASH_SEED", str(random.SystemRandom().randrange(10**9))))
NAME = "crash/log"
PARTITIONS = 2

WRITER = """
import os, random, sys, time
from streamcore.config import LogDefaults, StreamcoreConfig
from streamcore.log.local import writer as writer_module
from streamcore.log.local.manager import LocalLogManager

# Started ahead of time (imports take most of a trial's budget); the trial's parameters arrive
# on stdin when the parent is ready to kill it.
print("loaded", flush=True)
root, name, mode, seed = sys.stdin.readline().split()
seed = int(seed)
rng = random.Random(seed)

__PAYLOAD_SOURCE__

m = LocalLogManager(root, config=StreamcoreConfig(home=root, log=LogDefaults()))
app = m.appender(name)
out = sys.stdout

def ack(offsets, ids):
    lines = [f"ack {o.partition.partition} {o.offset} {i}\\n" for o, i in zip(offsets, ids)]
    out.write("".join(lines))
    out.flush()

next_id = 0
def take(n):
    global next_id
    ids = list(range(next_id, next_id + n))
    next_id += n
    return ids

if mode == "large":
    # Widen the window of a large write: short writes of 64 KiB with a pause after each, which
    # also drives the writer's short-write path (writev may legally stop early).
    real_write = os.write
    def writev(fd, buffers):
        data = b"".join(bytes(b) for b in buffers)
        if len(data) > 1_000_000:
            print("writing", flush=True)  # the parent kills from now on
        return slow_write(fd, data)
    def slow_write(fd, data):
        n = real_write(fd, bytes(data[: 64 * 1024]))
        time.sleep(0.0005)
        return n
    writer_module.os.writev = writev
    writer_module.os.write = slow_write

print("ready", flush=True)
while True:
    if mode == "large" and next_id >= 5 and rng.random() < 0.5:
        ids = take(rng.randint(20, 60))
        out.write(f"big {len(ids)}\\n")
        out.flush()
        offsets = app.append_batch([(f"key-{i}", payload(i, 60_000)) for i in ids], partition=0)
        ack(offsets, ids)
        continue
    op = rng.random()
    if op < 0.5:
        ids = take(1)
        ack([app.append(f"key-{ids[0] % 5}", payload(ids[0]))], ids)
    elif op < 0.8:
        ids = take(rng.randint(2, 6))
        ack(app.append_batch([(f"key-{i % 5}", payload(i)) for i in ids]), ids)
    else:
        ids = take(rng.randint(2, 6))
        p = rng.randrange(__PARTITIONS__)
        ack(app.append_batch([(f"key-{i}", payload(i)) for i in ids], partition=p), ids)
"""

PAYLOAD_SOURCE = '''
import hashlib
def payload(i, size=None):
    """Self-describing: the id, then bytes derived from it (so any damage is detectable)."""
    size = size if size is not None else 10 + (i * 37) % 300
    block = hashlib.sha256(str(i).encode()).digest()
    return f"{i}|".encode() + (block * (size // 32 + 1))[:size]
'''
namespace: dict = {}
exec(PAYLOAD_SOURCE, namespace)
payload = namespace["payload"]


def expected_payload(data: bytes) -> bytes | None:
    head, sep, _ = data.partition(b"|")
    if not sep or not head.isdigit():
        return None
    i = int(head)
    size = len(data) - len(head) - 1
    return payload(i, size)


@dataclass
class Ack:
    partition: int
    offset: int
    ident: int


class WriterPool:
    """Hands out writer processes that have already imported streamcore (and started the next
    one in the background), so a trial costs its own run time, not an interpreter start."""

    def __init__(self, script: Path, ahead: int = 3) -> None:
        self.script = script
        self._ready = [self._spawn() for _ in range(ahead)]

    def _spawn(self) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-u", str(self.script)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )

    def start(self, root: Path, mode: str, seed: int) -> subprocess.Popen:
        proc = self._ready.pop(0)
        self._ready.append(self._spawn())
        assert proc.stdout.readline() == b"loaded\n", proc.stderr.read().decode()
        proc.stdin.write(f"{root} {NAME} {mode} {seed}\n".encode())
        proc.stdin.flush()
        return proc

    def close(self) -> None:
        for proc in self._ready:
            proc.kill()
            proc.communicate()


@pytest.fixture(scope="module")
def writers(tmp_path_factory: pytest.TempPathFactory):
    script = tmp_path_factory.mktemp("crash") / "writer.py"
    script.write_text(
        textwrap.dedent(WRITER)
        .replace("__PAYLOAD_SOURCE__", PAYLOAD_SOURCE)
        .replace("__PARTITIONS__", str(PARTITIONS))
    )
    pool = WriterPool(script)
    yield pool
    pool.close()


def parse_acks(stdout: bytes) -> list[Ack]:
    acks = []
    for line in stdout.split(b"\n")[:-1]:  # the last piece has no newline: not a full line
        parts = line.split()
        if parts and parts[0] == b"ack":
            acks.append(Ack(int(parts[1]), int(parts[2]), int(parts[3])))
    return acks


def read_partition(manager: LocalLogManager, partition: int) -> list:
    with manager.tailer("verify", LogPartition.of(NAME, partition)) as tailer:
        out = []
        while (rec := tailer.read(0)) is not None:
            out.append(rec)
        return out


def check_served(records: list, acks: list[Ack], partition: int, context: str) -> None:
    offsets = [r.offset for r in records]
    assert offsets == list(range(len(records))), f"{context}: gap or disorder in {offsets}"
    ids = []
    for r in records:
        assert expected_payload(r.message) == r.message, f"{context}: damaged record {r.offset}"
        ids.append(int(r.message.partition(b"|")[0]))
    assert ids == sorted(ids), f"{context}: records out of append order: {ids}"
    served = {r.offset: int(r.message.partition(b"|")[0]) for r in records}
    for a in acks:
        if a.partition == partition:
            assert served.get(a.offset) == a.ident, (
                f"{context}: acknowledged record id {a.ident} at offset {a.offset} is "
                f"{'missing' if a.offset not in served else f'id {served[a.offset]}'}"
            )


def torn_tail(root: Path) -> bool:
    for p in range(PARTITIONS):
        folder = root / Name.of(NAME).id / f"P-{p:02d}"
        bases = list_segments(folder)
        if bases:
            path = folder / segment_name(bases[-1])
            if scan_segment(path, bases[-1], 1 << 30).valid_end < path.stat().st_size:
                return True
    return False


def run_trial(writers: WriterPool, tmp_path: Path, mode: str, trial: int) -> bool:
    """One crash trial; returns whether the kill left a torn tail."""
    seed = SEED + trial * 7919 + (0 if mode == "mixed" else 1)
    rng = random.Random(seed)
    context = f"{mode} trial {trial} (STREAMCORE_CRASH_SEED={SEED})"
    root = tmp_path / "log"
    config = StreamcoreConfig(home=tmp_path, log=LogDefaults())
    setup = LocalLogManager(root, config=config)
    setup.create(NAME, PARTITIONS, fsync="always", segment_bytes=4096)
    setup.close()

    child = writers.start(root, mode, seed)
    try:
        assert child.stdout.readline() == b"ready\n", child.stderr.read().decode()
        seen = b""
        if mode == "large":
            line = b""
            while not line.startswith(b"writing"):
                line = child.stdout.readline()
                assert line, f"{context}: writer exited: {child.stderr.read().decode()}"
                seen += line
            time.sleep(rng.uniform(0, 0.02))
        else:
            time.sleep(rng.uniform(0, 0.15))
        child.send_signal(signal.SIGKILL)
        rest, errors = child.communicate(timeout=10)
    finally:
        child.kill()
        child.wait()
    assert child.returncode == -signal.SIGKILL, f"{context}: writer failed: {errors.decode()}"
    acks = parse_acks(seen + rest)
    torn = torn_tail(root)

    # 1. Before recovery: readers serve every acknowledged record and nothing damaged.
    readers = LocalLogManager(root, config=config)
    before = {p: read_partition(readers, p) for p in range(PARTITIONS)}
    for p in range(PARTITIONS):
        check_served(before[p], acks, p, f"{context}, before recovery, partition {p}")
    assert [len(before[p]) for p in range(PARTITIONS)] == readers.end_offsets(NAME), context
    readers.close()

    # 2. A writer reopens every partition (recovery), then readers see the same records.
    recovered = LocalLogManager(root, config=config)
    app = recovered.appender(NAME)
    for p in range(PARTITIONS):
        sentinel = app.append_to(p, "sentinel", payload(10**9 + p))
        # recovery never drops a record that a reader was already served
        assert sentinel.offset == len(before[p]), f"{context}: partition {p} lost records"
    for p in range(PARTITIONS):
        after = read_partition(recovered, p)
        assert after and after[-1].key == "sentinel", f"{context}: the new record is not served"
        check_served(after[:-1], acks, p, f"{context}, after recovery, partition {p}")
        assert [r.message for r in after[:-1]] == [r.message for r in before[p]], context
    recovered.close()
    assert not torn_tail(root), f"{context}: the recovered log still has a torn tail"
    return torn


@pytest.mark.parametrize("trial", range(TRIALS))
def test_kill_at_a_random_moment(writers: WriterPool, tmp_path: Path, trial: int) -> None:
    run_trial(writers, tmp_path, "mixed", trial)


TORN: list[bool] = []


@pytest.mark.parametrize("trial", range(LARGE_TRIALS))
def test_kill_while_writing_a_large_batch(writers: WriterPool, tmp_path: Path, trial: int) -> None:
    TORN.append(run_trial(writers, tmp_path, "large", trial))


def test_large_batch_kills_did_tear_batches() -> None:
    """Guards the test itself: the large-batch trials must really interrupt writes."""
    if len(TORN) < LARGE_TRIALS:
        pytest.skip("run together with the large-batch trials")
    assert sum(TORN) >= 1, f"no large-batch trial left a torn tail ({TORN})"


def test_payload_check_detects_damage() -> None:
    good = payload(123)
    assert expected_payload(good) == good
    damaged = good[:-1] + bytes([good[-1] ^ 1])
    assert expected_payload(damaged) != damaged
    assert hashlib.sha256(b"123").digest()[:4] in good
