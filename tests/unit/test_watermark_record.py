from __future__ import annotations

import itertools
import time
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamcore.errors import RecordFieldError
from streamcore.record import Flag, Record
from streamcore.watermark import LOWEST, Watermark

MAX_TS = (1 << 46) - 1  # keeps ts << 17 inside a signed 64-bit long, like Java
timestamps = st.integers(min_value=0, max_value=MAX_TS)
sequences = st.integers(min_value=0, max_value=0xFFFF)


class TestWatermarkBits:
    def test_known_value(self) -> None:
        # 1234567890123 << 17 = 161817282494201856, sequence 5 << 1 = 10, completed = 1
        wm = Watermark.of(1234567890123, 5, completed=True)
        assert wm.value == 161817282494201867
        assert (wm.timestamp, wm.sequence, wm.completed) == (1234567890123, 5, True)

    @pytest.mark.parametrize(
        ("ts", "seq", "completed", "value"),
        [
            (0, 0, False, 0),
            (0, 0, True, 1),
            (0, 1, False, 2),
            (0, 0xFFFF, True, 0x1FFFF),
            (1, 0, False, 131072),
            (1000, 3, False, 1000 * 131072 + 6),
        ],
    )
    def test_layout_is_ts_shift_17_seq_shift_1_completed(
        self, ts: int, seq: int, completed: bool, value: int
    ) -> None:
        assert Watermark.of(ts, seq, completed).value == value

    @given(timestamps, sequences, st.booleans())
    def test_fields_round_trip(self, ts: int, seq: int, completed: bool) -> None:
        wm = Watermark.of(ts, seq, completed)
        assert wm.value == (ts << 17) | (seq << 1) | int(completed)
        assert (wm.timestamp, wm.sequence, wm.completed) == (ts, seq, completed)
        assert wm.value < 1 << 63

    def test_sequence_never_spills_into_timestamp(self) -> None:
        wm = Watermark.of(42, 0x1FFFF)
        assert wm.timestamp == 42
        assert wm.sequence == 0xFFFF

    def test_negative_timestamp_is_rejected(self) -> None:
        with pytest.raises(ValueError, match="watermark timestamp must be >= 0, got -1"):
            Watermark.of(-1)

    def test_completed_of_sets_only_the_low_bit(self) -> None:
        wm = Watermark.of(1000, 7)
        done = Watermark.completed_of(wm)
        assert done.value == wm.value + 1
        assert (done.timestamp, done.sequence, done.completed) == (1000, 7, True)
        assert Watermark.completed_of(done) == done

    def test_of_now_uses_current_time(self) -> None:
        before = time.time_ns() // 1_000_000
        wm = Watermark.of_now(3)
        after = time.time_ns() // 1_000_000
        assert before <= wm.timestamp <= after
        assert wm.sequence == 3
        assert not wm.completed

    def test_lowest_is_zero(self) -> None:
        assert LOWEST.value == 0
        assert all(Watermark.of(ts) >= LOWEST for ts in (0, 1, 10**12))

    def test_is_done(self) -> None:
        assert Watermark.of(1000, completed=True).is_done(1000)
        assert Watermark.of(1000, completed=True).is_done(999)
        assert not Watermark.of(1000, completed=True).is_done(1001)
        assert not Watermark.of(5000).is_done(1000)


class TestWatermarkOrdering:
    def test_timestamp_then_sequence_then_completed(self) -> None:
        ordered = [
            Watermark.of(1000, 0),
            Watermark.of(1000, 0, completed=True),
            Watermark.of(1000, 1),
            Watermark.of(1000, 0xFFFF, completed=True),
            Watermark.of(1001, 0),
        ]
        assert sorted(reversed(ordered)) == ordered
        assert all(a < b for a, b in itertools.pairwise(ordered))

    @given(timestamps, sequences, st.booleans(), timestamps, sequences, st.booleans())
    def test_order_matches_the_tuple_order(self, t1, s1, c1, t2, s2, c2) -> None:
        a, b = Watermark.of(t1, s1, c1), Watermark.of(t2, s2, c2)
        assert (a < b) == ((t1, s1, c1) < (t2, s2, c2))
        assert (a == b) == ((t1, s1, c1) == (t2, s2, c2))


