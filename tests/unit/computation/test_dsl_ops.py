"""The rest of the KIP-28 DSL on the TopologyTestDriver: `flat_map_values`, `peek`, `select_key`,
`merge` and `process` (a processor API `Processor` with state stores inside a chain)."""

from __future__ import annotations

import json

import pytest

from streamcore.computation import (
    ComputationPolicy,
    Processor,
    Settings,
    Topology,
    TopologyTestDriver,
)
from streamcore.computation.errors import (
    DslDefinitionError,
    NotCallableError,
    UnfinishedStreamError,
)
from streamcore.computation.processor import PunctuationType
from streamcore.record import Record
from streamcore.state.changelog import changelog_name
from streamcore.state.spec import StoreSpec

DLQ = "app/dlq"


def js(value) -> bytes:
    return json.dumps(value).encode()


def pairs(records: list[Record]) -> list[tuple[str, object]]:
    return [(r.key, json.loads(r.data)) for r in records]


def dlq_settings(computation: str, max_retries: int = 0) -> Settings:
    policy = ComputationPolicy(max_retries=max_retries, delay=0.001, max_delay=0.001, dlq=DLQ)
    return Settings().set_policy(computation, policy)


@pytest.fixture
def run():
    """`run(topology, settings, [(stream, key, value), ...])` -> the driver after piping them
    (values JSON-encoded)."""
    drivers = []

    def make(topology, settings=None, inputs=()):
        driver = TopologyTestDriver(topology, settings, start_ms=1_000_000)
        drivers.append(driver)
        for stream, key, value in inputs:
            driver.pipe(stream, key, js(value))
        return driver

    yield make
    for driver in drivers:
        driver.close()


def test_flat_map_values_keeps_the_key_for_every_value(run):
    builder = Topology.builder()
    builder.stream("app/in", codec="json").flat_map_values(lambda v: v["items"]).to("app/out")
    driver = run(
        builder.build(),
        inputs=[
            ("app/in", "a", {"items": [1, 2, 3]}),
            ("app/in", "b", {"items": []}),
            ("app/in", "c", {"items": ["x"]}),
        ],
    )
    assert pairs(driver.read_output("app/out")) == [("a", 1), ("a", 2), ("a", 3), ("c", "x")]


def test_peek_sees_each_record_and_passes_it_on_unchanged(run):
    seen = []
    builder = Topology.builder()
    builder.stream("app/in", codec="json").peek(lambda k, v: seen.append((k, v))).to("app/out")
    driver = run(builder.build(), inputs=[("app/in", "a", 1), ("app/in", "b", {"n": 2})])
    assert seen == [("a", 1), ("b", {"n": 2})]
    assert pairs(driver.read_output("app/out")) == [("a", 1), ("b", {"n": 2})]


def test_select_key_changes_the_key_and_keeps_the_value_and_its_watermark(run):
    builder = Topology.builder()
    builder.stream("app/in", codec="json").select_key(lambda k, v: f"{v['user']}:{k}").to("app/out")
    driver = run(builder.build())
    driver.pipe("app/in", "o1", js({"user": "u7"}), timestamp_ms=1_234)
    (out,) = driver.read_output("app/out")
    assert (out.key, json.loads(out.data), out.timestamp) == ("u7:o1", {"user": "u7"}, 1_234)


def test_a_non_str_key_from_select_key_fails_the_record_naming_the_operator(run):
    builder = Topology.builder()
    builder.stream("app/in", codec="json").select_key(lambda k, v: v).to("app/out")
    driver = run(builder.build(), dlq_settings("app/in-dsl"), [("app/in", "a", 42)])
    (letter,) = driver.read_dead_letters(DLQ)
    assert letter.error_type == "RecordFieldError"
    assert "a record key must be a str, got int 42" in letter.error
    assert driver.read_output("app/out") == []


