"""`build_session()`: the SparkSession of every job, with Delta, the cached jars and the venv's
Python for workers.

Under spark-submit the session already exists (master, jars and confs came on the command line)
and is reused as is; run as `python jobs/<job>.py` it is created here from `jobs.spark.submit`.
With a Spark Connect URL (`sc://host:port`, as the master or in `STREAMCORE_SPARK_REMOTE`) the
job is a thin client of that server (`scripts/spark-connect.sh`, docs/spark-connect.md): the
jars, confs and workers' Python are the server's, set when it started.
"""

from __future__ import annotations

import logging
import os

from pyspark.sql import SparkSession

from jobs.spark.submit import DEFAULT_MASTER, delta_confs, jars, python_executable

__all__ = ["REMOTE_ENV", "build_session", "remote_url"]

logger = logging.getLogger(__name__)

REMOTE_ENV = "STREAMCORE_SPARK_REMOTE"


def remote_url(master: str | None = None) -> str | None:
    """The Spark Connect URL a job runs against: `master` if it is an `sc://` URL, else
    `STREAMCORE_SPARK_REMOTE`, else `STREAMCORE_SPARK_MASTER` if it is one; None for a classic
    session."""
    for candidate in (
        master,
        os.environ.get(REMOTE_ENV),
        os.environ.get("STREAMCORE_SPARK_MASTER"),
    ):
        if candidate and candidate.startswith("sc://"):
            return candidate
    return None


def build_session(
    app_name: str,
    master: str | None = None,
    *,
    conf: dict[str, str] | None = None,
    log_level: str = "WARN",
) -> SparkSession:
    """The job's session. `master`: argument, else `STREAMCORE_SPARK_MASTER`, else `local[*]`
    (ignored when spark-submit already started a session); an `sc://` URL there or in
    `STREAMCORE_SPARK_REMOTE` connects to that Spark Connect server instead. `conf` adds or
    overrides Spark confs (session confs only, over Connect)."""
    remote = remote_url(master)
    if remote is not None:
        return _remote_session(remote, conf or {})
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


def _remote_session(url: str, conf: dict[str, str]) -> SparkSession:
    """A Spark Connect session on `url`, shared by the jobs of this process. The server's JVM is
    shared too: its application name and log level are the server's (a client has no
    SparkContext to set them on), and `conf` applies to this session."""
    from pyspark.errors import PySparkException

    from streamcore.errors import ConfigError

    try:
        builder = SparkSession.builder.remote(url)
        for key, value in conf.items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
        version = spark.version  # the first call that reaches the server
    except (PySparkException, OSError) as exc:
        raise ConfigError(
            f"no Spark Connect server answers at {url} ({str(exc).splitlines()[0]}); start it "
            "with `make spark-connect`, or unset STREAMCORE_SPARK_REMOTE to use spark-submit"
        ) from exc
    logger.info("Spark %s Connect session on %s", version, url)
    return spark
