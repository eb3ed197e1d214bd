"""Pool worker allocation faults: a processor under `worker_allocation="pool"` (4 workers, one
slow key so that later records finish around it) SIGKILLed at random records, 8 times on the
local log, then drained: every input record is on the output stream at least once
(docs/operating.md, "Pool worker allocation": a crash re-delivers from the first unprocessed
record of each partition, so nothing processed after a hole is committed past it)."""

from __future__ import annotations

import random
import threading
from pathlib import Path

import killed_child

from streamcore.codecs import get_codec
from streamcore.computation import Computation, Settings, StreamProcessor, Topology
from streamcore.config import LogDefaults, StreamcoreConfig
from streamcore.log import LogManager
from streamcore.log.local.manager import LocalLogManager
from streamcore.record import Record

IN, OUT, COMPUTATION = "app/in", "app/out", "app/pooled"
PARTITIONS, WORKERS = 2, 4
CODEC = get_codec("avro")

CHILD = """
import sys, threading
from streamcore.config import LogDefaults, StreamcoreConfig
from streamcore.log.local.manager import LocalLogManager
sys.path[:0] = [sys.argv[2], sys.argv[2] + "/.."]
from test_pool_faults import pooled_processor

root = sys.argv[1]
manager = LocalLogManager(root + "/log", config=StreamcoreConfig(home=root, log=LogDefaults()))
manager.heartbeat_interval, manager.session_timeout = 0.1, 0.8  # a killed member leaves fast
pooled_processor(manager, announce=True).start()
print("ready", flush=True)
threading.Event().wait()
"""


class Forward(Computation):
    """Forwards each record after an I/O-like wait (key k0: slower, so holes form behind it);
    with `announce`, prints a line per record once it is processed."""

    announce = False

    def __init__(self) -> None:
        super().__init__(COMPUTATION, 1, 1)

    def process_record(self, context, input_stream, record) -> None:
        threading.Event().wait(0.02 if record.key == "k0" else random.random() * 0.002)
        context.produce_record("o1", record)
        context.ask_for_checkpoint()
        if self.announce:
            print("rec", flush=True)


def pooled_processor(manager: LogManager, announce: bool = False) -> StreamProcessor:
    computation = type("Announced" if announce else "Quiet", (Forward,), {"announce": announce})
    topology = Topology.builder().add_computation(computation, [f"i1:{IN}", f"o1:{OUT}"]).build()
    settings = Settings(default_partitions=PARTITIONS, read_batch=20, drain_quiet=0.3)
    settings.set_concurrency(COMPUTATION, WORKERS).set_worker_allocation(COMPUTATION, "pool")
    return StreamProcessor(manager, topology, settings)


def test_a_pooled_processor_killed_8_times_loses_nothing(tmp_path: Path) -> None:
    manager = LocalLogManager(
        tmp_path / "log", config=StreamcoreConfig(home=tmp_path, log=LogDefaults())
    )
    manager.heartbeat_interval, manager.session_timeout = 0.1, 0.8
    manager.create(IN, PARTITIONS)
    appender = manager.appender(IN, CODEC)
    rng = random.Random(30)
    sent: list[tuple[str, bytes]] = []
    here = str(Path(__file__).parent)
    for trial in range(8):
        batch = [(f"k{rng.randrange(13)}", b"%d" % (100 * trial + i)) for i in range(100)]
        appender.append_batch([(k, Record(k, v)) for k, v in batch])
        sent += batch
        killed_child.run_until_killed(
            tmp_path, CHILD, [str(tmp_path), here], ("rec", rng.randint(1, 90))
        )
    with pooled_processor(manager) as processor:
        assert processor.drain_and_stop(120.0)
    assert manager.lag(IN, COMPUTATION).lag == 0
    with manager.tailer("test/check", OUT, CODEC) as tailer:
        received = [(rec.message.key, rec.message.data) for rec in tailer]
    assert set(sent) <= set(received)  # at least once: duplicates, no loss
    manager.close()
