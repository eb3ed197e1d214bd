"""Tests of `streamcore.codecs`: fingerprints, schema store, registries, every codec mode.

The Confluent Schema Registry cannot run in this environment (no server, and the
`schemaregistry` extra of confluent-kafka is not installed), so `ConfluentSchemaRegistry` is
tested against a mock client only; the file registry is tested for real, across processes.
"""

from __future__ import annotations

import ast
import io
import json
import os
import re
import struct
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import fastavro
import pytest
from fastavro.schema import fingerprint as fastavro_fingerprint
from fastavro.schema import to_parsing_canonical_form
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import streamcore.codecs.avro as avro_module
from streamcore.codecs import (
    CODEC_NAMES,
    AvroCodec,
    Codec,
    ConfluentSchemaRegistry,
    FileSchemaRegistry,
    JsonCodec,
    RecordCodec,
    SchemaStore,
    canonical_form,
    clear_codec_cache,
    fingerprint,
    get_codec,
    load_schema,
)
from streamcore.codecs.binary_guard import MAX_EMPTY_ITEMS, MAX_NESTING, BinaryGuard
from streamcore.codecs.fingerprint import EMPTY, crc64_avro, fingerprint_bytes
from streamcore.codecs.record_binary import (
    RECORD_CANONICAL,
    RECORD_FINGERPRINT,
    RECORD_SCHEMA,
    decode_record,
    encode_record,
)
from streamcore.codecs.record_codec import record_from_datum, record_to_datum
from streamcore.codecs.registry import open_registry
from streamcore.config import load_config, project_root
from streamcore.errors import CodecError, SchemaNotFoundError
from streamcore.record import Flag, Record

INCLUDE_SCHEMAS = project_root() / "include" / "schemas"
TEST_SCHEMAS = project_root() / "tests" / "data" / "schemas"
RECORD_AVSC = INCLUDE_SCHEMAS / "Record.avsc"
ITEM_V1 = TEST_SCHEMAS / "Item.v1.avsc"
ITEM_V2 = TEST_SCHEMAS / "Item.v2.avsc"
KITCHEN = TEST_SCHEMAS / "Kitchen.avsc"
AVRO_MODES = ("avro", "avro-binary", "avro-json", "avro-confluent")
WATERMARK = (1_700_000_000_123 << 17) | (42 << 1)
FUZZ = settings(deadline=None, max_examples=300, suppress_health_check=[HealthCheck.too_slow])

LINKED_LIST = {
    "type": "record",
    "name": "Node",
    "namespace": "test.streamcore",
    "fields": [
        {"name": "value", "type": "int"},
        {"name": "next", "type": ["null", "Node"], "default": None},
    ],
}
NULL_ARRAY = {"type": "array", "items": "null"}
SIMPLE = {
    "type": "record",
    "name": "Simple",
    "namespace": "test.streamcore",
    "fields": [{"name": "n", "type": "int"}, {"name": "s", "type": "string"}],
}


def load_json(path: Path) -> Any:
    return json.loads(path.read_text())


def kitchen_datum() -> dict[str, Any]:
    from datetime import UTC, datetime

    return {
        "flag": True,
        "count": -7,
        "total": 2**62,
        "ratio": 0.5,
        "precise": -1.25e300,
        "blob": b"\x00\xff\x10",
        "label": "héllo wörld ✓",
        "nothing": None,
        "color": "GREEN",
        "digest": b"abcd",
        "tags": ["a", "", "ccc"],
        "attributes": {"x": 1, "y": -(2**40)},
        "maybe": "text",
        "child": {"when": datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=UTC), "shade": "BLUE"},
    }


def sample_record(**changes: Any) -> Record:
    values: dict[str, Any] = {
        "key": "doc-42",
        "data": bytes(range(100)),
        "watermark": WATERMARK,
        "flags": Flag.DEFAULT | Flag.COMMIT,
        "trace_context": None,
    }
    values.update(changes)
    return Record(**values)


def unchecked_record(**changes: Any) -> Record:
    """`sample_record` with `changes` not checked by the constructor (which refuses them): what
    only a caller that bypasses it (`Record._make`) can hand a codec."""
    record = sample_record()
    return Record._make({**record._asdict(), **changes}.values())


def zigzag_varint(n: int) -> bytes:
    """The Avro encoding of a long (for hand-made hostile inputs)."""
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def fastavro_body(schema: Any, datum: Any) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), datum)
    return out.getvalue()


def fastavro_read(schema: Any, body: bytes) -> Any:
    return fastavro.schemaless_reader(io.BytesIO(body), fastavro.parse_schema(schema))


@pytest.fixture(scope="module")
def store() -> SchemaStore:
    """include/schemas first (current versions), then the test-only schemas."""
    return SchemaStore([INCLUDE_SCHEMAS, TEST_SCHEMAS])


@pytest.fixture
def registry(tmp_path: Path) -> FileSchemaRegistry:
    return FileSchemaRegistry(tmp_path / "schema-registry")


@pytest.fixture(autouse=True)
def _fresh_codec_cache() -> Any:
    clear_codec_cache()
    yield
    clear_codec_cache()


records = st.builds(
    Record,
    key=st.text(max_size=40),
    data=st.binary(max_size=300),
    watermark=st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.integers(min_value=0, max_value=2**46 - 1).map(lambda ms: ms << 17),
    flags=st.integers(min_value=0, max_value=255).map(Flag),
    trace_context=st.none() | st.binary(max_size=40),
)


# ---------------------------------------------------------------------------------------------
class TestFingerprint:
    @pytest.mark.parametrize(
        "schema",
        [
            load_json(RECORD_AVSC),
            load_json(KITCHEN),
            load_json(ITEM_V1),
            load_json(ITEM_V2),
            LINKED_LIST,
            NULL_ARRAY,
            "string",
            ["null", "long"],
            {"type": "map", "values": {"type": "enum", "name": "E", "symbols": ["A", "B"]}},
        ],
    )
    def test_matches_fastavro_crc64_avro(self, schema: Any) -> None:
        canonical = to_parsing_canonical_form(schema)
        expected_hex = fastavro_fingerprint(canonical, "CRC-64-AVRO")
        assert fingerprint_bytes(fingerprint(schema)).hex() == expected_hex
        assert crc64_avro(canonical.encode()) == fingerprint(schema)

    def test_empty_input_is_the_seed(self) -> None:
        assert crc64_avro(b"") == EMPTY == 0xC15D213AA4D7A795

    def test_accepts_dict_json_text_and_parsed_schema(self) -> None:
        raw = load_json(RECORD_AVSC)
        expected = fingerprint(raw)
        assert fingerprint(json.dumps(raw)) == expected
        assert fingerprint(fastavro.parse_schema(raw)) == expected
        assert fingerprint(RECORD_AVSC.read_text()) == expected

    def test_docs_and_defaults_do_not_change_the_fingerprint(self) -> None:
        raw = load_json(ITEM_V2)
        stripped = json.loads(json.dumps(raw))
        stripped.pop("doc")
        stripped["fields"][2].pop("default")
        assert fingerprint(stripped) == fingerprint(raw)
        assert fingerprint(ITEM_V1.read_text()) != fingerprint(raw)

    def test_builtin_record_layout_is_include_record_avsc(self) -> None:
        assert canonical_form(RECORD_AVSC.read_text()) == RECORD_CANONICAL
        assert (
            fingerprint(RECORD_SCHEMA) == RECORD_FINGERPRINT == fingerprint(load_json(RECORD_AVSC))
        )


