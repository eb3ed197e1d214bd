"""The suite's CI rule: with CI=true a skipped test fails the run (a missing broker or server must
break the build); without it a skip stays a skip."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

CONFTEST = (Path(__file__).resolve().parents[1] / "conftest.py").read_text()
SKIPPING = """
import pytest

def test_needs_a_broker():
    pytest.skip("no broker running")

def test_passes():
    assert True
"""


@pytest.mark.parametrize(("ci", "failed", "skipped"), [("true", 1, 0), ("", 0, 1)])
def test_skips_fail_only_in_ci(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, ci: str, failed: int, skipped: int
) -> None:
    monkeypatch.setenv("CI", ci)
    # The plugins (broker, servers, Spark) are not needed to check the skip rule; drop the
    # assignment whether it spans one line or a parenthesised tuple.
    conftest = re.sub(r"(?ms)^pytest_plugins = (\(.*?^\)|[^\n]*)\n", "", CONFTEST)
    assert "pytest_plugins" not in conftest
    pytester.makeconftest(conftest)
    pytester.makepyfile(test_skipping=SKIPPING)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=failed, skipped=skipped)
    if failed:
        result.stdout.fnmatch_lines(
            ["*skipped in CI, which counts as a failure*no broker running*"]
        )
