"""The log-only demo behind `streamcore demo`: write N Records to a local log and consume them
back with a consumer group, measuring both sides. `make demo` runs the importer DAG instead:
Airflow -> Spark -> Great Expectations -> Delta, `dags/streamcore_importer.py`.

`run_demo` (re)creates `demo/records`, appends `count` Records (key `doc-<i>`, `data_size`
bytes of data, watermark = now) encoded with `codec` in batches, then reads them with the
group `demo/consumer` (read_batch, decode, commit per batch) and returns a summary dict: counts,
rates, the group's lag before and after consuming, and where the data lives.
Progress goes to the optional `progress(phase, done, total, elapsed_s)` callback.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from streamcore.config import StreamcoreConfig, load_config
from streamcore.errors import InvalidArgumentError
from streamcore.log import LogLag, LogManager
from streamcore.log.capabilities import Configured, OnDisk
from streamcore.names import Name
from streamcore.record import Flag, Record

__all__ = ["DEMO_GROUP", "DEMO_LOG", "ProgressCallback", "run_demo"]


logger = logging.getLogger(__name__)

DEMO_LOG = Name.of("demo/records")
DEMO_GROUP = "demo/consumer"
ProgressCallback = Callable[[str, int, int, float], None]


def _lag(manager: LogManager) -> dict[str, int]:
    lags: list[LogLag] = manager.lag_per_partition(DEMO_LOG, DEMO_GROUP)
    return {
        "pos": sum(x.pos for x in lags),
        "end": sum(x.end for x in lags),
        "lag": sum(x.lag for x in lags),
    }


def _payload(i: int, size: int) -> bytes:
    return (b"doc-%d:" % i).ljust(size, b"x")[:size]


def _disk(manager: LogManager) -> tuple[str | None, int | None]:
    if not isinstance(manager, OnDisk):
        return None, None
    path = Path(manager.folder(DEMO_LOG))
    return str(path), sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


class _Ticker:
    def __init__(self, phase: str, total: int, callback: ProgressCallback | None, interval: float):
        self.phase, self.total, self.callback, self.interval = phase, total, callback, interval
        self.started = self._last = time.monotonic()

    def tick(self, done: int, final: bool = False) -> None:
        now = time.monotonic()
        if self.callback is not None and (final or now - self._last >= self.interval):
            self._last = now
            self.callback(self.phase, done, self.total, now - self.started)


def run_demo(
    count: int = 1_000_000,
    partitions: int = 4,
    *,
    batch: int = 10_000,
    codec: str = "avro",
    data_size: int = 100,
    manager: LogManager | None = None,
    config: StreamcoreConfig | None = None,
    progress: ProgressCallback | None = None,
    progress_interval: float = 1.0,
) -> dict[str, Any]:
    """Write then consume `count` records; see the module docstring. With no `manager`, a local
    log manager under the configuration's home is opened and closed."""
    from streamcore.codecs import get_codec
    from streamcore.log.local.manager import LocalLogManager

    if count < 0 or partitions < 1 or batch < 1 or data_size < 0:
        raise InvalidArgumentError(
            "count >= 0, partitions >= 1, batch >= 1 and data_size >= 0 please"
        )
    own = manager is None
    if config is None:
        config = manager.config if isinstance(manager, Configured) else load_config()
    record_codec = get_codec(codec, config=config)
    if manager is None:
        manager = LocalLogManager(config=config)
    try:
        if manager.exists(DEMO_LOG):
            manager.delete(DEMO_LOG)
        manager.create(DEMO_LOG, partitions)

        # -- write ------------------------------------------------------------------------------
        encoded_bytes = 0
        ticker = _Ticker("write", count, progress, progress_interval)
        encode = record_codec.encode
        with manager.appender(DEMO_LOG) as appender:
            for start in range(0, count, batch):
                stop = min(count, start + batch)
                base = (time.time_ns() // 1_000_000) << 17
                items = []
                for i in range(start, stop):
                    key = f"doc-{i}"
                    value = encode(
                        Record(
                            key, _payload(i, data_size), base | ((i & 0xFFFF) << 1), Flag.DEFAULT
                        )
                    )
                    encoded_bytes += len(value)
                    items.append((key, value))
                appender.append_batch(items)
                ticker.tick(stop)
        write_seconds = time.monotonic() - ticker.started
        ticker.tick(count, final=True)
        lag_before = _lag(manager)

        # -- read -------------------------------------------------------------------------------
        read = read_bytes = mismatched = 0
        ticker = _Ticker("read", count, progress, progress_interval)
        decode = record_codec.decode
        with manager.tailer(DEMO_GROUP, DEMO_LOG) as tailer:
            while read < count:
                records = tailer.read_batch(batch, timeout=1.0)
                if not records:
                    logger.warning("demo: no more records after %d of %d", read, count)
                    break
                for rec in records:
                    record = decode(rec.message)
                    read_bytes += len(rec.message)
                    if record.key != rec.key:
                        mismatched += 1
                tailer.commit()
                read += len(records)
                ticker.tick(read)
        read_seconds = time.monotonic() - ticker.started
        ticker.tick(read, final=True)
        lag_after = _lag(manager)
        path, disk_bytes = _disk(manager)
    finally:
        if own:
            manager.close()

    def per_s(n: float, seconds: float) -> float:
        return round(n / seconds, 1) if seconds > 0 else 0.0

    return {
        "log": DEMO_LOG.urn,
        "group": DEMO_GROUP,
        "partitions": partitions,
        "codec": codec,
        "batch": batch,
        "data_size": data_size,
        "written": count,
        "encoded_bytes": encoded_bytes,
        "write_seconds": round(write_seconds, 3),
        "write_records_per_s": per_s(count, write_seconds),
        "write_mb_per_s": per_s(encoded_bytes / 1e6, write_seconds),
        "read": read,
        "read_bytes": read_bytes,
        "key_mismatches": mismatched,
        "read_seconds": round(read_seconds, 3),
        "read_records_per_s": per_s(read, read_seconds),
        "read_mb_per_s": per_s(read_bytes / 1e6, read_seconds),
        "lag_before": lag_before,
        "lag_after": lag_after,
        "path": path,
        "disk_bytes": disk_bytes,
    }
