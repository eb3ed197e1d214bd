"""Positions as people write them (`streamcore.recovery.targets`), the one parser of the
`position` and `recovery` commands, jobs/recovery.py and the recovery DAG; and the package face,
which exports lazily so a DAG file takes `RESET_TO` without loading the repairs."""

from __future__ import annotations

import subprocess
import sys

import pytest

import streamcore.recovery as recovery
from streamcore.recovery import (
    RESET_TO,
    ResetTarget,
    SelectionError,
    parse_date_ms,
    parse_offset,
    parse_reset_target,
)


def test_offsets() -> None:
    assert parse_offset("0:42", None, "--offsets") == (0, 42)
    assert parse_offset(" 3 : +7 ", None, "--offsets") == (3, 7)
    assert parse_offset("7", 2, "--to-offset") == (2, 7)
    assert parse_offset("2:7", 2, "--to-offset") == (2, 7)
    with pytest.raises(SelectionError, match="--offsets 'x': expected PARTITION:OFFSET"):
        parse_offset("x", None, "--offsets")
    with pytest.raises(SelectionError, match="--to-offset 7: give PARTITION:OFFSET, or -p"):
        parse_offset("7", None, "--to-offset")
    with pytest.raises(SelectionError, match="names partition 1 but -p is 2"):
        parse_offset("1:7", 2, "--to-offset")


def test_dates() -> None:
    assert parse_date_ms("1970-01-01T00:00:01Z", "--since") == 1000
    assert parse_date_ms("1970-01-01T01:00:01+01:00", "--since") == 1000
    assert parse_date_ms("1970-01-02", "--since") == 86_400_000  # no zone: UTC
    with pytest.raises(SelectionError, match="--until 'soon': not an ISO 8601 date"):
        parse_date_ms("soon", "--until")


def test_reset_targets() -> None:
    assert RESET_TO == ("end", "start", "offset", "date", "watermark")
    assert parse_reset_target("end", option="x") == (ResetTarget(end=True), None)
    assert parse_reset_target("start", partition=1, option="x") == (ResetTarget(start=True), [1])
    assert parse_reset_target("offset", "1:5", option="x") == (ResetTarget(offset=5), [1])
    assert parse_reset_target("offset", "5", partition=2, option="x") == (
        ResetTarget(offset=5),
        [2],
    )
    assert parse_reset_target("date", "1970-01-01T00:00:02Z", option="x") == (
        ResetTarget(timestamp_ms=2000),
        None,
    )
    assert parse_reset_target("watermark", "-3", option="x")[0] == ResetTarget(watermark=-3)
    assert parse_reset_target("watermark", 9, option="x")[0] == ResetTarget(watermark=9)
    with pytest.raises(SelectionError, match="reset_to offset needs reset_value"):
        parse_reset_target("offset", None, option="reset_value")
    with pytest.raises(SelectionError, match="reset_value '1x': a watermark is an integer"):
        parse_reset_target("watermark", "1x", option="reset_value")
    with pytest.raises(SelectionError, match="choose one of end, start"):
        parse_reset_target("middle", option="x")


def test_the_face_exports_lazily() -> None:
    assert sorted(recovery._EXPORTS) == sorted(recovery.__all__)
    for name in recovery.__all__:
        assert getattr(recovery, name) is not None
    code = (
        "import sys; from streamcore.recovery import RESET_TO; "
        "print(sorted(m for m in ('sqlalchemy', 'streamcore.log', 'streamcore.recovery.service') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
