#!/usr/bin/env bash
# A Spark standalone cluster on 127.0.0.1 from the pyspark package alone (its `spark-class`; the
# wheel has no sbin/): one master and one worker, each a detached JVM. State and logs live in
# .cache/spark-cluster/ (git-ignored).
#
#   scripts/spark-cluster.sh start    start the master, then the worker (no-op for what runs);
#                                     wait until the master lists the worker as ALIVE
#   scripts/spark-cluster.sh stop     stop the worker, then the master (TERM, then KILL after 20 s)
#   scripts/spark-cluster.sh status   running (pids, master URL, workers) or stopped; exit code
#                                     0 = both run, 3 = stopped
#   scripts/spark-cluster.sh url      the master URL (spark://127.0.0.1:PORT)
#   scripts/spark-cluster.sh run master|worker [--print]
#                                     exec that one JVM in the foreground, logging to stdout (a
#                                     container's command); --print: write its spark-defaults.conf
#                                     (with STREAMCORE_SPARK_AUTH_SECRET) and print its command
#                                     line only
#
# Environment: STREAMCORE_SPARK_MASTER_PORT (default 7077), STREAMCORE_SPARK_MASTER_UI_PORT (8089),
# STREAMCORE_SPARK_WORKER_UI_PORT (8090), STREAMCORE_SPARK_WORKER_CORES (default: all cores),
# STREAMCORE_SPARK_WORKER_MEMORY (4g), STREAMCORE_SPARK_CLUSTER_HOME (.cache/spark-cluster),
# STREAMCORE_SPARK_START_TIMEOUT (seconds, default 60), STREAMCORE_SPARK_HOST (the address this
# node's master, worker and executors bind and advertise: default 127.0.0.1; the service name in a
# container), STREAMCORE_SPARK_MASTER_HOST (the master's host name: default STREAMCORE_SPARK_HOST),
# STREAMCORE_SPARK_AUTH_SECRET (docker-compose.yml: RPC authentication with this secret, written
# to STREAMCORE_SPARK_CLUSTER_HOME/conf/spark-defaults.conf; unset in cluster mode, which binds
# loopback only: docs/deployment.md).
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"

port="${STREAMCORE_SPARK_MASTER_PORT:-7077}"
ui_port="${STREAMCORE_SPARK_MASTER_UI_PORT:-8089}"
worker_ui_port="${STREAMCORE_SPARK_WORKER_UI_PORT:-8090}"
cores="${STREAMCORE_SPARK_WORKER_CORES:-$(nproc)}"
memory="${STREAMCORE_SPARK_WORKER_MEMORY:-4g}"
home="${STREAMCORE_SPARK_CLUSTER_HOME:-$root/.cache/spark-cluster}"
start_timeout="${STREAMCORE_SPARK_START_TIMEOUT:-60}"
venv_bin="$root/.venv/bin"
host="${STREAMCORE_SPARK_HOST:-127.0.0.1}"
master_url="spark://${STREAMCORE_SPARK_MASTER_HOST:-$host}:$port"

say() { echo "spark-cluster: $*"; }
fail() { echo "spark-cluster: $*" >&2; exit 1; }
# shellcheck source=scripts/lib.sh
source "$root/scripts/lib.sh"

[[ -x "$venv_bin/spark-class" ]] || fail "no spark-class in $venv_bin; run \`make venv\` first"
# spark-class finds the jars from SPARK_HOME: the pyspark package folder.
SPARK_HOME="$("$venv_bin/python" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')"
export SPARK_HOME
# Executors run Python workers with PYSPARK_PYTHON: the venv's, which has streamcore's packages.
export PYSPARK_PYTHON="$venv_bin/python"
export SPARK_LOCAL_IP="$host"

# The pid of `role` (master or worker) if it runs: its pid file names a live JVM of that class.
running_pid() { pid_from "$home/$1.pid" "org.apache.spark.deploy.$1.${1^}"; }

# The master's view as JSON (its web UI serves /json): workers and their states.
master_json() {
  "$venv_bin/python" - "$ui_port" <<'EOF'
import json, sys, urllib.request
try:
    with urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/json/", timeout=3) as response:
        print(json.dumps(json.load(response)))
except Exception:
    sys.exit(1)
EOF
}