# ---------------------------------------------------------------------------------------------
class TestSchemaStore:
    def test_loads_include_schemas_by_default(self) -> None:
        default = SchemaStore()
        assert default.dirs == (load_config().schemas_dir,)
        record = default.by_name("org.nuxeo.lib.stream.computation.Record")
        assert record.fingerprint == RECORD_FINGERPRINT
        assert default.by_fingerprint(RECORD_FINGERPRINT) is record

    def test_first_directory_wins_by_name_every_version_by_fingerprint(
        self, store: SchemaStore
    ) -> None:
        assert store.by_name("org.nuxeo.lib.stream.computation.Record").source == str(RECORD_AVSC)
        v0 = load_schema(TEST_SCHEMAS / "Record.v0.avsc")
        assert store.by_fingerprint(v0.fingerprint).canonical == v0.canonical
        # Item.v1.avsc sorts before Item.v2.avsc
        assert store.by_name("test.streamcore.Item").fingerprint == fingerprint(ITEM_V1.read_text())
        assert fingerprint(ITEM_V2.read_text()) in store

    def test_unknown_fingerprint_names_it_and_says_where_to_add_the_schema(
        self, store: SchemaStore
    ) -> None:
        with pytest.raises(SchemaNotFoundError, match=r"0x0000000000001234.*include/schemas"):
            store.by_fingerprint(0x1234)

    def test_unknown_name(self, store: SchemaStore) -> None:
        with pytest.raises(SchemaNotFoundError, match=r"no schema named 'no\.such\.Thing'"):
            store.by_name("no.such.Thing")

    def test_add_is_idempotent_and_keeps_the_current_version(self, tmp_path: Path) -> None:
        local = SchemaStore([tmp_path])
        v1 = local.add(ITEM_V1)
        assert local.add(load_json(ITEM_V1)) is v1
        v2 = local.add(ITEM_V2.read_text())
        assert local.by_name("test.streamcore.Item") is v1
        assert local.by_fingerprint(v2.fingerprint) is v2
        local.add(ITEM_V2, current=True)
        assert local.by_name("test.streamcore.Item") is v2
        assert len(local) == 2

    def test_invalid_json_file_is_named(self, tmp_path: Path) -> None:
        bad = tmp_path / "Broken.avsc"
        bad.write_text('{"type": "record", ')
        with pytest.raises(CodecError, match=r"Broken\.avsc is not valid JSON"):
            SchemaStore([tmp_path])

    def test_invalid_schema_file_is_named(self, tmp_path: Path) -> None:
        bad = tmp_path / "Wrong.avsc"
        bad.write_text('{"type": "record", "name": "W", "fields": [{"name": "x", "type": "nope"}]}')
        with pytest.raises(CodecError, match=r"Wrong\.avsc is not a valid Avro schema"):
            SchemaStore([tmp_path])

    def test_missing_directory_loads_nothing(self, tmp_path: Path) -> None:
        assert len(SchemaStore([tmp_path / "absent"])) == 0


# ---------------------------------------------------------------------------------------------
class TestAvroCodec:
    @pytest.mark.parametrize("mode", AVRO_MODES)
    def test_round_trip_of_every_type(self, mode: str, registry: FileSchemaRegistry) -> None:
        codec = AvroCodec(KITCHEN, mode, registry=registry)
        datum = kitchen_datum()
        assert codec.decode(codec.encode(datum)) == datum

    def test_single_object_header_byte_by_byte(self) -> None:
        codec = AvroCodec(KITCHEN, "avro")
        data = codec.encode(kitchen_datum())
        fp = fingerprint(load_json(KITCHEN))
        assert data[0] == 0xC3
        assert data[1] == 0x01
        for i in range(8):
            assert data[2 + i] == (fp >> (8 * i)) & 0xFF
        assert data[2:10] == struct.pack("<Q", fp)
        assert data[2:10].hex() == fastavro_fingerprint(
            canonical_form(load_json(KITCHEN)), "CRC-64-AVRO"
        )

    def test_body_after_the_header_is_plain_avro_binary(self) -> None:
        codec = AvroCodec(KITCHEN, "avro")
        datum = kitchen_datum()
        data = codec.encode(datum)
        assert fastavro_read(load_json(KITCHEN), data[10:]) == datum
        assert data[10:] == fastavro_body(load_json(KITCHEN), datum)
        assert AvroCodec(KITCHEN, "avro-binary").encode(datum) == data[10:]

    def test_confluent_header_is_zero_and_big_endian_id(self, registry: FileSchemaRegistry) -> None:
        registry.register("other", SIMPLE)  # take id 1 so the codec's schema gets id 2
        codec = AvroCodec(KITCHEN, "avro-confluent", registry=registry)
        datum = kitchen_datum()
        data = codec.encode(datum)
        assert data[0] == 0x00
        assert data[1:5] == b"\x00\x00\x00\x02"
        assert struct.unpack(">I", data[1:5])[0] == codec.schema_id == 2
        assert data[5:] == fastavro_body(load_json(KITCHEN), datum)
        assert registry.get(2).fullname == "test.streamcore.Kitchen"
        assert registry.subjects() == {"other": [1], "test.streamcore.Kitchen": [2]}

    def test_avro_json_is_one_line_of_utf8_json(self) -> None:
        codec = AvroCodec(KITCHEN, "avro-json")
        data = codec.encode(kitchen_datum())
        assert b"\n" not in data
        text = data.decode("utf-8")
        assert json.loads(text)["label"] == "héllo wörld ✓"
        assert json.loads(text)["maybe"] == {"string": "text"}

    def test_avro_json_accepts_pretty_printed_input(self) -> None:
        codec = AvroCodec(SIMPLE, "avro-json")
        assert codec.decode(b'{\n  "n": 3,\n  "s": "x"\n}\n') == {"n": 3, "s": "x"}

    @pytest.mark.parametrize("mode", AVRO_MODES)
    @pytest.mark.parametrize(
        ("datum", "reason"),
        [
            ({"n": "3", "s": "x"}, "does not match schema"),
            ({"n": 1.5, "s": "x"}, "does not match schema"),
            ({"n": 2**40, "s": "x"}, "does not match schema"),
            ({"n": True, "s": "x"}, "does not match schema"),
            ({"n": 1}, "does not match schema"),
            ({"n": 1, "s": "x", "extra": 2}, "more fields than the schema"),
            ("not a dict", "does not match schema"),
        ],
    )
    def test_invalid_datum_on_encode(
        self, mode: str, datum: Any, reason: str, registry: FileSchemaRegistry
    ) -> None:
        codec = AvroCodec(SIMPLE, mode, registry=registry)
        with pytest.raises(CodecError, match=rf"codec '{mode}': .*{reason}"):
            codec.encode(datum)

    def test_without_validation_fastavro_still_rejects_wrong_types(self) -> None:
        codec = AvroCodec(SIMPLE, "avro", validate=False)
        with pytest.raises(CodecError, match="cannot encode datum"):
            codec.encode({"n": "three", "s": "x"})
        assert codec.decode(codec.encode({"n": 3, "s": "x"})) == {"n": 3, "s": "x"}

    def test_unknown_mode(self) -> None:
        with pytest.raises(CodecError, match="unknown Avro mode"):
            AvroCodec(SIMPLE, "avro-xml")


