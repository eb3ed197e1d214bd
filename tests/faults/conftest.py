"""The fault suite: each test injects one fault (a short write, a full disk, a crash, a frozen or
stalled process, a rewound group, ...) and checks one documented promise. README.md here has
the table fault -> component -> promise -> result. Every test in this folder is marked `faults`, so
`pytest -m faults` runs the suite alone; `make test` runs it with everything else."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.faults)
