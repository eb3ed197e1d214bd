# The two commands: `make demo` and `make test`. Every target builds what it needs first, so each
# one works as the first command on a fresh clone.
SHELL := /bin/bash
.DEFAULT_GOAL := help
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The environment is rebuilt when pyproject.toml changes: the stamp's name carries its hash.
STAMP := $(VENV)/.installed-$(shell sha256sum pyproject.toml | cut -c1-16)
JARS_STAMP := .cache/jars/.fetched-$(shell cat include/jvm/*.pom.xml | sha256sum | cut -c1-16)
export STREAMCORE_HOME ?= $(CURDIR)/data

.PHONY: help venv jars demo test test-unit bench lint format airflow airflow-stop airflow-status clean kafka kafka-stop kafka-status

help:
	@echo "make demo   - set everything up and run the importer DAG end to end (Airflow -> Spark -> Delta)"
	@echo "make test   - set everything up and run the whole test suite (CI=true: nothing may skip)"
	@echo "make bench  - run the benchmarks in bench/ and print their ratios"
	@echo "make lint   - ruff lint and format check"
	@echo "make jars   - fetch the JVM jars (Delta, Spark Kafka source, Kafka broker) from Maven Central"
	@echo "make kafka  - start the local single-node Kafka broker on 127.0.0.1:9092 (kafka-stop, kafka-status)"
	@echo "make postgres - start the local PostgreSQL server on 127.0.0.1:55432 for the outbox (postgres-stop, postgres-status)"
	@echo "make airflow - start Airflow (standalone) on 127.0.0.1:8080 with the DAGs of dags/ (airflow-stop, airflow-status)"
	@echo "make cluster - the whole stack in cluster mode: PostgreSQL, Kafka, Spark master + worker, Airflow (cluster-stop, cluster-status)"
	@echo "make spark-connect - start a Spark Connect server on 127.0.0.1:15002 for warm job runs (spark-connect-stop, spark-connect-status)"

$(STAMP): pyproject.toml
	PYTHON=$(PYTHON) scripts/bootstrap.sh $(STAMP)

venv: $(STAMP)

$(JARS_STAMP): $(STAMP) include/jvm/spark-jars.pom.xml include/jvm/kafka-broker.pom.xml
	scripts/fetch-jars.sh
	@rm -f .cache/jars/.fetched-* && touch $(JARS_STAMP)

jars: $(JARS_STAMP)

# The importer DAG end to end on the embedded local log (DEMO_COUNT documents, default 20000);
# the log-only demo of the core library is `.venv/bin/streamcore demo`. STREAMCORE_PROFILE=cluster:
# the same on the cluster of `make cluster` (started first when it is not running).
demo: $(STAMP) $(JARS_STAMP)
ifeq ($(STREAMCORE_PROFILE),cluster)
	@scripts/cluster.sh start
	@eval "$$(scripts/cluster.sh env)" && scripts/airflow.sh demo $(DEMO_COUNT)
else
	@scripts/airflow.sh demo $(DEMO_COUNT)
endif

test: $(STAMP) $(JARS_STAMP)
	@scripts/browser.sh  # chromium and the offline Data Docs assets of tests/browser
	@scripts/test.sh $(PYTEST_ARGS)

test-unit: $(STAMP)
	$(BIN)/pytest tests/unit -m "not kafka and not slow" $(PYTEST_ARGS)

bench: $(STAMP) $(JARS_STAMP)
	$(BIN)/python bench/log_bench.py $(BENCH_ARGS)
	$(BIN)/python bench/codec_bench.py
	$(BIN)/python bench/backend_bench.py
	$(BIN)/python bench/topology_bench.py
	$(BIN)/uv pip install --quiet --python $(BIN)/python --group bench
	$(BIN)/python bench/outbox_bench.py
	$(BIN)/python bench/audit_bench.py
	$(BIN)/python bench/retention_bench.py
	$(BIN)/python bench/compaction_bench.py
	$(BIN)/python bench/importer_bench.py
	$(BIN)/python bench/bulk_bench.py
	$(BIN)/python bench/recovery_bench.py --spark
	$(BIN)/python bench/dag_latency_bench.py
	$(BIN)/python bench/state_bench.py
	$(BIN)/python bench/window_bench.py
	$(BIN)/python bench/eos_bench.py
	$(BIN)/python bench/standby_bench.py
	$(BIN)/python bench/quix_peer_bench.py
	$(BIN)/python bench/landing_peer_bench.py

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# A single-node Kafka 4.x (KRaft) on 127.0.0.1 from the fetched jars; data under .cache/kafka/.
# Ports: STREAMCORE_KAFKA_PORT (9092), STREAMCORE_KAFKA_CONTROLLER_PORT (9093),
# STREAMCORE_KAFKA_SASL_PORT (9094, SASL/PLAIN).
kafka: $(STAMP) $(JARS_STAMP)
	@scripts/kafka.sh start

kafka-stop:
	@scripts/kafka.sh stop

kafka-status:
	@scripts/kafka.sh status || true

# PostgreSQL from Debian's packages (installed when missing) on 127.0.0.1, data in
# .cache/postgres/; STREAMCORE_POSTGRES_PORT (55432) overrides. `scripts/postgres.sh url`.
.PHONY: postgres postgres-stop postgres-status
postgres:
	@scripts/postgres.sh start

postgres-stop:
	@scripts/postgres.sh stop

postgres-status:
	@scripts/postgres.sh status || true

# Airflow standalone (api-server, scheduler, dag-processor, triggerer) on 127.0.0.1:8080 with
# AIRFLOW_HOME=.cache/airflow; STREAMCORE_AIRFLOW_PORT and STREAMCORE_SPARK_MASTER override.
airflow: $(STAMP) $(JARS_STAMP)
	@scripts/airflow.sh start

airflow-stop:
	@scripts/airflow.sh stop

airflow-status:
	@scripts/airflow.sh status || true

# The whole stack in cluster mode on loopback (scripts/cluster.sh, include/cluster.env): PostgreSQL,
# Kafka, a Spark standalone master and worker, Airflow on PostgreSQL with the LocalExecutor.
# cluster-stop stops only what `make cluster` started.
.PHONY: cluster cluster-stop cluster-status
cluster: $(STAMP) $(JARS_STAMP)
	@scripts/cluster.sh start

cluster-stop:
	@scripts/cluster.sh stop

cluster-status:
	@scripts/cluster.sh status || true

# A Spark Connect server on 127.0.0.1 (scripts/spark-connect.sh, docs/spark-connect.md): jobs run
# as its clients when `spark_default`'s host is sc://127.0.0.1:15002.
.PHONY: spark-connect spark-connect-stop spark-connect-status
spark-connect: $(STAMP) $(JARS_STAMP)
	@scripts/spark-connect.sh start

spark-connect-stop:
	@scripts/spark-connect.sh stop

spark-connect-status:
	@scripts/spark-connect.sh status || true

clean:
	rm -rf $(VENV) .cache data .pytest_cache .ruff_cache