# ---------------------------------------------------------------------------------------------
class TestSchemaEvolution:
    def test_writer_v1_reader_v2_fills_the_added_field_default(self, store: SchemaStore) -> None:
        writer = AvroCodec(ITEM_V1, "avro")
        reader = AvroCodec(ITEM_V2, "avro", store=store)
        data = writer.encode({"id": 7, "name": "seven"})
        assert reader.decode(data) == {"id": 7, "name": "seven", "color": "red"}

    def test_writer_v2_reader_v1_drops_the_removed_field(self, store: SchemaStore) -> None:
        writer = AvroCodec(ITEM_V2, "avro")
        reader = AvroCodec(ITEM_V1, "avro", store=store)
        data = writer.encode({"id": 8, "name": "eight", "color": "blue"})
        assert reader.decode(data) == {"id": 8, "name": "eight"}

    def test_confluent_evolution_through_the_registry(self, registry: FileSchemaRegistry) -> None:
        writer = AvroCodec(ITEM_V1, "avro-confluent", registry=registry)
        reader = AvroCodec(ITEM_V2, "avro-confluent", registry=registry)
        data = writer.encode({"id": 1, "name": "one"})
        assert reader.decode(data) == {"id": 1, "name": "one", "color": "red"}
        back = reader.encode({"id": 2, "name": "two", "color": "green"})
        assert writer.decode(back) == {"id": 2, "name": "two"}
        assert writer.schema_id != reader.schema_id
        assert registry.subjects()["test.streamcore.Item"] == [writer.schema_id, reader.schema_id]

    def test_unknown_writer_fingerprint(self, tmp_path: Path) -> None:
        writer = AvroCodec(ITEM_V1, "avro")
        reader = AvroCodec(ITEM_V2, "avro", store=SchemaStore([tmp_path]))
        fp = fingerprint(ITEM_V1.read_text())
        with pytest.raises(SchemaNotFoundError, match=rf"0x{fp:016x}.*include/schemas"):
            reader.decode(writer.encode({"id": 1, "name": "x"}))

    def test_incompatible_change_is_explained(self, store: SchemaStore) -> None:
        required = json.loads(ITEM_V2.read_text())
        del required["fields"][2]["default"]
        reader = AvroCodec(required, "avro", store=store)
        data = AvroCodec(ITEM_V1, "avro").encode({"id": 1, "name": "x"})
        with pytest.raises(CodecError, match="not backward compatible"):
            reader.decode(data)

    def test_records_written_with_older_and_newer_record_schemas(self, store: SchemaStore) -> None:
        codec = RecordCodec("avro", store=store)
        assert codec.fast
        old = AvroCodec(TEST_SCHEMAS / "Record.v0.avsc", "avro").encode(
            {"watermark": WATERMARK, "key": "k", "data": b"old", "flagsAsByte": 3}
        )
        assert codec.decode(old) == Record("k", b"old", WATERMARK, Flag.DEFAULT | Flag.COMMIT)
        new = AvroCodec(TEST_SCHEMAS / "Record.v2.avsc", "avro").encode(
            {
                "watermark": 5,
                "key": "k2",
                "data": b"new",
                "flagsAsByte": 1,
                "traceContext": b"tc",
                "priority": 9,
            }
        )
        assert codec.decode(new) == Record("k2", b"new", 5, Flag.DEFAULT, b"tc")