class TestWatermarkStr:
    @pytest.mark.parametrize(
        ("wm", "text"),
        [
            (Watermark.of(0), "1970-01-01 00:00:00.000:0"),
            (Watermark.of(1234567890123, 5, True), "2009-02-13 23:31:30.123:5"),
            (Watermark.of(1700000000999, 65535), "2023-11-14 22:13:20.999:65535"),
            (Watermark.of(86_400_000 + 1, 1), "1970-01-02 00:00:00.001:1"),
        ],
    )
    def test_format_is_date_time_millis_and_sequence(self, wm: Watermark, text: str) -> None:
        assert str(wm) == text

    @given(st.integers(min_value=0, max_value=253402300799999), sequences)
    def test_millis_are_exact_for_any_timestamp(self, ts: int, seq: int) -> None:
        expected = datetime.fromtimestamp(ts // 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")
        assert str(Watermark.of(ts, seq)) == f"{expected}.{ts % 1000:03d}:{seq}"


class TestRecordFlags:
    @pytest.mark.parametrize(
        ("flag", "value"),
        [
            (Flag.DEFAULT, 1),
            (Flag.COMMIT, 2),
            (Flag.POISON_PILL, 4),
            (Flag.EXTERNAL_VALUE, 8),
            (Flag.INTERNAL1, 16),
            (Flag.INTERNAL2, 32),
            (Flag.USER1, 64),
            (Flag.USER2, 128),
        ],
    )
    def test_flag_bits_are_nuxeo_ordinals(self, flag: Flag, value: int) -> None:
        assert int(flag) == value

    def test_exactly_eight_flags_fit_in_a_byte(self) -> None:
        assert len(Flag) == 8
        combined = Flag(0)
        for flag in Flag:
            combined |= flag
        assert int(combined) == 0xFF

    def test_combined_flags_as_byte(self) -> None:
        flags = Flag.COMMIT | Flag.USER1
        assert int(flags) == 66
        assert Flag(66) == flags
        record = Record("k", b"", 0, flags)
        assert record.has(Flag.COMMIT)
        assert record.has(Flag.USER1)
        assert not record.has(Flag.DEFAULT)


class TestRecord:
    def test_of_stamps_current_time_and_default_flag(self) -> None:
        before = time.time_ns() // 1_000_000
        record = Record.of("key-1", b"payload")
        after = time.time_ns() // 1_000_000
        assert record.key == "key-1"
        assert record.data == b"payload"
        assert record.flags == Flag.DEFAULT
        assert before <= record.timestamp <= after
        assert record.timestamp == Watermark(record.watermark).timestamp

    def test_of_without_data_has_empty_bytes(self) -> None:
        assert Record.of("k").data == b""
        assert Record.of("k", None).data == b""

    def test_of_with_flags(self) -> None:
        assert Record.of("k", b"x", flags=Flag.POISON_PILL).has(Flag.POISON_PILL)

    def test_timestamp_comes_from_the_watermark(self) -> None:
        record = Record("k", b"", Watermark.of(1234567890123, 9).value)
        assert record.timestamp == 1234567890123

    def test_records_compare_by_value(self) -> None:
        assert Record("k", b"x", 5, Flag.COMMIT) == Record("k", b"x", 5, Flag.COMMIT)
        assert Record("k", b"x", 5, Flag.COMMIT) != Record("k", b"x", 5, Flag.DEFAULT)

    def test_str_previews_printable_data(self) -> None:
        record = Record("k", b"hello\x00world" + b"z" * 200, Watermark.of(0, 2).value)
        text = str(record)
        assert "key='k'" in text
        assert "watermark=1970-01-01 00:00:00.000:2" in text
        assert "data[211]='hello.world" in text
        assert "z" * 116 + "'" in text
        assert "z" * 117 not in text


class TestImmutableRecord:
    """A Record never changes once made (Kafka Streams' `Record`): its fields are checked by the
    constructor, and `with_*` returns a changed copy."""

    def test_fields_cannot_be_assigned(self) -> None:
        record = Record("k", b"x", 5)
        for field, value in (("key", "j"), ("data", b"y"), ("watermark", 6), ("flags", 0)):
            with pytest.raises(AttributeError):
                setattr(record, field, value)
        assert record == Record("k", b"x", 5)

    def test_with_methods_return_changed_copies(self) -> None:
        record = Record("k", b"x", 5, Flag.COMMIT, b"t")
        assert record.with_key("j") == Record("j", b"x", 5, Flag.COMMIT, b"t")
        assert record.with_data(b"y") == Record("k", b"y", 5, Flag.COMMIT, b"t")
        assert record.with_watermark(6) == Record("k", b"x", 6, Flag.COMMIT, b"t")
        assert record.with_flags(Flag.USER1) == Record("k", b"x", 5, Flag.USER1, b"t")
        assert record.with_trace_context(None) == Record("k", b"x", 5, Flag.COMMIT)
        assert record == Record("k", b"x", 5, Flag.COMMIT, b"t")

    @pytest.mark.parametrize(
        ("fields", "match"),
        [
            ({"key": b"bytes"}, "key must be a str"),
            ({"key": "\ud800"}, "key must be encodable as UTF-8"),
            ({"data": "text"}, "data must be bytes"),
            ({"data": None}, "data must be bytes"),
            ({"watermark": 2**63}, "watermark must be in the signed 64-bit range"),
            ({"watermark": "1"}, "watermark must be an int"),
            ({"watermark": True}, "watermark must be an int"),
            ({"flags": 256}, "flags must be a Flag or an int in 0..255"),
            ({"trace_context": "t"}, "trace_context must be bytes"),
        ],
    )
    def test_the_constructor_and_the_copies_refuse_a_bad_field(
        self, fields: dict[str, object], match: str
    ) -> None:
        with pytest.raises(RecordFieldError, match=match):
            Record(**{"key": "k", **fields})  # type: ignore[arg-type]
        ((field, value),) = fields.items()
        with pytest.raises(RecordFieldError, match=match):
            getattr(Record("k"), f"with_{field}")(value)
        with pytest.raises(RecordFieldError, match=match):
            Record("k")._replace(**fields)
        assert issubclass(RecordFieldError, TypeError) and issubclass(RecordFieldError, ValueError)

    def test_buffers_and_int_flags_are_normalised(self) -> None:
        buffer = bytearray(b"ab")
        record = Record("k", buffer, -5, 3, memoryview(b"t"))  # type: ignore[arg-type]
        buffer[0] = ord("z")
        assert record == Record("k", b"ab", -5, Flag.DEFAULT | Flag.COMMIT, b"t")
        assert type(record.data) is bytes and type(record.flags) is Flag

    def test_a_record_equals_records_only_and_hashes_by_value(self) -> None:
        record = Record("k", b"x", 5)
        assert record != tuple(record)
        assert tuple(record) != record
        assert hash(record) == hash(Record("k", b"x", 5))
        assert len({record, Record("k", b"x", 5)}) == 1

    def test_repr_and_pickle_round_trip(self) -> None:
        import pickle

        record = Record("k", b"x", 5, Flag.COMMIT, b"t")
        assert repr(record) == (
            "Record(key='k', data=b'x', watermark=5, flags=<Flag.COMMIT: 2>, trace_context=b't')"
        )
        assert pickle.loads(pickle.dumps(record)) == record
