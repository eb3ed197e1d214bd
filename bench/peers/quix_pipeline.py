"""The Quix Streams side of bench/quix_peer_bench.py, and the records and functions both sides run:
a stateless filter + map_values + to over JSON records. Runs in the Quix venv
(`.cache/bench/quix-venv`, made by bench/state_bench.py's `quix_python`), one phase per
invocation, each printing one JSON document on stdout; the bench runs each with a timeout.

Phases (all on `--bootstrap`; the bench deletes the topics and groups named from `--prefix`):

- `produce TOPIC --records N --partitions P`: N records `order(i)` (JSON, keyed `k{i % 10000}`)
  into a new topic of P partitions (a plain confluent-kafka producer, not a figure).
- `pipeline TOPIC --output OUT --records N --commit-interval S`: an Application (group
  `<prefix>pipeline-<OUT>`, earliest, Quix's own `commit_interval` S, 5 s its default) running
  `sdf.filter(keep).apply(enrich).to_topic(OUT)` (OUT created first with the input's partitions).
  `keep` also counts the messages and stops the app at the N-th. Timed from `app.run()` until it
  returns (group join, and Quix's final flush and commit on stop included, as our side's
  `drain_and_stop` includes its last checkpoint); `to_last_s` is the time to the N-th message.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from typing import Any

KEYS = 10_000
COUNTRIES = ("DE", "FR", "US", "IN")


def order(i: int) -> dict[str, Any]:
    """Record i of the input: an order of five fields, as both sides read it."""
    return {
        "id": i,
        "user": f"u{i % 1000}",
        "amount": round(1 + (i * 37) % 100_000 / 100, 2),
        "country": COUNTRIES[i % 4],
        "paid": i % 3 != 0,
    }


def keep(value: dict[str, Any]) -> bool:
    """The filter: drops every tenth order."""
    return value["id"] % 10 != 0


def enrich(value: dict[str, Any]) -> dict[str, Any]:
    """The map_values: the order with its amount in cents."""
    return {**value, "cents": round(value["amount"] * 100)}


def expected_outputs(n: int) -> int:
    return sum(1 for i in range(n) if i % 10 != 0)


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(timeout=30)


def produce(args: argparse.Namespace) -> dict[str, Any]:
    from confluent_kafka import Producer

    create_topic(args.bootstrap, args.topic, args.partitions)
    producer = Producer(
        {"bootstrap.servers": args.bootstrap, "linger.ms": 50, "batch.size": 1 << 20}
    )
    start = time.perf_counter()
    for i in range(args.records):
        key, value = f"k{i % KEYS}".encode(), json.dumps(order(i), separators=(",", ":")).encode()
        while True:
            try:
                producer.produce(args.topic, value, key)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(60) != 0:
        raise RuntimeError(f"{args.topic}: records left unsent after 60 s")
    return {"records": args.records, "seconds": time.perf_counter() - start}


def pipeline(args: argparse.Namespace) -> dict[str, Any]:
    from quixstreams import Application

    create_topic(args.bootstrap, args.output, args.partitions)
    app = Application(
        broker_address=args.bootstrap,
        consumer_group=f"{args.prefix}pipeline-{args.output}",
        auto_offset_reset="earliest",
        commit_interval=args.commit_interval,
        state_dir=tempfile.mkdtemp(prefix="quix-pipeline-"),
        loglevel="WARNING",
    )
    source = app.topic(args.topic, key_deserializer="str", value_deserializer="json")
    target = app.topic(args.output, key_serializer="str", value_serializer="json")
    seen = {"n": 0, "last": 0.0}

    def keep_and_count(value: dict[str, Any]) -> bool:
        seen["n"] += 1
        if seen["n"] == args.records:
            seen["last"] = time.perf_counter()
            app.stop()
        return keep(value)

    app.dataframe(source).filter(keep_and_count).apply(enrich).to_topic(target)
    start, cpu = time.perf_counter(), time.process_time()
    app.run()
    stopped, cpu = time.perf_counter(), time.process_time() - cpu
    if seen["n"] != args.records:
        raise RuntimeError(f"Quix processed {seen['n']} of {args.records} records")
    return {
        "records": args.records,
        "seconds": stopped - start,
        "to_last_s": seen["last"] - start,
        # Every thread of the process (librdkafka's too), over the same span as "seconds".
        "cpu_seconds": cpu,
        "commit_interval": args.commit_interval,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("phase", choices=("produce", "pipeline"))
    parser.add_argument("topic")
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--output")
    parser.add_argument("--commit-interval", type=float, default=5.0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    phases = {"produce": produce, "pipeline": pipeline}
    print(json.dumps(phases[args.phase](args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