# ---------------------------------------------------------------------------------------------
class TestRecordCodec:
    EDGE_RECORDS = (
        sample_record(),
        sample_record(key="", data=b"", watermark=0, flags=Flag(0)),
        sample_record(watermark=-1),
        sample_record(watermark=2**63 - 1, trace_context=b"\x00" * 5000),
        sample_record(watermark=-(2**63), trace_context=b""),
        sample_record(key="ключ-✓-🙂" * 30, data=b"\xff" * 70_000, flags=Flag(255)),
        sample_record(watermark=(1 << 28) - 1),
        sample_record(watermark=1 << 27, flags=Flag.USER2 | Flag.POISON_PILL),
    )

    @pytest.mark.parametrize("name", CODEC_NAMES)
    @pytest.mark.parametrize("record", EDGE_RECORDS, ids=range(len(EDGE_RECORDS)))
    def test_round_trip(self, name: str, record: Record, registry: FileSchemaRegistry) -> None:
        codec = RecordCodec(name, registry=registry)
        decoded = codec.decode(codec.encode(record))
        assert decoded == record
        assert type(decoded.flags) is Flag

    @pytest.mark.parametrize("record", EDGE_RECORDS, ids=range(len(EDGE_RECORDS)))
    def test_avro_bytes_equal_fastavro_single_object(self, record: Record) -> None:
        data = RecordCodec("avro").encode(record)
        assert data[:10] == b"\xc3\x01" + struct.pack("<Q", RECORD_FINGERPRINT)
        assert data[10:] == fastavro_body(RECORD_SCHEMA, record_to_datum(record))
        assert record_from_datum(fastavro_read(RECORD_SCHEMA, data[10:])) == record
        assert data == AvroCodec(RECORD_AVSC, "avro").encode(record_to_datum(record))

    def test_fast_path_does_not_call_fastavro(self, monkeypatch: pytest.MonkeyPatch) -> None:
        codec = RecordCodec("avro")
        assert codec.fast

        def forbidden(*args: Any, **kwargs: Any) -> Any:
            raise AssertionError("fastavro called on the fast path")

        monkeypatch.setattr(avro_module, "schemaless_writer", forbidden)
        monkeypatch.setattr(avro_module, "schemaless_reader", forbidden)
        record = sample_record()
        assert codec.decode(codec.encode(record)) == record

    def test_json_form(self) -> None:
        record = sample_record(data=b"\x00\xffhi", trace_context=b"t")
        data = RecordCodec("json").encode(record)
        assert json.loads(data) == {
            "watermark": WATERMARK,
            "key": "doc-42",
            "data": "AP9oaQ==",
            "flags": 3,
            "traceContext": "dA==",
        }
        assert b" " not in data
        assert json.loads(RecordCodec("json").encode(sample_record()))["traceContext"] is None

    def test_java_signed_flags_byte_decodes(self) -> None:
        """Nuxeo writes flagsAsByte as a Java byte: USER2 (bit 7) arrives as -128."""
        data = AvroCodec(RECORD_AVSC, "avro").encode(
            {"watermark": 1, "key": "k", "data": b"", "flagsAsByte": -128, "traceContext": None}
        )
        assert RecordCodec("avro").decode(data).flags == Flag.USER2
        binary = AvroCodec(RECORD_AVSC, "avro-binary").encode(
            {"watermark": 1, "key": "k", "data": b"", "flagsAsByte": -1, "traceContext": None}
        )
        assert RecordCodec("avro-binary").decode(binary).flags == Flag(255)

    @pytest.mark.parametrize("name", CODEC_NAMES)
    @pytest.mark.parametrize(
        ("record", "reason"),
        [
            (unchecked_record(key=b"bytes"), "key must be str"),
            (unchecked_record(key="\ud800"), "key is not encodable"),
            (unchecked_record(data="text"), "data must be bytes"),
            (unchecked_record(watermark=2**63), "watermark must be an int in the signed 64-bit"),
            (unchecked_record(watermark="1"), "watermark must be an int"),
            (unchecked_record(flags=256), "flags must be a Flag or an int in 0..255"),
            (unchecked_record(trace_context="t"), "trace_context must be bytes"),
            ({"key": "k"}, "expected a Record, got dict"),
        ],
    )
    def test_invalid_record_on_encode_names_the_field(
        self, name: str, record: Any, reason: str, registry: FileSchemaRegistry
    ) -> None:
        with pytest.raises(CodecError, match=rf"codec '{name}': cannot encode Record: {reason}"):
            RecordCodec(name, registry=registry).encode(record)

    def test_other_record_schema_disables_the_fast_path(self, tmp_path: Path) -> None:
        changed = load_json(RECORD_AVSC)
        changed["fields"].append({"name": "extra", "type": "string", "default": ""})
        (tmp_path / "Record.avsc").write_text(json.dumps(changed))
        local = SchemaStore([tmp_path, INCLUDE_SCHEMAS])
        codec = RecordCodec("avro", store=local)
        assert not codec.fast
        record = sample_record(trace_context=b"x")
        data = codec.encode(record)
        assert data[2:10] == fingerprint_bytes(fingerprint(changed))
        assert codec.decode(data) == record
        assert codec.decode(RecordCodec("avro").encode(record)) == record  # older writer
        binary = RecordCodec("avro-binary", store=local)
        assert binary.decode(binary.encode(record)) == record

    def test_builtin_schema_when_the_store_has_no_record(self, tmp_path: Path) -> None:
        codec = RecordCodec("avro", store=SchemaStore([tmp_path]))
        assert codec.fast and codec.schema is not None
        assert codec.schema.fingerprint == RECORD_FINGERPRINT

    def test_confluent_records_use_the_registry_id(self, registry: FileSchemaRegistry) -> None:
        codec = RecordCodec("avro-confluent", registry=registry)
        data = codec.encode(sample_record())
        assert data[:5] == b"\x00\x00\x00\x00\x01"
        assert registry.get(1).fingerprint == RECORD_FINGERPRINT
        older = AvroCodec(TEST_SCHEMAS / "Record.v0.avsc", "avro-confluent", registry=registry)
        old = older.encode({"watermark": 9, "key": "k", "data": b"", "flagsAsByte": 1})
        assert old[:5] == b"\x00\x00\x00\x00\x02"
        assert codec.decode(old) == Record("k", b"", 9, Flag.DEFAULT)

    def test_unknown_codec_name(self) -> None:
        with pytest.raises(CodecError, match="unknown codec; use one of json, avro"):
            RecordCodec("protobuf")


# ---------------------------------------------------------------------------------------------
class TestRecordBinaryCrossCheck:
    """The hand-written Record encoder/decoder against fastavro, byte for byte."""

    @FUZZ
    @given(record=records)
    def test_encoding_equals_fastavro(self, record: Record) -> None:
        assert encode_record(record) == fastavro_body(RECORD_SCHEMA, record_to_datum(record))

    @FUZZ
    @given(record=records)
    def test_decoding_fastavro_bytes(self, record: Record) -> None:
        body = fastavro_body(RECORD_SCHEMA, record_to_datum(record))
        assert decode_record(body) == record
        assert decode_record(b"\xc3\x01" + bytes(8) + body, 10) == record

    @FUZZ
    @given(body=st.binary(max_size=64))
    def test_whatever_the_fast_decoder_accepts_fastavro_reads_the_same(self, body: bytes) -> None:
        try:
            record = decode_record(body)
        except (ValueError, IndexError):
            return
        assert record_from_datum(fastavro_read(RECORD_SCHEMA, body)) == record

    @FUZZ
    @given(record=records, data=st.data())
    def test_mutated_bodies_decode_consistently(self, record: Record, data: st.DataObject) -> None:
        body = bytearray(encode_record(record))
        index = data.draw(st.integers(0, len(body) - 1))
        body[index] ^= 1 << data.draw(st.integers(0, 7))
        try:
            decoded = decode_record(bytes(body))
        except (ValueError, IndexError):
            return
        assert record_from_datum(fastavro_read(RECORD_SCHEMA, bytes(body))) == decoded

    def test_overlong_and_non_canonical_varints(self) -> None:
        # 0 written as the two-byte varint 80 00 is valid Avro (fastavro reads it too)
        body = b"\x80\x00" + b"\x02k" + b"\x00" + b"\x02" + b"\x00"
        assert decode_record(body) == Record("k", b"", 0, Flag.DEFAULT)
        with pytest.raises(ValueError, match="longer than 10 bytes"):
            decode_record(b"\xff" * 11 + b"\x00")
        with pytest.raises(ValueError, match="64 bits"):
            decode_record(b"\xff" * 9 + b"\x7f" + b"\x02k\x00\x02\x00")


