#!/usr/bin/env bash
# A Spark Connect server on 127.0.0.1 from the pyspark package alone (its jar ships in pyspark):
# one detached JVM, `spark-submit --class org.apache.spark.sql.connect.service.SparkConnectServer`,
# with the jars and confs of `jobs.spark.submit.submit_config()` (Delta, Kafka, Avro). Jobs then
# run as thin clients of it (STREAMCORE_SPARK_REMOTE, or an Airflow `spark_default` connection with
# host sc://127.0.0.1:PORT): no JVM start per task. See docs/spark-connect.md.
#
#   scripts/spark-connect.sh start    start the server (no-op if it runs); wait until it answers
#   scripts/spark-connect.sh stop     stop the server it started (TERM, then KILL after 20 s)
#   scripts/spark-connect.sh status   running (pid, URL) or stopped; exit code 0 = runs, 3 = stopped
#   scripts/spark-connect.sh url      the server's URL (sc://127.0.0.1:PORT)
#
# Environment: STREAMCORE_SPARK_CONNECT_PORT (default 15002), STREAMCORE_SPARK_MASTER (the
# server's master: default local[*]; `make cluster`'s spark://127.0.0.1:7077 works too),
# STREAMCORE_SPARK_CONNECT_HOME (state and log: default .cache/spark-connect),
# STREAMCORE_SPARK_DRIVER_MEMORY (the server's JVM heap: default 4g), STREAMCORE_SPARK_START_TIMEOUT
# (seconds, default 60), STREAMCORE_SPARK_LOG_LEVEL (the server's log level, which jobs cannot set
# over Connect: default WARN, as jobs set it under spark-submit). STREAMCORE_HOME, as set when it
# starts, is the server's (its Python workers read the logs and schemas of that home): start it
# with the home the jobs use.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"

port="${STREAMCORE_SPARK_CONNECT_PORT:-15002}"
master="${STREAMCORE_SPARK_MASTER:-local[*]}"
home="${STREAMCORE_SPARK_CONNECT_HOME:-$root/.cache/spark-connect}"
memory="${STREAMCORE_SPARK_DRIVER_MEMORY:-4g}"
start_timeout="${STREAMCORE_SPARK_START_TIMEOUT:-60}"
log_level="${STREAMCORE_SPARK_LOG_LEVEL:-WARN}"
venv_bin="$root/.venv/bin"
url="sc://127.0.0.1:$port"
server_class=org.apache.spark.sql.connect.service.SparkConnectServer

say() { echo "spark-connect: $*"; }
fail() { echo "spark-connect: $*" >&2; exit 1; }
# shellcheck source=scripts/lib.sh
source "$root/scripts/lib.sh"

running_pid() { pid_from "$home/server.pid" "$server_class"; }

start() {
  local pid
  [[ -x "$venv_bin/spark-submit" ]] || fail "no spark-submit in $venv_bin; run \`make venv\` first"
  if pid="$(running_pid)"; then
    say "already running (pid $pid) on $url"
    return 0
  fi
  [[ "$master" == sc://* ]] && fail "STREAMCORE_SPARK_MASTER=$master is a Connect URL; the server needs a local[*] or spark:// master"
  port_busy "$port" && fail "port $port is used by another process; stop it or set STREAMCORE_SPARK_CONNECT_PORT"
  # The jars and confs every spark-submit of a job gets, one argument per line.
  local args
  args="$(PYTHONPATH="$root" "$venv_bin/python" - <<'PY'
from jobs.spark.submit import submit_config

config = submit_config()
print("--jars")
print(config["jars"])
for key, value in config["conf"].items():
    print("--conf")
    print(f"{key}={value}")
PY
)" || fail "cannot read the jobs' Spark configuration (above); run \`make jars\`"
  local -a submit_args
  mapfile -t submit_args <<<"$args"
  mkdir -p "$home/logs"
  echo "=== start $(date -Is) ===" >>"$home/logs/server.log"
  say "starting on $url (master $master, log $home/logs/server.log)"
  # PYTHONPATH: the server's Python workers (data sources, UDFs) import streamcore and jobs.
  PYSPARK_PYTHON="$venv_bin/python" PYSPARK_DRIVER_PYTHON="$venv_bin/python" \
    PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" SPARK_LOCAL_IP=127.0.0.1 \
    detach "$home/server.pid" "$home/logs/server.log" \
    "$venv_bin/spark-submit" --master "$master" --driver-memory "$memory" "${submit_args[@]}" \
    --conf spark.connect.grpc.binding.address=127.0.0.1 \
    --conf "spark.connect.grpc.binding.port=$port" \
    --conf spark.ui.enabled=false \
    --conf "spark.log.level=$log_level" \
    --conf spark.ui.showConsoleProgress=false \
    --class "$server_class" spark-internal
  local deadline=$((SECONDS + start_timeout)) started=$SECONDS
  sleep 1
  while ((SECONDS < deadline)); do
    if ! running_pid >/dev/null; then
      tail -n 30 "$home/logs/server.log" >&2
      fail "the server exited during start-up (log above)"
    fi
    if port_busy "$port"; then
      say "ready: $url ($((SECONDS - started)) s)"
      return 0
    fi
    sleep 0.5
  done
  tail -n 30 "$home/logs/server.log" >&2
  fail "the server did not answer on $url within $start_timeout s (log above); it still runs: \`$0 stop\`"
}

stop() {
  local pid
  if pid="$(running_pid)"; then stop_pid "$pid" "the Spark Connect server"; fi
  rm -f "$home/server.pid"
  say "stopped"
}

status() {
  local pid
  if pid="$(running_pid)"; then
    say "running: pid $pid on $url (log $home/logs/server.log)"
    return 0
  fi
  say "stopped"
  return 3
}

case "${1:-}" in
  start)
    hold_lock "$home" 60 start
    start
    ;;
  stop) stop ;;
  status) status ;;
  url) echo "$url" ;;
  *)
    echo "usage: $0 start|stop|status|url" >&2
    exit 2
    ;;
esac
