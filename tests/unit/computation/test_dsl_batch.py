"""The batch form of a DSL chain of stateless steps (`streamcore.computation.dsl_batch`) against
the per-record form: every case pipes one read batch through the same topology twice, once with
the runner using the chain's batch function and once with it taken away (record by record), and
the two runs must leave the same outputs in the same order, the same dead letters, the same
counters, positions and low watermark."""

from __future__ import annotations

import json

import pytest

from streamcore.computation import ComputationPolicy, Settings, Topology, TopologyTestDriver
from streamcore.computation.dsl_compile import DslComputation
from streamcore.record import Flag, Record
from streamcore.watermark import Watermark

NAME = "app/in-dsl"
DLQ = "app/dlq"
OUTPUTS = ("app/a", "app/b", "app/c")
START_MS = 1_000_000


def js(value) -> bytes:
    return json.dumps(value).encode()


def orders(n: int = 40) -> list[Record]:
    """One batch of keyed JSON orders with increasing, distinct watermarks."""
    return [
        Record(f"k{i:02d}", js({"n": i, "qty": i % 4}), Watermark.of(START_MS + 10 * i).value)
        for i in range(n)
    ]


def shape(driver: TopologyTestDriver, streams: tuple[str, ...], dlq: bool) -> dict:
    """What a run leaves behind, to compare across the two paths."""
    stats = driver.stats(NAME)
    return {
        "outputs": {
            s: [(r.key, r.data, r.watermark, r.flags) for r in driver.read_output(s)]
            for s in streams
        },
        "dead": [
            (d.record, d.stream, d.partition, d.offset, d.error_type, d.error, d.attempts)
            for d in (driver.read_dead_letters(DLQ) if dlq else [])
        ],
        "counts": (
            stats.processed,
            stats.failed,
            stats.retried,
            stats.skipped,
            stats.dead_lettered,
            stats.produced,
            stats.checkpoints,
        ),
        "terminated": driver.is_terminated(NAME),
        "lag": driver.lag(NAME).lag,
        "low_watermark": driver.low_watermark(NAME),
    }


def both_paths(monkeypatch, build, records, policy=None, partitions=3):
    """Run `build(source)` on `records` piped as one batch, with the batch form and without;
    returns both shapes (asserting the first run used the batch form)."""
    runs = []
    policy = policy or ComputationPolicy(max_retries=2, delay=0.0, max_delay=0.0, dlq=DLQ)
    for batched in (True, False):
        if not batched:
            monkeypatch.setattr(DslComputation, "batch_function", lambda self, stream: None)
        builder = Topology.builder()
        build(builder.stream("app/in", codec="json"))
        settings = Settings(default_partitions=partitions)
        settings.set_policy(NAME, policy)
        with TopologyTestDriver(builder.build(), settings, start_ms=START_MS) as driver:
            assert (driver._runner_of(NAME)._batched is not None) is batched
            driver.pipe_records("app/in", records)
            streams = tuple(s for s in OUTPUTS if s in builder.build().streams())
            runs.append(shape(driver, streams, policy.dlq is not None))
    return runs


def enrich(v):
    return {**v, "total": v["n"] * v["qty"]}


CHAINS = {
    "map_values-branch-to": lambda s: _arms(
        s.map_values(enrich).branch(lambda k, v: v["total"] >= 30, lambda k, v: True)
    ),
    "every-stateless-step": lambda s: (
        s.filter(lambda k, v: v["qty"] != 1)
        .map(lambda k, v: (f"{k}-m", {**v, "m": 1}))
        .flat_map(lambda k, v: [(k, v), (f"{k}-copy", v["n"])] if v["qty"] else [])
        .flat_map_values(lambda v: [v, v] if isinstance(v, int) else [v])
        .select_key(lambda k, v: k.upper())
        .to("app/a")
    ),
    "fan-out": lambda s: (s.to("app/a"), s.map_values(lambda v: v["n"]).to("app/b")),
    "branch-drops-unmatched": lambda s: _arms(
        s.branch(lambda k, v: v["qty"] == 0, lambda k, v: v["qty"] == 3)
    ),
}


def _arms(arms) -> None:
    for arm, stream in zip(arms, OUTPUTS, strict=False):
        arm.to(stream)


