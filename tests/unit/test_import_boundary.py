"""The core's boundary, kept by a machine: importing any `streamcore` module loads no pyspark,
airflow or great_expectations (docs/design.md), and only the Kafka backend and the schema
registry codec load confluent-kafka, so `pip install streamcore` without extras works
(docs/configuration.md#dependencies).

One fresh interpreter imports every module of the package, one by one. The test process itself
cannot say: pytest's plugins and other tests have loaded Spark and Airflow long before. A finder
placed first on `sys.meta_path` sees each forbidden top-level package being imported for the
first time and records the chain of modules whose top-level code asked for it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from streamcore.config import project_root

# Top-level packages of the extras that no streamcore module may load.
FORBIDDEN = ("pyspark", "airflow", "great_expectations")
# The Kafka client may be loaded by these modules only (the `[kafka]` extra).
KAFKA = "confluent_kafka"
KAFKA_MODULES = ("streamcore.log.kafka.",)

PROBE = textwrap.dedent(
    """
    import importlib, json, pkgutil, sys

    watched = set(sys.argv[1].split(","))
    loads = []  # [package, module being imported, chain of importers]

    class Watch:
        # The frames running a module's top-level code, outermost first, are the import chain.
        def find_spec(self, name, path=None, target=None):
            root = name.partition(".")[0]
            if root in watched and root not in sys.modules:
                chain, frame = [], sys._getframe(1)
                while frame is not None:
                    if frame.f_code.co_name == "<module>":
                        chain.append(frame.f_globals.get("__name__", "?"))
                    frame = frame.f_back
                loads.append([root, current, [m for m in reversed(chain) if m != "__main__"]])
            return None

    sys.meta_path.insert(0, Watch())
    import streamcore

    names = sorted(
        m.name for m in pkgutil.walk_packages(streamcore.__path__, "streamcore.")
    )
    # The Kafka backend last: a module importing confluent-kafka after it would go unseen.
    names.sort(key=lambda n: n.startswith("streamcore.log.kafka."))
    current = "streamcore"
    errors = []
    for current in names:
        try:
            importlib.import_module(current)
        except Exception as exc:
            errors.append([current, repr(exc)])
    print(json.dumps({"modules": names, "loads": loads, "errors": errors}))
    """
)


def probe() -> dict:
    """Import every streamcore module in a fresh interpreter; what it loaded and from where."""
    watched = ",".join((*FORBIDDEN, KAFKA))
    result = subprocess.run(
        [sys.executable, "-c", PROBE, watched],
        cwd=project_root(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def describe(load: list) -> str:
    package, module, chain = load
    return f"{module} loads {package} through {' -> '.join(chain) or module}"


def test_no_streamcore_module_loads_spark_airflow_or_gx() -> None:
    seen = probe()
    assert len(seen["modules"]) > 100  # the walk found the package
    assert seen["errors"] == []
    loads = [describe(load) for load in seen["loads"] if load[0] in FORBIDDEN]
    assert loads == []
    kafka = [
        describe(load)
        for load in seen["loads"]
        if load[0] == KAFKA and not load[1].startswith(KAFKA_MODULES)
    ]
    assert kafka == []


def test_the_probe_names_the_module_and_the_chain(tmp_path: Path) -> None:
    """The probe's report, on a module that does load a watched package."""
    package = tmp_path / "streamcore"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("import streamcore.b\n")
    (package / "b.py").write_text("import heavy.sub\n")
    (tmp_path / "heavy").mkdir()
    (tmp_path / "heavy" / "__init__.py").write_text("")
    (tmp_path / "heavy" / "sub.py").write_text("")
    result = subprocess.run(
        [sys.executable, "-c", PROBE, "heavy"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PYTHONPATH": str(tmp_path), "PYTHONSAFEPATH": "1"},
    )
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.splitlines()[-1])
    assert seen["modules"] == ["streamcore.a", "streamcore.b"]
    assert [describe(load) for load in seen["loads"]] == [
        "streamcore.a loads heavy through streamcore.a -> streamcore.b"
    ]
