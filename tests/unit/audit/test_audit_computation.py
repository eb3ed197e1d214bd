"""A computation that appends audit entries itself with `audit_record`: the records on
`audit/entries` are the same as the relay's (key, watermark, Avro AuditEntry), and a bad entry
fails the record like any other error of the computation (retries, then the dead-letter stream)."""

from __future__ import annotations

import json

from audit_support import entry

from streamcore.audit import STREAM, audit_record, decode_entry
from streamcore.computation import (
    Computation,
    ComputationPolicy,
    Settings,
    Topology,
    TopologyTestDriver,
)
from streamcore.watermark import Watermark


class AuditChanges(Computation):
    """Reads document changes as JSON and appends one audit entry per change."""

    def __init__(self) -> None:
        super().__init__("app/audit-changes", inputs=1, outputs=1)

    def process_record(self, context, input_stream, record):
        change = json.loads(record.data)
        context.produce_record("o1", audit_record(entry(change["n"], **change["fields"])))
        context.ask_for_checkpoint()


def test_a_computation_appends_audit_records_like_the_relay() -> None:
    topology = (
        Topology.builder().add_computation(AuditChanges, ["i1:app/changes", f"o1:{STREAM}"]).build()
    )
    settings = Settings(default_partitions=1).set_policy(
        "app/audit-changes", ComputationPolicy(max_retries=1, delay=1.0, dlq="app/dlq-audit")
    )
    with TopologyTestDriver(topology, settings) as driver:
        driver.pipe("app/changes", "c1", json.dumps({"n": 1, "fields": {}}).encode())
        driver.pipe("app/changes", "c2", json.dumps({"n": 2, "fields": {"doc_id": "x"}}).encode())
        driver.pipe("app/changes", "c3", json.dumps({"n": 3, "fields": {}}).encode())
        records = driver.read_output(STREAM)
        (letter,) = driver.read_dead_letters("app/dlq-audit")
    assert [r.key for r in records] == [entry(1)["doc_id"], entry(3)["doc_id"]]
    assert [decode_entry(r.data).event_id for r in records] == ["e-00001", "e-00003"]
    assert records[0] == audit_record(entry(1))  # the relay appends this very record
    assert Watermark(records[1].watermark).timestamp == decode_entry(records[1].data).event_date_ms
    assert letter.record.key == "c2"
    assert "doc_id 'x' does not match" in letter.error
