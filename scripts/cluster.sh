#!/usr/bin/env bash
# The whole stack in cluster mode on loopback, from what the project installs: PostgreSQL (the
# outbox and Airflow's metadata database), the Kafka broker (the streams), a Spark standalone
# master and worker (the jobs), and Airflow (api-server, scheduler, dag-processor, triggerer)
# on PostgreSQL with the LocalExecutor. The settings are those of include/cluster.env, the same
# variables docker-compose.yml's services get.
#
#   scripts/cluster.sh start    start what is not running; remember what this script started
#   scripts/cluster.sh stop     stop only what `start` started (a broker or a database that ran
#                               before is left running)
#   scripts/cluster.sh status   each service: running or stopped; exit code 0 = all run
#   scripts/cluster.sh env      print `export` lines of the cluster profile:
#                               eval "$(scripts/cluster.sh env)"
#
# Environment: what include/cluster.env names (a variable already set wins), the ports and homes
# of the scripts it calls (STREAMCORE_KAFKA_PORT, STREAMCORE_POSTGRES_PORT,
# STREAMCORE_SPARK_MASTER_PORT, STREAMCORE_AIRFLOW_PORT, ...), and STREAMCORE_CLUSTER_STATE (where
# it remembers what it started; default .cache/cluster).
#
# `STREAMCORE_PROFILE=cluster make demo` runs the demo there.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
state="${STREAMCORE_CLUSTER_STATE:-$root/.cache/cluster}"
started="$state/started"

say() { echo "cluster: $*"; }
fail() { echo "cluster: $*" >&2; exit 1; }
# shellcheck source=scripts/lib.sh
source "$root/scripts/lib.sh"

# The profile: include/cluster.env, each line NAME=VALUE, values relative to the project root
# where they are paths; what the environment already sets wins.
load_profile() {
  local line name value
  while IFS= read -r line || [[ -n "$line" ]]; do
    [[ "$line" =~ ^[[:space:]]*(#|$) ]] && continue
    name="${line%%=*}"
    value="${line#*=}"
    [[ -n "${!name:-}" ]] && continue
    [[ "$value" == ./* ]] && value="$root/${value#./}"
    export "$name=$value"
  done <"$root/include/cluster.env"
}

running() {
  case "$1" in
    postgres) scripts/postgres.sh status >/dev/null 2>&1 ;;
    kafka) scripts/kafka.sh status >/dev/null 2>&1 ;;
    spark) scripts/spark-cluster.sh status >/dev/null 2>&1 ;;
    airflow) scripts/airflow.sh status >/dev/null 2>&1 ;;
  esac
}

remember() { grep -qx "$1" "$started" 2>/dev/null || echo "$1" >>"$started"; }

start() {
  mkdir -p "$state"
  for service in postgres kafka spark airflow; do
    if running "$service"; then
      say "$service: already running"
      continue
    fi
    case "$service" in
      postgres) scripts/postgres.sh start ;;
      kafka) scripts/kafka.sh start >/dev/null ;;
      spark) scripts/spark-cluster.sh start ;;
      airflow) scripts/airflow.sh start ;;
    esac
    remember "$service"
  done
  say "up: Spark $STREAMCORE_SPARK_MASTER, Kafka $STREAMCORE_KAFKA_BOOTSTRAP_SERVERS, outbox and Airflow metadata on PostgreSQL"
  say "run the demo there with: STREAMCORE_PROFILE=cluster make demo"
}

stop() {
  local service
  if [[ ! -f "$started" ]]; then
    say "nothing started by this script"
    return 0
  fi
  # The reverse of the start order: Airflow's tasks first, the database last.
  for service in airflow spark kafka postgres; do
    grep -qx "$service" "$started" || continue
    case "$service" in
      postgres) scripts/postgres.sh stop ;;
      kafka) scripts/kafka.sh stop ;;
      spark) scripts/spark-cluster.sh stop ;;
      airflow) scripts/airflow.sh stop ;;
    esac
  done
  rm -f "$started"
}

status() {
  local service all=0
  for service in postgres kafka spark airflow; do
    if running "$service"; then say "$service: running"; else say "$service: stopped"; all=3; fi
  done
  return "$all"
}

env_exports() {
  local name
  for name in $(grep -Eo '^[A-Z_]+' "$root/include/cluster.env"); do
    printf "export %s='%s'\n" "$name" "${!name}"
  done
}

load_profile
case "${1:-}" in
  start)
    hold_lock "$state" 300 "start or stop"
    start
    ;;
  stop)
    hold_lock "$state" 300 "start or stop"
    stop
    ;;
  status) status ;;
  env) env_exports ;;
  *)
    echo "usage: $0 start|stop|status|env" >&2
    exit 2
    ;;
esac
