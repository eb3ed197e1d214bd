"""`python bench/codec_bench.py`: Record encode/decode rates on one core.

The Record codec sets the throughput ceiling of every log, so its speed is worth measuring on the
machine that runs the jobs: Records of a 100-byte payload, best of several rounds, against
fastavro's generic `schemaless_writer`/`schemaless_reader` on the same datum for reference.
"""

from __future__ import annotations

import argparse
import io
import logging
import sys
import time
from collections.abc import Callable
from typing import Any

from fastavro import schemaless_reader, schemaless_writer

from streamcore.codecs.record_binary import RECORD_SCHEMA
from streamcore.codecs.record_codec import RecordCodec, record_to_datum
from streamcore.record import Flag, Record

__all__ = ["measure", "run"]

logger = logging.getLogger(__name__)


def _rate(fn: Callable[[], Any], batch: int, rounds: int) -> float:
    """Best calls per second over `rounds` timed batches (best-of filters out noisy neighbours)."""
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(batch):
            fn()
        best = min(best, time.perf_counter() - start)
    return batch / best


def measure(
    codec_name: str = "avro", payload: int = 100, batch: int = 50_000, rounds: int = 5
) -> dict[str, float]:
    """Records/s for `encode`, `decode`, and fastavro's `fastavro_encode`/`fastavro_decode`."""
    from fastavro import parse_schema

    codec = RecordCodec(codec_name)
    watermark = (int(time.time() * 1000) << 17) | (123 << 1)
    record = Record("key-000123", bytes(i % 256 for i in range(payload)), watermark, Flag.DEFAULT)
    encoded = codec.encode(record)
    schema = parse_schema(RECORD_SCHEMA)
    datum = record_to_datum(record)
    body = io.BytesIO()
    schemaless_writer(body, schema, datum)
    body_bytes = body.getvalue()

    def fastavro_encode() -> bytes:
        out = io.BytesIO()
        schemaless_writer(out, schema, datum)
        return out.getvalue()

    return {
        "encode": _rate(lambda: codec.encode(record), batch, rounds),
        "decode": _rate(lambda: codec.decode(encoded), batch, rounds),
        "fastavro_encode": _rate(fastavro_encode, batch, rounds),
        "fastavro_decode": _rate(
            lambda: schemaless_reader(io.BytesIO(body_bytes), schema), batch, rounds
        ),
    }


def run(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--codec", default="avro", help="Record codec name (default avro)")
    parser.add_argument("--payload", type=int, default=100, help="data bytes per Record")
    parser.add_argument("--batch", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    rates = measure(args.codec, args.payload, args.batch, args.rounds)
    out = sys.stdout
    for what, rate in rates.items():
        out.write(f"{args.codec:>14} {what:<16} {rate:>12,.0f} records/s\n")
    for what in ("encode", "decode"):
        ratio = rates[what] / rates[f"fastavro_{what}"]
        out.write(f"{args.codec:>14} {what:<16} {ratio:>12.2f} x fastavro (same datum)\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(run())