def test_merge_of_two_sources_compiles_the_merged_chain_into_each_sources_computation(run):
    builder = Topology.builder()
    web = builder.stream("app/web", codec="json")
    shop = builder.stream("app/shop", codec="json").map_values(lambda v: {**v, "shop": True})
    web.merge(shop).filter(lambda k, v: v["n"] > 0).to("app/all")
    topology = builder.build()
    assert topology.computation_names() == ["app/web-dsl", "app/shop-dsl"]
    assert topology.output_streams("app/web-dsl") == ["app/all"]
    assert topology.output_streams("app/shop-dsl") == ["app/all"]
    # Not co-partitioned: a stateless merge does not need it (no computation reads both).
    settings = Settings().set_partitions("app/web", 2).set_partitions("app/shop", 3)
    driver = run(
        topology,
        settings,
        [("app/web", "w1", {"n": 1}), ("app/shop", "s1", {"n": 2}), ("app/web", "w0", {"n": 0})],
    )
    assert sorted(pairs(driver.read_output("app/all"))) == [
        ("s1", {"n": 2, "shop": True}),
        ("w1", {"n": 1}),
    ]


def test_merging_two_branches_of_one_source_stays_in_its_computation(run):
    builder = Topology.builder()
    big, small = builder.stream("app/in", codec="json").branch(
        lambda k, v: v >= 10, lambda k, v: True
    )
    big.map_values(lambda v: v * 100).merge(small).to("app/out")
    topology = builder.build()
    assert topology.computation_names() == ["app/in-dsl"]
    driver = run(topology, inputs=[("app/in", "a", 20), ("app/in", "b", 3)])
    assert pairs(driver.read_output("app/out")) == [("a", 2000), ("b", 3)]


def test_a_stream_merged_with_itself_gives_each_record_twice(run):
    builder = Topology.builder()
    source = builder.stream("app/in", codec="json")
    source.merge(source).to("app/out")
    driver = run(builder.build(), inputs=[("app/in", "a", 1)])
    assert pairs(driver.read_output("app/out")) == [("a", 1), ("a", 1)]


def test_merge_then_through_runs_the_rest_in_one_computation(run):
    builder = Topology.builder()
    a = builder.stream("app/a", codec="json")
    b = builder.stream("app/b", codec="json")
    a.merge(b).through("app/merged").process(Count, stores=["counts"]).to("app/counts")
    topology = builder.build()
    assert topology.computation_names() == ["app/a-dsl", "app/b-dsl", "app/merged-dsl"]
    driver = run(topology, inputs=[("app/a", "k", 1), ("app/b", "k", 2), ("app/a", "j", 3)])
    assert pairs(driver.read_output("app/counts")) == [("k", 1), ("k", 2), ("j", 1)]


def test_merge_refuses_a_non_stream_and_another_value_codec():
    builder = Topology.builder()
    source = builder.stream("app/in", codec="json")
    with pytest.raises(DslDefinitionError, match=r"\.merge\(\.\.\.\): expected a Stream, got str"):
        source.merge("app/other")  # type: ignore[arg-type]
    raw = builder.stream("app/raw")
    with pytest.raises(DslDefinitionError, match=r"codec 'json'.*'bytes'.*through\(\.\.\., codec"):
        source.merge(raw)


def test_a_merge_without_sink_is_unfinished():
    builder = Topology.builder()
    builder.stream("app/a").merge(builder.stream("app/b"))
    with pytest.raises(
        UnfinishedStreamError,
        match=r"builder.stream\('app/a'\).merge\(builder.stream\('app/b'\)\) has no sink",
    ):
        builder.build()


class Count(Processor):
    """Counts records per key in the store `counts` and forwards the new count."""

    def init(self, context) -> None:
        self.context = context

    def process(self, key, value) -> None:
        store = self.context.get_state_store("counts")
        count = (store.get(key) or 0) + 1
        store.put(key, count)
        self.context.forward(key, count)


