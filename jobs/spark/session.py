"""`build_session()`: the SparkSession of every job, with Delta, the cached jars and the venv's
Python for workers.

Under spark-submit the session already exists (master, jars and confs came on the command line)
and is reused as is; run as `python jobs/<job>.py` it is created here from `jobs.spark.submit`.
"""

from __future__ import annotations

import logging
import os

from pyspark.sql import SparkSession

from jobs.spark.submit import DEFAULT_MASTER, delta_confs, jars, python_executable

__all__ = ["build_session"]

logger = logging.getLogger(__name__)


def build_session(
    app_name: str,
    master: str | None = None,
    *,
    conf: dict[str, str] | None = None,
    log_level: str = "WARN",
) -> SparkSession:
    """The job's session. `master`: argument, else `STREAMCORE_SPARK_MASTER`, else `local[*]`
    (ignored when spark-submit already started a session). `conf` adds or overrides Spark confs."""
    active = SparkSession.getActiveSession()
    if active is not None:
        active.sparkContext.setLogLevel(log_level)
        return active
    python = python_executable()
    # Workers are forked by the driver: they inherit these, so set them before the JVM starts.
    os.environ.setdefault("PYSPARK_PYTHON", python)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", python)
    builder = (
        SparkSession.builder.appName(app_name)
        .master(master or os.environ.get("STREAMCORE_SPARK_MASTER", DEFAULT_MASTER))
        .config("spark.jars", ",".join(jars()))
        .config("spark.ui.port", os.environ.get("STREAMCORE_SPARK_UI_PORT", "4050"))
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", os.environ.get("STREAMCORE_SPARK_DRIVER_MEMORY", "4g"))
    )
    for key, value in {**delta_confs(), **(conf or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    logger.info("Spark %s session %r on %s", spark.version, app_name, spark.sparkContext.master)
    return spark