# ---------------------------------------------------------------------------------------------
class TestDecodeErrors:
    def test_wrong_magic(self) -> None:
        expected = (
            "codec 'avro': expected magic C3 01, got 00 12; "
            "these bytes are not Avro single-object encoded"
        )
        with pytest.raises(CodecError, match=re.escape(expected)):
            RecordCodec("avro").decode(b"\x00\x12\x34")
        with pytest.raises(CodecError, match=re.escape(expected)):
            AvroCodec(SIMPLE, "avro").decode(b"\x00\x12\x34")

    @pytest.mark.parametrize("data", [b"", b"\xc3", b"\xc3\x01\x00\x01"])
    def test_truncated_header(self, data: bytes) -> None:
        with pytest.raises(CodecError, match=r"codec 'avro': (expected magic|truncated)"):
            RecordCodec("avro").decode(data)

    def test_truncated_body(self) -> None:
        data = RecordCodec("avro").encode(sample_record())
        for cut in range(10, len(data)):
            with pytest.raises(CodecError, match="codec 'avro': not a Record body"):
                RecordCodec("avro").decode(data[:cut])
        simple = AvroCodec(SIMPLE, "avro")
        encoded = simple.encode({"n": 300, "s": "hello"})
        with pytest.raises(CodecError, match="truncated or corrupt body"):
            simple.decode(encoded[:-2])

    def test_trailing_bytes(self) -> None:
        data = RecordCodec("avro").encode(sample_record()) + b"\x00"
        with pytest.raises(CodecError, match="1 bytes left over"):
            RecordCodec("avro").decode(data)
        simple = AvroCodec(SIMPLE, "avro-binary")
        with pytest.raises(CodecError, match="1 bytes left over"):
            simple.decode(simple.encode({"n": 1, "s": ""}) + b"\x00")

    def test_unknown_fingerprint(self) -> None:
        data = b"\xc3\x01" + (0xDEADBEEF).to_bytes(8, "little") + b"\x00"
        with pytest.raises(SchemaNotFoundError, match=r"codec 'avro': .*0x00000000deadbeef"):
            RecordCodec("avro").decode(data)

    def test_wrong_confluent_magic_and_unknown_id(self, registry: FileSchemaRegistry) -> None:
        codec = RecordCodec("avro-confluent", registry=registry)
        with pytest.raises(CodecError, match="expected magic byte 00, got c3"):
            codec.decode(RecordCodec("avro").encode(sample_record()))
        with pytest.raises(CodecError, match="truncated Confluent header"):
            codec.decode(b"\x00\x00\x01")
        with pytest.raises(SchemaNotFoundError, match="schema id 77 is not in the schema registry"):
            codec.decode(b"\x00\x00\x00\x00\x4d\x00")

    @pytest.mark.parametrize("name", ["json", "avro-json"])
    def test_non_utf8_json(self, name: str) -> None:
        with pytest.raises(CodecError, match=rf"codec '{name}': .*must be UTF-8"):
            RecordCodec(name).decode(b'{"key": "\xff"}')

    def test_json_record_with_missing_or_bad_fields(self) -> None:
        codec = RecordCodec("json")
        with pytest.raises(CodecError, match="missing field"):
            codec.decode(b'{"key": "k"}')
        with pytest.raises(CodecError, match="data is not valid base64"):
            codec.decode(b'{"watermark": 1, "key": "k", "data": "!!", "flags": 1}')
        with pytest.raises(CodecError, match=r"flags must be an integer in 0\.\.255"):
            codec.decode(b'{"watermark": 1, "key": "k", "data": "", "flags": 300}')
        with pytest.raises(CodecError, match="expected a JSON object"):
            codec.decode(b"[1, 2]")

    def test_avro_json_value_that_does_not_match_the_schema(self) -> None:
        codec = AvroCodec(SIMPLE, "avro-json")
        with pytest.raises(CodecError, match="does not match schema"):
            codec.decode(b'{"n": "x", "s": "y"}')
        with pytest.raises(CodecError, match="not Avro JSON"):
            codec.decode(b'{"n": 1')

    @pytest.mark.parametrize("name", CODEC_NAMES)
    def test_non_bytes_input(self, name: str, registry: FileSchemaRegistry) -> None:
        with pytest.raises(CodecError, match="can only decode bytes, got str"):
            RecordCodec(name, registry=registry).decode("text")  # type: ignore[arg-type]

    def test_bytearray_and_memoryview_input(self) -> None:
        data = RecordCodec("avro").encode(sample_record())
        assert RecordCodec("avro").decode(bytearray(data)) == sample_record()
        assert RecordCodec("avro").decode(memoryview(data)) == sample_record()  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
class TestBinaryGuard:
    """Bytes that would crash or exhaust fastavro are rejected before it sees them."""

    def test_safe_schemas_need_no_guard(self) -> None:
        for schema in (RECORD_SCHEMA, load_json(KITCHEN), SIMPLE):
            parsed = load_schema(schema)
            assert BinaryGuard.for_schema(parsed.parsed, parsed.named) is None

    def test_risky_schemas_get_a_guard(self) -> None:
        for schema in (LINKED_LIST, NULL_ARRAY):
            parsed = load_schema(schema)
            assert BinaryGuard.for_schema(parsed.parsed, parsed.named) is not None

    def test_huge_count_of_null_items_is_rejected_without_allocating(self) -> None:
        codec = AvroCodec(NULL_ARRAY, "avro-binary")
        huge = zigzag_varint(2**60)  # 2**60 nulls declared in 9 bytes
        with pytest.raises(CodecError, match=f"more than {MAX_EMPTY_ITEMS} zero-byte array items"):
            codec.decode(huge + b"\x00")
        negative_block = zigzag_varint(-(2**60)) + zigzag_varint(0) + b"\x00"
        with pytest.raises(CodecError, match="zero-byte array items"):
            codec.decode(negative_block)
        assert codec.decode(b"\x06\x00") == [None, None, None]

    def test_huge_declared_lengths_are_errors(self) -> None:
        codec = AvroCodec(SIMPLE, "avro-binary")
        with pytest.raises(CodecError, match="truncated or corrupt body"):
            codec.decode(b"\x02" + zigzag_varint(2**62) + b"abc")
        with pytest.raises(CodecError, match="not a Record body: negative key length"):
            RecordCodec("avro-binary").decode(b"\x00" + zigzag_varint(-5) + b"abc")
        with pytest.raises(CodecError, match="not a Record body: truncated"):
            RecordCodec("avro-binary").decode(b"\x00" + zigzag_varint(2**62) + b"abc")

    def test_deep_recursion_is_an_error_not_a_segfault(self) -> None:
        """Run in a child process: a regression would kill the interpreter, not fail a test."""
        script = textwrap.dedent(
            f"""
            from streamcore.codecs import AvroCodec, CodecError
            codec = AvroCodec({LINKED_LIST!r}, "avro-binary")
            shallow = b"\\x02\\x02" * 50 + b"\\x02\\x00"
            assert codec.decode(shallow)["value"] == 1
            try:
                codec.decode(b"\\x02\\x02" * 20000 + b"\\x02\\x00")
            except CodecError as exc:
                print("CodecError:", exc)
            """
        )
        done = subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=project_root(),
            env={**os.environ, "PYTHONPATH": str(project_root())},
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert f"nested deeper than {MAX_NESTING} levels" in done.stdout

    @pytest.mark.parametrize("mode", ["avro", "avro-binary", "avro-json"])
    def test_encode_refuses_what_decode_would_refuse(self, mode: str) -> None:
        codec = AvroCodec(LINKED_LIST, mode)
        node: dict[str, Any] = {"value": 0, "next": None}
        for i in range(MAX_NESTING - 1):
            node = {"value": i, "next": node}
        deeper = {"value": -1, "next": node}
        if mode != "avro-json":  # fastavro's JSON writer fails on recursion (fastavro#765)
            assert codec.decode(codec.encode(node)) == node
            with pytest.raises(CodecError, match=f"nested deeper than {MAX_NESTING} levels"):
                codec.encode(deeper)
        for _ in range(10_000):
            deeper = {"value": -1, "next": deeper}
        with pytest.raises(CodecError, match="datum nests deeper than"):
            codec.encode(deeper)  # would overflow fastavro's C stack
        looped: dict[str, Any] = {"value": 1, "next": None}
        looped["next"] = looped
        with pytest.raises(CodecError, match="contains itself"):
            codec.encode(looped)

    def test_self_containing_record_cannot_recurse_forever(self) -> None:
        schema = {
            "type": "record",
            "name": "Loop",
            "fields": [{"name": "again", "type": "Loop"}],
        }
        try:
            codec = AvroCodec(schema, "avro-binary")
        except CodecError:
            return  # fastavro refused the schema: just as good
        with pytest.raises(CodecError, match="nested deeper"):
            codec.decode(b"\x00")