def test_process_counts_in_a_store_declared_on_the_computation_and_forwards_down_the_chain(run):
    builder = Topology.builder()
    (
        builder.stream("app/in", codec="json")
        .filter(lambda k, v: v["ok"])
        .process(Count, stores=["counts"])
        .map_values(lambda count: {"count": count})
        .to("app/counts")
    )
    topology = builder.build()
    assert [s.name for s in topology.stores("app/in-dsl")] == ["counts"]
    settings = Settings().set_partitions("app/in", 2)
    keys = ["a", "b", "a", "c", "a", "b"]
    driver = run(topology, settings, [("app/in", k, {"ok": True}) for k in keys])
    driver.pipe("app/in", "a", js({"ok": False}))
    assert pairs(driver.read_output("app/counts")) == [
        ("a", {"count": 1}),
        ("b", {"count": 1}),
        ("a", {"count": 2}),
        ("c", {"count": 1}),
        ("a", {"count": 3}),
        ("b", {"count": 2}),
    ]
    stored = {}
    for task in (0, 1):
        stored.update(driver.get_key_value_store("app/in-dsl", "counts", task).all())
    assert stored == {"a": 3, "b": 2, "c": 1}
    assert driver.manager.exists(changelog_name("app/in-dsl", "counts"))


def test_a_retried_record_is_not_counted_twice_by_a_process_step(run):
    failed: set[str] = set()

    def fail_once(key: str, count: int) -> tuple[str, int]:
        if key.startswith("flaky") and key not in failed:
            failed.add(key)
            raise ValueError("try again")
        return key, count

    builder = Topology.builder()
    builder.stream("app/in", codec="json").process(Count, stores=["counts"]).map(fail_once).to(
        "app/counts"
    )
    settings = dlq_settings("app/in-dsl", max_retries=2)
    inputs = [("app/in", "flaky", 1), ("app/in", "flaky", 2), ("app/in", "flaky2", 1)]
    driver = run(builder.build(), settings, inputs)
    assert failed == {"flaky", "flaky2"}
    assert pairs(driver.read_output("app/counts")) == [("flaky", 1), ("flaky", 2), ("flaky2", 1)]
    store = driver.get_key_value_store("app/in-dsl", "counts")
    assert (store.get("flaky"), store.get("flaky2")) == (2, 1)
    assert driver.stats("app/in-dsl").retried == 2
    assert driver.read_dead_letters(DLQ) == []


def test_a_process_step_may_end_a_chain(run):
    builder = Topology.builder()
    builder.stream("app/in", codec="json").select_key(lambda k, v: v["user"]).process(
        Count, stores=["counts"]
    )
    topology = builder.build()
    assert topology.output_streams("app/in-dsl") == []
    driver = run(
        topology, inputs=[("app/in", "o1", {"user": "u1"}), ("app/in", "o2", {"user": "u1"})]
    )
    assert dict(driver.get_key_value_store("app/in-dsl", "counts").all()) == {"u1": 2}


class Tag(Processor):
    """Forwards each record twice, tagged with what its context says about it."""

    def init(self, context) -> None:
        self.context = context

    def process(self, key, value) -> None:
        ctx = self.context
        for copy in (1, 2):
            ctx.forward(key, {"v": value, "copy": copy, "key": ctx.key, "stream": ctx.stream})


def test_a_chain_mixing_old_and_new_operators(run):
    peeked = []
    builder = Topology.builder()
    evens, odds = (
        builder.stream("app/in", codec="json")
        .filter(lambda k, v: k != "skip")
        .flat_map_values(lambda v: range(v))
        .select_key(lambda k, v: f"{k}{v}")
        .peek(lambda k, v: peeked.append(k))
        .branch(lambda k, v: v % 2 == 0, lambda k, v: True)
    )
    evens.process(Tag).map(lambda k, v: (k.upper(), v)).to("app/evens")
    odds.map_values(lambda v: -v).to("app/odds")
    driver = run(builder.build(), inputs=[("app/in", "a", 3), ("app/in", "skip", 2)])
    assert peeked == ["a0", "a1", "a2"]
    tags = [{"v": 0, "key": "a0"}, {"v": 2, "key": "a2"}]
    assert pairs(driver.read_output("app/evens")) == [
        (tag["key"].upper(), {**tag, "copy": copy, "stream": "app/in"})
        for tag in tags
        for copy in (1, 2)
    ]
    assert pairs(driver.read_output("app/odds")) == [("a1", -1)]