alive_workers() {
  local view
  view="$(master_json)" || { echo 0; return; }
  "$venv_bin/python" -c '
import json, sys
print(sum(1 for w in json.loads(sys.argv[1]).get("workers", []) if w.get("state") == "ALIVE"))' "$view"
}

# What spark-class runs for each role, in the background (start) or the foreground (run).
master_args=(org.apache.spark.deploy.master.Master --host "$host" --port "$port"
  --webui-port "$ui_port")
worker_args=(org.apache.spark.deploy.worker.Worker --host "$host" --cores "$cores"
  --memory "$memory" --webui-port "$worker_ui_port" --work-dir "$home/work" "$master_url")

launch() {
  local role="$1"
  shift
  mkdir -p "$home/logs" "$home/work"
  echo "=== start $(date -Is) ===" >>"$home/logs/$role.log"
  detach "$home/$role.pid" "$home/logs/$role.log" "$venv_bin/spark-class" "$@"
}

start() {
  spark_auth_conf "$home/conf"
  if ! running_pid master >/dev/null; then
    port_busy "$port" && fail "port $port is used by another process; stop it or set STREAMCORE_SPARK_MASTER_PORT"
    port_busy "$ui_port" && fail "port $ui_port is used by another process; stop it or set STREAMCORE_SPARK_MASTER_UI_PORT"
    say "starting the master on $master_url (UI http://127.0.0.1:$ui_port, log $home/logs/master.log)"
    launch master "${master_args[@]}"
  fi
  if ! running_pid worker >/dev/null; then
    port_busy "$worker_ui_port" && fail "port $worker_ui_port is used by another process; stop it or set STREAMCORE_SPARK_WORKER_UI_PORT"
    say "starting a worker ($cores cores, $memory; log $home/logs/worker.log)"
    launch worker "${worker_args[@]}"
  fi
  local deadline=$((SECONDS + start_timeout))
  while ((SECONDS < deadline)); do
    for role in master worker; do
      if ! running_pid "$role" >/dev/null; then
        sleep 1
        running_pid "$role" >/dev/null || {
          tail -n 30 "$home/logs/$role.log" >&2
          fail "the $role exited during start-up (log above)"
        }
      fi
    done
    if (($(alive_workers) >= 1)); then
      say "ready: $master_url with $(alive_workers) worker(s) ($((SECONDS - deadline + start_timeout)) s)"
      return 0
    fi
    sleep 1
  done
  tail -n 30 "$home/logs/worker.log" >&2
  fail "no ALIVE worker on $master_url within $start_timeout s (worker log above)"
}

stop_role() {
  local role="$1" pid
  if pid="$(running_pid "$role")"; then stop_pid "$pid" "the $role"; fi
  rm -f "$home/$role.pid"
}

stop() {
  stop_role worker
  stop_role master
  say "stopped"
}

# One role in the foreground, as a container's command: the engine restarts it and collects its
# stdout, so there is no pid file and no wait for the worker.
run() {
  local role="$1" option="$2" command
  case "$role" in
    master) command=("$venv_bin/spark-class" "${master_args[@]}") ;;
    worker) command=("$venv_bin/spark-class" "${worker_args[@]}") ;;
    *) fail "run: which role? \`$0 run master\` or \`$0 run worker\` (got '$role')" ;;
  esac
  spark_auth_conf "$home/conf"
  if [[ "$option" == --print ]]; then
    printf '%q ' "${command[@]}"
    echo
    return 0
  fi
  [[ -z "$option" ]] || fail "run: unknown option '$option' (only --print)"
  mkdir -p "$home/work"
  say "running the $role in the foreground on $host ($master_url)"
  exec "${command[@]}"
}

status() {
  local master worker
  master="$(running_pid master || true)"
  worker="$(running_pid worker || true)"
  if [[ -n "$master" && -n "$worker" ]]; then
    say "running: master pid $master on $master_url, worker pid $worker; $(alive_workers) ALIVE worker(s)"
    return 0
  fi
  say "stopped (master: ${master:-not running}, worker: ${worker:-not running})"
  return 3
}

case "${1:-}" in
  start)
    hold_lock "$home" 60 start
    start
    ;;
  stop) stop ;;
  status) status ;;
  url) echo "$master_url" ;;
  run) run "${2:-}" "${3:-}" ;;
  *)
    echo "usage: $0 start|stop|status|url|run master|worker [--print]" >&2
    exit 2
    ;;
esac
