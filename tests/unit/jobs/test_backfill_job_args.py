"""jobs/backfill.py without Spark: what `check_args` (and so the DAG's validate task, through
`argument_errors`) accepts and refuses, the topology and table targets included: a topology only
from the modules `[backfill] topologies` allows, refused before its module is imported."""

from __future__ import annotations

from pathlib import Path

import pytest
import replay_topologies

from jobs import backfill
from jobs.spark.job import argument_errors
from streamcore.computation import Topology

WINDOW = ["--start", "2026-11-20", "--end", "2026-11-21"]


def copy_topology() -> Topology:
    """Reads replay/docs (the factory `--topology` names below)."""
    return replay_topologies.copy_topology("replay/docs", "replay/copied")


TOPOLOGY = f"{__name__}:copy_topology"
REPLAY = ["--stream", "import/docs", *WINDOW, "--target", "replay/docs"]


@pytest.fixture(autouse=True)
def _allowed_topologies(monkeypatch: pytest.MonkeyPatch) -> None:
    """This module's topologies, and the modules the refusals below name, may be loaded."""
    allowed = [__name__, "no_such_module_x"]
    monkeypatch.setenv("STREAMCORE_BACKFILL_TOPOLOGIES", ",".join(allowed))


@pytest.mark.parametrize(
    "argv",
    [
        REPLAY,
        [*REPLAY, "--dry-run"],
        [*REPLAY, "--target-kind", "stream"],
        [*REPLAY, "--target-kind", "topology", "--topology", TOPOLOGY],
        [*REPLAY, "--target-kind", "topology", "--topology", TOPOLOGY, "--drain-timeout", "5"],
        ["--stream", "import/docs", *WINDOW, "--target", "repository", "--target-kind", "table"],
        [
            *("--stream", "import/docs", *WINDOW, "--target", "repository"),
            *("--target-kind", "table", "--failure-threshold", "0", "--dry-run"),
        ],
    ],
)
def test_good_arguments_pass(argv: list[str]) -> None:
    assert argument_errors(backfill, argv) is None


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--stream", "import/docs", *WINDOW, "--target", "import/docs"], "replay into another"),
        (["--stream", "import/docs", *WINDOW, "--target", "bad name!"], "--stream/--target"),
        (
            ["--stream", "a/b", "--start", "2026-11-21", "--end", "2026-11-20", "--target", "c/d"],
            "must be after --start",
        ),
        (["--stream", "a/b", *WINDOW], "--target"),
        (["--stream", "a/b", "--start", "soon", "--end", "2026-11-20", "--target", "c/d"], "ISO"),
        ([*REPLAY, "--target-kind", "lake"], "invalid choice: 'lake'"),
        # topology
        ([*REPLAY, "--target-kind", "topology"], "needs --topology MODULE:FACTORY"),
        ([*REPLAY, "--topology", TOPOLOGY], "--topology is for --target-kind topology"),
        ([*REPLAY, "--target-kind", "topology", "--topology", "nocolon"], "module:function"),
        (
            [*REPLAY, "--target-kind", "topology", "--topology", "no_such_module_x:f"],
            "cannot import 'no_such_module_x'",
        ),
        (
            [*REPLAY, "--target-kind", "topology", "--topology", f"{__name__}:missing"],
            "has no function 'missing'",
        ),
        (
            [
                *("--stream", "import/docs", *WINDOW, "--target", "replay/other"),
                *("--target-kind", "topology", "--topology", TOPOLOGY),
            ],
            "does not read --target replay/other: its input streams are replay/docs",
        ),
        (
            [*REPLAY, "--target-kind", "topology", "--topology", TOPOLOGY, "--drain-timeout", "0"],
            "--drain-timeout must be > 0",
        ),
        # table
        (
            ["--stream", "import/docs", *WINDOW, "--target", "audit", "--target-kind", "table"],
            "--target audit: no writer lands replayed records into that table",
        ),
        (
            [*REPLAY, "--target-kind", "table"],
            "--target replay/docs: no writer",
        ),
        (
            [
                *("--stream", "import/docs", *WINDOW, "--target", "repository"),
                *("--target-kind", "table", "--failure-threshold", "1.5"),
            ],
            "--failure-threshold must be within 0..1",
        ),
        (
            [
                *("--stream", "import/docs", *WINDOW, "--target", "repository"),
                *("--target-kind", "table", "--topology", TOPOLOGY),
            ],
            "--topology is for --target-kind topology",
        ),
    ],
)
def test_bad_arguments_are_refused_with_the_fix(argv: list[str], message: str) -> None:
    error = argument_errors(backfill, argv)
    assert error is not None and message in error, error


def test_a_topology_outside_the_configured_modules_is_refused_before_its_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Param lets whoever triggers the DAG name any module:attribute: only modules under
    `[backfill] topologies` (STREAMCORE_BACKFILL_TOPOLOGIES) are imported and called."""
    (tmp_path / "side_effects.py").write_text(
        "from pathlib import Path\n"
        "Path(__file__).with_suffix('.imported').touch()\n"
        "def build():\n    return None\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    imported = tmp_path / "side_effects.imported"
    topology = [*REPLAY, "--target-kind", "topology", "--topology"]
    for allowed in ("", "side", "tests.unit, side_effects_other"):
        monkeypatch.setenv("STREAMCORE_BACKFILL_TOPOLOGIES", allowed)
        for spec in ("side_effects:build", "os:getcwd", "shutil:rmtree"):
            error = argument_errors(backfill, [*topology, spec])
            assert error is not None and f"--topology {spec}" in error, error
            assert "[backfill] topologies" in error and "STREAMCORE_BACKFILL_TOPOLOGIES" in error
    assert not imported.exists()
    monkeypatch.setenv("STREAMCORE_BACKFILL_TOPOLOGIES", "side_effects")
    error = argument_errors(backfill, [*topology, "side_effects:build"])
    assert error is not None and "it must return a Topology" in error, error  # loaded, then checked
    assert imported.exists()


def test_a_bad_topologies_setting_is_refused_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMCORE_BACKFILL_TOPOLOGIES", "myapp/flows")
    error = argument_errors(
        backfill, [*REPLAY, "--target-kind", "topology", "--topology", TOPOLOGY]
    )
    assert error is not None and "backfill.topologies has 'myapp/flows'" in error, error
