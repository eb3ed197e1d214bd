"""`make jars` delivers a working JVM side: Delta and Spark's Kafka source load into a real local
Spark session from the cache (no Ivy, no --packages), and the Kafka broker jars are complete."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
JARS = ROOT / ".cache" / "jars"


def _jars(set_name: str) -> list[str]:
    found = sorted(glob.glob(str(JARS / set_name / "*.jar")))
    if not found:
        pytest.fail(f"no jars in {JARS / set_name}: run `make jars` (make test does it first)")
    return found


class TestJarCache:
    def test_spark_set_has_delta_and_kafka_source_but_no_spark_duplicates(self) -> None:
        names = [Path(j).name for j in _jars("spark-jars")]
        assert any(n.startswith("delta-spark_4.2_2.13-") for n in names)
        assert any(n.startswith("delta-storage-") for n in names)
        assert any(n.startswith("spark-sql-kafka-0-10_2.13-4.2.0") for n in names)
        assert any(n.startswith("kafka-clients-") for n in names)
        # Spark's own Jackson/Scala must win: a second copy on the classpath breaks at run time.
        assert not any(n.startswith(("jackson-databind-", "scala-library-")) for n in names)

    def test_kafka_broker_set_is_complete(self) -> None:
        names = [Path(j).name for j in _jars("kafka-broker")]
        for prefix in ("kafka_2.13-4.", "kafka-server-4.", "kafka-raft-4.", "log4j-slf4j2-impl-"):
            assert any(n.startswith(prefix) for n in names), f"missing {prefix}* in kafka-broker"

    def test_fetch_is_idempotent_and_quick(self) -> None:
        result = subprocess.run(
            [str(ROOT / "scripts" / "fetch-jars.sh")], capture_output=True, text=True, timeout=60
        )
        assert result.returncode == 0, result.stderr
        assert result.stdout.count("up to date") == 2, result.stdout


_SPARK_SCRIPT = """
import sys
from pyspark.sql import SparkSession
jars, path = sys.argv[1], sys.argv[2]
spark = (SparkSession.builder.master("local[1]").appName("jar-smoke")
    .config("spark.jars", jars)
    .config("spark.ui.enabled", "false")
    .config("spark.sql.shuffle.partitions", "1")
    .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
    .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
    .getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
spark.range(5).write.format("delta").save(path)
from delta.tables import DeltaTable
count = DeltaTable.forPath(spark, path).toDF().count()
# spark.jars land in Spark's own classloader, which is the thread's context loader.
loader = spark.sparkContext._jvm.java.lang.Thread.currentThread().getContextClassLoader()
loader.loadClass("org.apache.spark.sql.kafka010.KafkaSourceProvider")
loader.loadClass("org.apache.spark.kafka010.KafkaConfigUpdater")
print("RESULT", count)
"""


@pytest.mark.spark
def test_local_spark_session_writes_delta_and_loads_kafka_source(tmp_path: Path) -> None:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    result = subprocess.run(
        [sys.executable, "-c", _SPARK_SCRIPT, ",".join(_jars("spark-jars")), str(tmp_path / "t")],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "RESULT 5" in result.stdout
    assert (tmp_path / "t" / "_delta_log" / "00000000000000000000.json").is_file()
