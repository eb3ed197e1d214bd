# The one image of docker-compose.yml's project services (Kafka, the Spark master and worker,
# Airflow): Python 3.11 and a Java 17 runtime for Kafka, Spark and spark-submit, as on the
# development machine. The project is not copied in: compose mounts the checkout at
# /opt/streamcore and its `setup` service runs `make venv jars` there, into named volumes.
# Not built in CI (no container engine there); docs/deployment.md says what was checked.
FROM python:3.11-slim-bookworm

# make: `make venv jars`; procps: `ps`, which Spark's launch scripts use.
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless make procps \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/streamcore