def test_two_steps_of_one_computation_declaring_one_store_name_are_refused():
    builder = Topology.builder()
    source = builder.stream("app/in", codec="json")
    source.process(Count, stores=["counts"]).to("app/first")
    source.process(Count, stores=[StoreSpec("counts")]).to("app/second")
    with pytest.raises(
        DslDefinitionError,
        match=r"process\(Count\): state store 'counts' is also declared by builder.stream"
        r"\('app/in'\).process\(Count\), in the same computation; give each step's store",
    ):
        builder.build()


def test_one_store_per_name_per_computation_across_through(run):
    builder = Topology.builder()
    first = builder.stream("app/in", codec="json").process(Count, stores=["counts"])
    first.through("app/mid").process(Count, stores=["counts"]).to("app/out")
    topology = builder.build()
    assert topology.stores("app/in-dsl") == topology.stores("app/mid-dsl") == (StoreSpec("counts"),)
    driver = run(topology, inputs=[("app/in", "a", 1), ("app/in", "a", 1)])
    assert pairs(driver.read_output("app/out")) == [("a", 1), ("a", 2)]
    assert driver.manager.exists(changelog_name("app/mid-dsl", "counts"))


def test_a_stateful_step_reached_twice_in_one_computation_is_one_step(run):
    builder = Topology.builder()
    big, small = builder.stream("app/in", codec="json").branch(
        lambda k, v: v >= 10, lambda k, v: True
    )
    big.merge(small).process(Count, stores=["counts"]).to("app/counts")
    driver = run(builder.build(), inputs=[("app/in", "a", 20), ("app/in", "a", 3)])
    assert pairs(driver.read_output("app/counts")) == [("a", 1), ("a", 2)]


def test_a_stateful_step_after_a_merge_of_two_sources_is_refused():
    builder = Topology.builder()
    a, b = builder.stream("app/a", codec="json"), builder.stream("app/b", codec="json")
    a.merge(b).process(Count, stores=["counts"]).to("app/counts")
    with pytest.raises(
        DslDefinitionError,
        match=r"follows a merge of the streams 'app/a' and 'app/b'.*\.through\('<stream>'\)",
    ):
        builder.build()


def test_a_stateless_step_after_a_merge_of_two_sources_runs_in_each(run):
    builder = Topology.builder()
    a, b = builder.stream("app/a", codec="json"), builder.stream("app/b", codec="json")
    a.merge(b).process(Tag).to("app/out")
    driver = run(builder.build(), inputs=[("app/a", "x", 1), ("app/b", "y", 2)])
    streams = {(k, v["stream"]) for k, v in pairs(driver.read_output("app/out"))}
    assert streams == {("x", "app/a"), ("y", "app/b")}


class NotAProcessor:
    def process(self, key, value) -> None:
        pass


def source():
    return Topology.builder().stream("app/in", codec="json")


@pytest.mark.parametrize(
    ("operator", "args"),
    [
        ("flat_map_values", (42,)),
        ("peek", ("print",)),
        ("select_key", (None,)),
        ("process", ("Count",)),
    ],
)
def test_a_non_callable_argument_of_a_new_operator_is_refused_at_once(operator, args):
    with pytest.raises(
        NotCallableError, match=rf"builder.stream\('app/in'\)\.{operator}\(\.\.\.\): expected"
    ):
        getattr(source(), operator)(*args)


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (
            lambda: source().process(NotAProcessor),
            r"\.process\(NotAProcessor\): NotAProcessor is not a Processor subclass",
        ),
        (
            lambda: source().process(Count, stores=["bad-name"]),
            r"\.process\(Count\): state store name 'bad-name' is not valid",
        ),
        (
            lambda: source().process(Count, stores=["counts", "counts"]),
            r"\.process\(Count\): stores=\['counts', 'counts'\] declares a store twice",
        ),
        (
            lambda: source().process(Count, stores=[42]),
            r"\.process\(Count\): a state store is declared by its name or a StoreSpec",
        ),
    ],
)
def test_bad_process_arguments_name_the_chain_and_the_fix(make, match):
    with pytest.raises(DslDefinitionError, match=match):
        make()