# ---------------------------------------------------------------------------------------------
class TestFileSchemaRegistry:
    def test_register_is_idempotent(self, registry: FileSchemaRegistry) -> None:
        first = registry.register("items", ITEM_V1)
        assert registry.register("items", load_json(ITEM_V1)) == first == 1
        assert registry.register("items", ITEM_V1.read_text()) == first
        assert registry.register("items", ITEM_V2) == 2
        assert registry.register("elsewhere", ITEM_V1) == first  # ids are global per schema
        assert registry.get(first).canonical == canonical_form(ITEM_V1.read_text())

    def test_ids_survive_a_new_instance(self, tmp_path: Path) -> None:
        one = FileSchemaRegistry(tmp_path)
        ids = [one.register(f"s{i}", {**SIMPLE, "name": f"S{i}"}) for i in range(5)]
        two = FileSchemaRegistry(tmp_path)
        assert [two.register(f"s{i}", {**SIMPLE, "name": f"S{i}"}) for i in range(5)] == ids
        assert two.get(ids[3]).fullname == "test.streamcore.S3"
        assert one.register("new", ITEM_V1) == 6
        assert two.get(6).fullname == "test.streamcore.Item"  # re-reads the file for new ids

    def test_file_is_written_atomically(self, registry: FileSchemaRegistry) -> None:
        registry.register("items", ITEM_V1)
        files = sorted(p.name for p in registry.directory.iterdir())
        assert files == [".lock", "registry.json"]
        content = json.loads(registry.path.read_text())
        assert content["next_id"] == 2
        assert content["subjects"] == {"items": [1]}

    def test_unknown_id(self, registry: FileSchemaRegistry) -> None:
        with pytest.raises(SchemaNotFoundError, match="schema id 5 is not in the schema registry"):
            registry.get(5)

    def test_corrupt_file(self, registry: FileSchemaRegistry) -> None:
        registry.directory.mkdir(parents=True)
        registry.path.write_text("{not json")
        with pytest.raises(CodecError, match=r"registry\.json is corrupt"):
            registry.register("x", SIMPLE)

    def test_processes_never_share_an_id(self, tmp_path: Path) -> None:
        script = textwrap.dedent(
            """
            import json, random, sys
            from streamcore.codecs.registry import FileSchemaRegistry
            registry = FileSchemaRegistry(sys.argv[1])
            order = list(range(12))
            random.Random(int(sys.argv[2])).shuffle(order)
            ids = {}
            for i in order:
                fields = [{"name": "f", "type": "long"}]
                schema = {"type": "record", "name": f"P{i}", "fields": fields}
                ids[i] = registry.register(f"subject-{i % 3}", schema)
            print(json.dumps(ids))
            """
        )
        env = {**os.environ, "PYTHONPATH": str(project_root())}
        children = [
            subprocess.Popen(
                [sys.executable, "-c", script, str(tmp_path), str(seed)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                cwd=project_root(),
                env=env,
            )
            for seed in range(4)
        ]
        results = []
        for child in children:
            out, err = child.communicate(timeout=120)
            assert child.returncode == 0, err
            results.append(json.loads(out))
        assert all(r == results[0] for r in results)
        assert sorted(results[0].values()) == list(range(1, 13))


class _FakeSchema:
    def __init__(self, schema_str: str, schema_type: str = "AVRO") -> None:
        self.schema_str = schema_str
        self.schema_type = schema_type


class _NotFound(Exception):
    http_status_code = 404


class _MockConfluentClient:
    """Stands in for `confluent_kafka.schema_registry.SchemaRegistryClient`.

    A real Confluent Schema Registry cannot run in this environment, so the adapter is only
    checked against this mock of the two client calls it makes.
    """

    def __init__(self) -> None:
        self.schemas: dict[int, _FakeSchema] = {}
        self.calls: list[tuple[str, Any]] = []

    def register_schema(self, subject: str, schema: Any) -> int:
        self.calls.append(("register_schema", subject))
        for schema_id, known in self.schemas.items():
            if known.schema_str == schema.schema_str:
                return schema_id
        schema_id = 100 + len(self.schemas)
        self.schemas[schema_id] = _FakeSchema(schema.schema_str, schema.schema_type)
        return schema_id

    def get_schema(self, schema_id: int) -> _FakeSchema:
        self.calls.append(("get_schema", schema_id))
        if schema_id not in self.schemas:
            raise _NotFound(f"Schema {schema_id} not found")
        return self.schemas[schema_id]


class TestConfluentSchemaRegistry:
    """Mock-client tests only: no Confluent Schema Registry server can run here."""

    def test_register_and_get_through_the_client(self) -> None:
        client = _MockConfluentClient()
        registry = ConfluentSchemaRegistry("http://registry.invalid", client=client)
        schema_id = registry.register("items-value", ITEM_V1)
        assert schema_id == 100
        assert registry.register("items-value", ITEM_V1) == 100
        assert client.calls == [("register_schema", "items-value")]  # cached
        fresh = ConfluentSchemaRegistry("http://registry.invalid", client=client)
        assert fresh.get(100).canonical == canonical_form(ITEM_V1.read_text())
        assert json.loads(client.schemas[100].schema_str)["doc"].startswith("Test-only")

    def test_codec_round_trip_with_the_mock(self) -> None:
        registry = ConfluentSchemaRegistry("http://registry.invalid", client=_MockConfluentClient())
        writer = AvroCodec(ITEM_V1, "avro-confluent", registry=registry)
        reader = AvroCodec(ITEM_V2, "avro-confluent", registry=registry)
        data = writer.encode({"id": 1, "name": "a"})
        assert data[:5] == b"\x00\x00\x00\x00\x64"
        assert reader.decode(data) == {"id": 1, "name": "a", "color": "red"}

    def test_unknown_id_and_other_schema_types(self) -> None:
        client = _MockConfluentClient()
        registry = ConfluentSchemaRegistry("http://registry.invalid", client=client)
        with pytest.raises(SchemaNotFoundError, match="fetching schema id 7: not found"):
            registry.get(7)
        client.schemas[8] = _FakeSchema('{"type": "object"}', "JSON")
        with pytest.raises(CodecError, match="schema id 8 is a JSON schema, not Avro"):
            registry.get(8)

    def test_open_registry_picks_by_url(self, tmp_path: Path) -> None:
        assert isinstance(open_registry(load_config(home=tmp_path)), FileSchemaRegistry)
        config = load_config(home=tmp_path, schema_registry_url="http://registry.invalid:8081")
        try:
            import confluent_kafka.schema_registry  # noqa: F401
        except ImportError:
            with pytest.raises(CodecError, match=r"pip install 'streamcore\[kafka\]'"):
                open_registry(config)
        else:
            assert isinstance(open_registry(config), ConfluentSchemaRegistry)


# ---------------------------------------------------------------------------------------------
class TestGetCodec:
    def test_names(self) -> None:
        assert CODEC_NAMES == ("json", "avro", "avro-binary", "avro-json", "avro-confluent")

    def test_unknown_name_lists_the_valid_ones(self) -> None:
        with pytest.raises(
            CodecError,
            match=r"codec 'avro2': unknown codec; use one of json, avro, avro-binary, avro-json, "
            "avro-confluent",
        ):
            get_codec("avro2")

    @pytest.mark.parametrize("name", CODEC_NAMES)
    def test_without_schema_it_is_the_record_codec(self, name: str, tmp_path: Path) -> None:
        codec = get_codec(name, config=load_config(home=tmp_path))
        assert isinstance(codec, RecordCodec) and isinstance(codec, Codec)
        assert codec.name == name
        assert codec.decode(codec.encode(sample_record())) == sample_record()

    def test_schema_forms_share_one_cached_codec(self, store: SchemaStore) -> None:
        by_dict = get_codec("avro", load_json(ITEM_V2), store=store)
        assert get_codec("avro", ITEM_V2.read_text(), store=store) is by_dict
        assert get_codec("avro", ITEM_V2, store=store) is by_dict
        assert get_codec("avro", str(ITEM_V2), store=store) is by_dict
        assert isinstance(by_dict, AvroCodec)
        by_name = get_codec("avro", "test.streamcore.Item", store=store)  # current = v1
        assert by_name.schema.fingerprint == fingerprint(ITEM_V1.read_text())  # type: ignore[attr-defined]
        assert get_codec("avro-binary", load_json(ITEM_V2), store=store) is not by_dict
        assert get_codec("avro") is get_codec("avro")

    def test_unknown_full_name(self, store: SchemaStore) -> None:
        with pytest.raises(SchemaNotFoundError, match=r"no schema named 'test\.Nope'"):
            get_codec("avro", "test.Nope", store=store)

    def test_primitive_schema_by_type_name(self) -> None:
        codec = get_codec("avro-binary", "string")
        assert codec.encode("hé") == b"\x06h\xc3\xa9"
        assert codec.decode(b"\x06h\xc3\xa9") == "hé"

    def test_json_with_a_schema_is_plain_json(self) -> None:
        assert isinstance(get_codec("json", SIMPLE), JsonCodec)

    def test_confluent_codec_uses_the_configured_registry(self, tmp_path: Path) -> None:
        config = load_config(home=tmp_path)
        codec = get_codec("avro-confluent", SIMPLE, config=config)
        data = codec.encode({"n": 1, "s": "x"})
        assert data[:5] == b"\x00\x00\x00\x00\x01"
        assert (config.registry_dir / "registry.json").is_file()


# ---------------------------------------------------------------------------------------------
class TestJsonCodec:
    def test_compact_utf8(self) -> None:
        assert JsonCodec().encode({"a": [1, "é"], "b": None}) == '{"a":[1,"é"],"b":null}'.encode()

    def test_round_trip(self) -> None:
        value = {"nested": {"list": [1, 2.5, True, None, "x"]}}
        assert JsonCodec().decode(JsonCodec().encode(value)) == value

    @pytest.mark.parametrize(
        ("value", "reason"),
        [(float("nan"), "Out of range float"), ({1, 2}, "not JSON serializable"), (b"x", "bytes")],
    )
    def test_unencodable_values(self, value: Any, reason: str) -> None:
        with pytest.raises(CodecError, match=rf"codec 'json': cannot encode as JSON: .*{reason}"):
            JsonCodec().encode(value)

    def test_bad_input(self) -> None:
        with pytest.raises(CodecError, match="JSON must be UTF-8"):
            JsonCodec().decode(b'"\xc3\x28"')
        with pytest.raises(CodecError, match="not valid JSON"):
            JsonCodec().decode(b"{")
        with pytest.raises(CodecError, match="nested too deeply"):
            JsonCodec().decode(b"[" * 100_000)


# ---------------------------------------------------------------------------------------------
def _fuzz_codecs(registry_dir: Path) -> list[Codec[Any]]:
    registry = FileSchemaRegistry(registry_dir)
    store = SchemaStore([INCLUDE_SCHEMAS, TEST_SCHEMAS])
    codecs: list[Codec[Any]] = [RecordCodec(n, store=store, registry=registry) for n in CODEC_NAMES]
    codecs += [AvroCodec(KITCHEN, m, store, registry) for m in AVRO_MODES]
    codecs += [AvroCodec(ITEM_V2, m, store, registry) for m in AVRO_MODES]
    codecs += [AvroCodec(LINKED_LIST, "avro-binary"), AvroCodec(NULL_ARRAY, "avro-binary")]
    codecs.append(JsonCodec())
    for codec in codecs:  # register schemas so valid confluent ids exist
        if codec.name == "avro-confluent":
            codec.encode(sample_record() if isinstance(codec, RecordCodec) else _valid(codec))
    return codecs


def _valid(codec: Codec[Any]) -> Any:
    if isinstance(codec, RecordCodec):
        return sample_record()
    if isinstance(codec, JsonCodec):
        return {"k": [1, "v"]}
    name = codec.schema.fullname  # type: ignore[attr-defined]
    if name == "test.streamcore.Kitchen":
        return kitchen_datum()
    if name == "test.streamcore.Item":
        return {"id": 5, "name": "five", "color": "teal"}
    if name == "test.streamcore.Node":
        return {"value": 1, "next": {"value": 2, "next": None}}
    return [None, None]


def _decode_or_codec_error(codec: Codec[Any], data: bytes) -> None:
    try:
        result = codec.decode(data)
    except CodecError:
        return
    if isinstance(codec, RecordCodec):
        assert isinstance(result, Record)
        assert isinstance(result.key, str) and isinstance(result.data, bytes)
        assert isinstance(result.flags, Flag)
        assert codec.decode(codec.encode(result)) == result
    elif isinstance(codec, AvroCodec) and codec.schema.fullname:
        assert isinstance(result, dict)
        assert set(result) == {f["name"] for f in codec.schema.raw["fields"]}


@pytest.fixture(scope="module")
def fuzz_codecs(tmp_path_factory: pytest.TempPathFactory) -> list[Codec[Any]]:
    return _fuzz_codecs(tmp_path_factory.mktemp("fuzz-registry"))


class TestFuzz:
    """Any bytes into any codec: a correct object or CodecError, never another exception."""

    @FUZZ
    @given(data=st.data(), raw=st.binary(max_size=200))
    def test_random_bytes(
        self, fuzz_codecs: list[Codec[Any]], data: st.DataObject, raw: bytes
    ) -> None:
        codec = data.draw(st.sampled_from(fuzz_codecs))
        _decode_or_codec_error(codec, raw)

    @FUZZ
    @given(data=st.data())
    def test_mutated_valid_encodings(
        self, fuzz_codecs: list[Codec[Any]], data: st.DataObject
    ) -> None:
        codec = data.draw(st.sampled_from(fuzz_codecs))
        valid = bytearray(codec.encode(_valid(codec)))
        mutation = data.draw(st.sampled_from(["truncate", "flip", "insert", "delete", "garbage"]))
        if mutation == "truncate":
            valid = valid[: data.draw(st.integers(0, len(valid) - 1))]
        elif mutation == "flip":
            for _ in range(data.draw(st.integers(1, 4))):
                i = data.draw(st.integers(0, len(valid) - 1))
                valid[i] ^= 1 << data.draw(st.integers(0, 7))
        elif mutation == "insert":
            i = data.draw(st.integers(0, len(valid)))
            valid[i:i] = data.draw(st.binary(min_size=1, max_size=8))
        elif mutation == "delete" and len(valid) > 1:
            i = data.draw(st.integers(0, len(valid) - 1))
            del valid[i : i + data.draw(st.integers(1, 8))]
        else:
            keep = {"avro": 10, "avro-confluent": 5}.get(codec.name, 0)
            valid = valid[:keep] + data.draw(st.binary(max_size=100))
        _decode_or_codec_error(codec, bytes(valid))

    @FUZZ
    @given(garbage=st.binary(max_size=120))
    def test_record_header_then_garbage(
        self, fuzz_codecs: list[Codec[Any]], garbage: bytes
    ) -> None:
        header = b"\xc3\x01" + struct.pack("<Q", RECORD_FINGERPRINT)
        _decode_or_codec_error(fuzz_codecs[1], header + garbage)

    @FUZZ
    @given(garbage=st.binary(max_size=120))
    def test_recursive_and_null_array_schemas(
        self, fuzz_codecs: list[Codec[Any]], garbage: bytes
    ) -> None:
        for codec in fuzz_codecs[-3:-1]:
            _decode_or_codec_error(codec, garbage)

    @FUZZ
    @given(record=records)
    def test_every_record_round_trips_in_every_codec(
        self, fuzz_codecs: list[Codec[Any]], record: Record
    ) -> None:
        for codec in fuzz_codecs[: len(CODEC_NAMES)]:
            assert codec.decode(codec.encode(record)) == record


# ---------------------------------------------------------------------------------------------
BANNED_MODULES = {"pickle", "cPickle", "_pickle", "marshal", "shelve", "dill", "jsonpickle"}
BANNED_CALLS = {"eval", "exec"}


def unsafe_uses(source: str, where: str) -> list[str]:
    """Imports of pickle-like modules, eval/exec calls, and dynamic imports of banned modules."""
    offenders = []
    for node in ast.walk(ast.parse(source)):
        line = f"{where}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Import):
            offenders += [
                f"{line} imports {a.name}"
                for a in node.names
                if a.name.split(".")[0] in BANNED_MODULES
            ]
        elif isinstance(node, ast.ImportFrom):
            if (node.module or "").split(".")[0] in BANNED_MODULES:
                offenders.append(f"{line} imports from {node.module}")
        elif isinstance(node, ast.Call):
            if isinstance(node.func, ast.Name) and node.func.id in BANNED_CALLS:
                offenders.append(f"{line} calls {node.func.id}()")
            if any(isinstance(a, ast.Constant) and a.value in BANNED_MODULES for a in node.args):
                offenders.append(f"{line} imports a banned module dynamically")
    return offenders


class TestNoUnsafeDeserializers:
    """Nothing under streamcore/ may import pickle-like modules or call eval/exec."""

    def test_streamcore_sources(self) -> None:
        offenders = []
        for path in sorted((project_root() / "streamcore").rglob("*.py")):
            where = str(path.relative_to(project_root()))
            offenders += unsafe_uses(path.read_text(encoding="utf-8"), where)
        assert not offenders, "unsafe deserialisation in streamcore/:\n" + "\n".join(offenders)

    def test_the_check_finds_each_kind_of_offender(self) -> None:
        sample = (
            "import pickle\nfrom marshal import loads\nimport os.path\neval('1')\n"
            "__import__('dill')\nx.eval()\nimport importlib\nimportlib.import_module('shelve')\n"
        )
        assert [o.split(" ", 1)[1] for o in unsafe_uses(sample, "sample")] == [
            "imports pickle",
            "imports from marshal",
            "calls eval()",
            "imports a banned module dynamically",
            "imports a banned module dynamically",
        ]