@pytest.mark.parametrize("chain", CHAINS, ids=list(CHAINS))
def test_a_batch_gives_what_the_per_record_path_gives(monkeypatch, chain):
    batched, per_record = both_paths(monkeypatch, CHAINS[chain], orders())
    assert batched == per_record
    assert sum(len(out) for out in batched["outputs"].values()) > 0
    assert batched["counts"][0] == 40


def _failing_at(*keys):
    def fn(v):
        if f"k{v['n']:02d}" in keys:
            raise ValueError(f"bad order {v['n']}")
        return enrich(v)

    return fn


FAILURES = {
    "map_values": lambda s: _arms(
        s.map_values(_failing_at("k07", "k21")).branch(
            lambda k, v: v["total"] >= 30, lambda k, v: True
        )
    ),
    "predicate": lambda s: _arms(
        s.branch(lambda k, v: 1 // (v["n"] - 13) >= 0, lambda k, v: True)  # k13 divides by 0
    ),
    "filter-then-map": lambda s: (
        s.filter(lambda k, v: v["n"] != 30).map_values(_failing_at("k05")).to("app/a")
    ),
    "non-str-key": lambda s: s.map(lambda k, v: (7 if v["n"] == 9 else k, v)).to("app/a"),
    "unencodable-value": lambda s: s.map_values(lambda v: object() if v["n"] == 11 else v).to(
        "app/a"
    ),
}


@pytest.mark.parametrize("failure", FAILURES, ids=list(FAILURES))
@pytest.mark.parametrize(
    "policy",
    [
        ComputationPolicy(max_retries=2, delay=0.0, max_delay=0.0, dlq=DLQ),
        ComputationPolicy(max_retries=1, delay=0.0, max_delay=0.0, continue_on_failure=True),
        ComputationPolicy.NONE,
    ],
    ids=["dead-letter", "skip", "terminate"],
)
def test_a_failing_record_in_a_batch_meets_the_policy_as_record_by_record(
    monkeypatch, failure, policy
):
    batched, per_record = both_paths(monkeypatch, FAILURES[failure], orders(), policy)
    assert batched == per_record
    assert batched["counts"][1] >= 1  # failed
    if policy.dlq is not None:
        assert batched["dead"]


def test_an_undecodable_value_in_a_batch_is_dead_lettered_as_record_by_record(monkeypatch):
    records = orders()
    records[17] = Record("k17", b"{not json", records[17].watermark)
    batched, per_record = both_paths(monkeypatch, CHAINS["map_values-branch-to"], records)
    assert batched == per_record
    assert [d[0].key for d in batched["dead"]] == ["k17"]


def test_a_failure_that_passes_on_retry_is_retried_once_as_record_by_record(monkeypatch):
    """The batch's failed call is the record's first attempt: the per-record pass after it does
    not call the record again before its retry (else the retry count and backoff would differ)."""

    def build(source):
        calls: dict[str, int] = {}

        def flaky(k, v):
            calls[k] = calls.get(k, 0) + 1
            if k == "k12" and calls[k] == 1:
                raise ConnectionError("first call fails")
            return k, v

        source.map(flaky).to("app/a")

    batched, per_record = both_paths(monkeypatch, build, orders())
    assert batched == per_record
    assert batched["counts"][1:3] == (0, 1)  # nothing failed for good, one retry
    assert len(batched["outputs"]["app/a"]) == 40


def test_a_control_record_in_a_batch_goes_record_by_record(monkeypatch):
    records = orders(10)
    records[4] = Record("commit", b"", records[4].watermark, Flag.COMMIT)
    batched, per_record = both_paths(monkeypatch, CHAINS["fan-out"], records)
    assert batched == per_record
    assert len(batched["outputs"]["app/a"]) == 9


@pytest.mark.parametrize(
    "build",
    [
        lambda s: s.peek(lambda k, v: None).to("app/a"),
        lambda s: (s.to("app/a"), s.map_values(lambda v: v).to("app/a")),
        lambda s: s.merge(s.map_values(lambda v: v)).to("app/a"),
    ],
    ids=["peek", "two-sinks-one-stream", "merge"],
)
def test_chains_whose_order_a_batch_could_change_go_record_by_record(build):
    builder = Topology.builder()
    build(builder.stream("app/in", codec="json"))
    with TopologyTestDriver(builder.build()) as driver:
        assert driver._runner_of(NAME)._batched is None