def test_a_supplier_returning_no_processor_is_refused_at_build():
    builder = Topology.builder()
    builder.stream("app/in").process(lambda: NotAProcessor()).to("app/out")
    with pytest.raises(DslDefinitionError, match=r"returned NotAProcessor, not a Processor"):
        builder.build()


class Misbehaving(Processor):
    """Does what its record's value says a processor in a chain cannot do."""

    def init(self, context) -> None:
        self.context = context

    def process(self, key, value) -> None:
        if value == "undeclared-store":
            self.context.get_state_store("other")
        elif value == "send":
            self.context.send("app/side", key, value)
        elif value == "forward-to":
            self.context.forward(key, value, to="app/side")
        else:
            self.context.forward(key, value)


def test_what_a_processor_cannot_do_in_a_chain_fails_the_record_with_the_fix(run):
    builder = Topology.builder()
    builder.stream("app/in", codec="json").process(Misbehaving, stores=["counts"]).map_values(
        lambda v: 1 / v
    ).to("app/out")
    inputs = [
        ("app/in", "a", "undeclared-store"),
        ("app/in", "b", "send"),
        ("app/in", "c", "forward-to"),
        ("app/in", "d", 0),
        ("app/in", "e", 4),
    ]
    driver = run(builder.build(), dlq_settings("app/in-dsl"), inputs)
    assert pairs(driver.read_output("app/out")) == [("e", 0.25)]
    letters = {d.record.key: d for d in driver.read_dead_letters(DLQ)}
    assert letters["a"].error_type == "TopologyError"
    assert "has no state store 'other' (it declares ['counts'])" in letters["a"].error
    assert letters["b"].error_type == "UnknownOutputError"
    assert "end it with .to('app/side')" in letters["b"].error
    assert letters["c"].error_type == "UnknownOutputError"
    assert "call forward(key, value)" in letters["c"].error
    assert letters["d"].error_type == "ZeroDivisionError"


def test_an_error_after_a_process_step_is_noted_once_with_its_own_operator(run):
    builder = Topology.builder()
    builder.stream("app/in", codec="json").process(Misbehaving).map_values(lambda v: 1 / v).to(
        "app/out"
    )
    topology = builder.build()
    computation = topology.supplier("app/in-dsl")()

    class Context:
        produce_record = staticmethod(lambda output, record: None)

        def ask_for_checkpoint(self) -> None:
            pass

    computation.init(Context())  # type: ignore[arg-type]
    with pytest.raises(ZeroDivisionError) as info:
        computation.process_record(Context(), "i1", Record.of("k", b"0"))  # type: ignore[arg-type]
    assert info.value.__notes__ == [
        "in DSL operator builder.stream('app/in').process(Misbehaving).map_values(<lambda>)"
    ]


def test_a_process_step_is_initialised_with_its_computation_and_closed_with_it():
    calls = []

    class Lifecycle(Processor):
        def init(self, context) -> None:
            calls.append(("init", context.computation_name, context.outputs))

        def process(self, key, value) -> None:
            calls.append(("process", key))

        def close(self) -> None:
            calls.append(("close",))

    builder = Topology.builder()
    builder.stream("app/in").process(Lifecycle)
    with TopologyTestDriver(builder.build()) as driver:
        driver.pipe("app/in", "a", b"x")
    assert calls[-3:] == [("init", "app/in-dsl", ()), ("process", "a"), ("close",)]


class Report(Processor):
    """Counts per key in its store; on each punctuation forwards every count, then clears them."""

    def __init__(
        self, interval_ms: int = 1000, kind=PunctuationType.WALL_CLOCK_TIME, store="counts"
    ) -> None:
        self.interval_ms, self.kind, self.store = interval_ms, kind, store

    def init(self, context) -> None:
        self.context = context
        context.schedule(self.interval_ms, self.kind)

    def process(self, key, value) -> None:
        store = self.context.get_state_store(self.store)
        store.put(key, (store.get(key) or 0) + 1)

    def punctuate(self, timestamp) -> None:
        store = self.context.get_state_store(self.store)
        for key, count in sorted(store.all()):
            self.context.forward(key, {"count": count, "at": timestamp})
            store.delete(key)


