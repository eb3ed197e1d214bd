"""A headless context of Debian's chromium (the `chromium` fixture's binary) for the browser
tests: a fresh profile, the flags a root user in CI needs, no background traffic."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from playwright.sync_api import BrowserContext, sync_playwright

CHROMIUM_ARGS = [
    "--no-sandbox",  # root in CI
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@contextmanager
def headless(binary: Path, height: int) -> Iterator[BrowserContext]:
    """A context 1400 px wide and `height` px tall, closed on exit."""
    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            tempfile.mkdtemp(prefix="streamcore-chromium-"),
            executable_path=str(binary),
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1400, "height": height},
        )
        try:
            yield context
        finally:
            context.close()