def test_a_process_step_punctuates_on_the_clock_and_forwards_down_the_chain(run):
    builder = Topology.builder()
    builder.stream("app/in", codec="json").process(Report, stores=["counts"]).filter(
        lambda k, v: k != "hidden"
    ).to("app/report")
    driver = run(builder.build(), inputs=[("app/in", k, 1) for k in ("a", "b", "a", "hidden")])
    assert driver.read_output("app/report") == []
    driver.advance_time(1000)
    out = driver.read_output("app/report")
    assert pairs(out) == [
        ("a", {"count": 2, "at": 1_001_000}),
        ("b", {"count": 1, "at": 1_001_000}),
    ]
    driver.pipe("app/in", "b", js(1))
    driver.advance_time(1000)
    assert pairs(driver.read_output("app/report")) == [("b", {"count": 1, "at": 1_002_000})]
    assert dict(driver.get_key_value_store("app/in-dsl", "counts").all()) == {}


def test_a_process_step_punctuates_each_task_on_its_stream_time(run):
    builder = Topology.builder()
    builder.stream("app/in", codec="json").process(
        lambda: Report(1000, PunctuationType.STREAM_TIME), stores=["counts"]
    ).to("app/report")
    driver = run(builder.build())
    driver.pipe("app/in", "a", js(1), timestamp_ms=500)  # first record: punctuates at once
    assert pairs(driver.read_output("app/report")) == [("a", {"count": 1, "at": 500})]
    driver.pipe("app/in", "a", js(1), timestamp_ms=900)
    driver.pipe("app/in", "b", js(1), timestamp_ms=950)
    driver.advance_time(60_000)  # the clock never fires it
    assert driver.read_output("app/report") == []
    driver.pipe("app/in", "c", js(1), timestamp_ms=3_100)  # past 1000 (and 2000, 3000): once
    assert pairs(driver.read_output("app/report")) == [
        ("a", {"count": 1, "at": 3_100}),
        ("b", {"count": 1, "at": 3_100}),
        ("c", {"count": 1, "at": 3_100}),
    ]


def test_two_punctuating_steps_of_one_chain_keep_their_own_timers(run):
    builder = Topology.builder()
    fast = builder.stream("app/in", codec="json").process(
        lambda: Report(1000, store="fast"), stores=["fast"]
    )
    fast.to("app/fast")
    # The second step counts the reports of the first, and reports every 3 s.
    fast.process(lambda: Report(3000, store="slow"), stores=["slow"]).to("app/slow")
    driver = run(builder.build(), inputs=[("app/in", k, 1) for k in ("a", "a", "b")])
    driver.advance_time(1000)
    assert pairs(driver.read_output("app/fast")) == [
        ("a", {"count": 2, "at": 1_001_000}),
        ("b", {"count": 1, "at": 1_001_000}),
    ]
    driver.pipe("app/in", "a", js(1))
    driver.advance_time(1000)
    assert pairs(driver.read_output("app/fast")) == [("a", {"count": 1, "at": 1_002_000})]
    assert driver.read_output("app/slow") == []
    driver.advance_time(1000)
    assert pairs(driver.read_output("app/slow")) == [
        ("a", {"count": 2, "at": 1_003_000}),
        ("b", {"count": 1, "at": 1_003_000}),
    ]


def test_bad_schedule_arguments_in_a_chain_name_the_step():
    builder = Topology.builder()
    builder.stream("app/in").process(lambda: Report(0), stores=["counts"]).to("app/out")
    computation = builder.build().supplier("app/in-dsl")()
    with pytest.raises(DslDefinitionError, match=r"\.process\(<lambda>\): schedule\(0\)"):
        computation.init(object())  # type: ignore[arg-type]
