#!/usr/bin/env bash
# A local Airflow 3 for streamcore: LocalExecutor on PostgreSQL, the DAGs of dags/,
# SimpleAuthManager, and the connection `spark_default`. Files live in AIRFLOW_HOME (default
# .cache/airflow, git-ignored); the metadata database is a database of its own on the project's
# PostgreSQL server (scripts/postgres.sh, started when needed), named after AIRFLOW_HOME.
#
#   scripts/airflow.sh init     create AIRFLOW_HOME, write airflow.cfg, migrate the database,
#                               register `spark_default` (idempotent; start runs it)
#   scripts/airflow.sh start    init, then `airflow standalone` detached on 127.0.0.1:PORT; waits
#                               until the API answers and prints how to log in
#   scripts/airflow.sh stop     stop the whole process group of that standalone (TERM, then KILL)
#   scripts/airflow.sh status   running (pid, URL) or stopped; exit code 0 = running, 3 = stopped
#   scripts/airflow.sh token    print a REST API access token (POST /auth/token as admin)
#   scripts/airflow.sh demo [N] init, then one run of the importer DAG in-process (`airflow dags
#                               test`, N random documents, default 20000) and its summary
#   scripts/airflow.sh env      print `export` lines for running the airflow CLI against this home:
#                               eval "$(scripts/airflow.sh env)"; airflow dags list
#   scripts/airflow.sh run COMPONENT [--print]
#                               one component in the foreground, a container's command
#                               (docker-compose.yml): `run init` creates the metadata database
#                               if missing, then does what init does; `run api-server`,
#                               `scheduler`, `dag-processor`, `triggerer` exec that component on
#                               the airflow.cfg init wrote; --print writes airflow.cfg and prints
#                               the command instead of running it
#
# Environment: AIRFLOW_HOME (default .cache/airflow), STREAMCORE_AIRFLOW_PORT (8080),
# STREAMCORE_SPARK_MASTER (the master of `spark_default`: local[*], or spark://host:7077),
# STREAMCORE_AIRFLOW_PASSWORD (the admin password; default: generated once, kept in AIRFLOW_HOME),
# STREAMCORE_HOME (default data/ in the project), STREAMCORE_AIRFLOW_START_TIMEOUT (seconds, 180),
# STREAMCORE_AIRFLOW_DB_URL (the metadata database; default airflow_<hash of AIRFLOW_HOME> on the
# server of scripts/postgres.sh, STREAMCORE_POSTGRES_PORT), STREAMCORE_SPARK_AUTH_SECRET
# (docker-compose.yml: the spark-submits of tasks authenticate to the Spark master with it,
# through AIRFLOW_HOME/spark-conf/spark-defaults.conf).
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"

export AIRFLOW_HOME="${AIRFLOW_HOME:-$root/.cache/airflow}"
port="${STREAMCORE_AIRFLOW_PORT:-8080}"
master="${STREAMCORE_SPARK_MASTER:-local[*]}"
start_timeout="${STREAMCORE_AIRFLOW_START_TIMEOUT:-180}"
url="http://127.0.0.1:$port"
pid_file="$AIRFLOW_HOME/standalone.pid"
log_file="$AIRFLOW_HOME/logs/standalone.log"
passwords="$AIRFLOW_HOME/passwords.json"
secrets="$AIRFLOW_HOME/secrets.env"
venv_bin="$root/.venv/bin"

# Tasks run spark-submit from PATH and Spark's Python workers run PYSPARK_PYTHON: both from the venv.
export PATH="$venv_bin:$PATH"
export PYSPARK_PYTHON="$venv_bin/python"
export STREAMCORE_HOME="${STREAMCORE_HOME:-$root/data}"

say() { echo "airflow: $*"; }
fail() { echo "airflow: $*" >&2; exit 1; }
# shellcheck source=scripts/lib.sh
source "$root/scripts/lib.sh"

# The metadata database is PostgreSQL, never SQLite by default: the api-server, the scheduler,
# the dag-processor, task runners and the CLI write it at once, and Airflow's own transactions
# read before they write (`airflow backfill create` creates each run in a SAVEPOINT that first
# looks for an existing run). SQLite refuses such a transaction at once with "database is
# locked" whenever another process committed meanwhile, whatever its busy timeout: on a loaded
# machine a backfill beside a running scheduler failed that way. One database per AIRFLOW_HOME,
# so homes (tests, the cluster's) never share metadata.
local_postgres=""
if [[ -z "${STREAMCORE_AIRFLOW_DB_URL:-}" ]]; then
  server_url="$("$root/scripts/postgres.sh" url)"
  STREAMCORE_AIRFLOW_DB_URL="${server_url%/*}/airflow_$(printf '%s' "$AIRFLOW_HOME" | sha256sum | cut -c1-12)"
  local_postgres=1
fi

[[ -x "$venv_bin/airflow" ]] || fail "no airflow in $venv_bin; run \`make venv\` first"

# uv installs without byte-compiling and PYTHONDONTWRITEBYTECODE may forbid caching, so every
# airflow process would compile its imports again (7 s instead of 2.5 s per CLI call, task and
# DAG parse). Compile the venv once per installed environment.
compile_venv() {
  local stamp
  stamp="$(compgen -G "$root/.venv/.installed-*" | head -n 1 || true)"
  stamp="$root/.venv/.bytecode-$(basename "${stamp:-none}")"
  [[ -f "$stamp" ]] && return 0
  say "byte-compiling the venv once (about 40 s)"
  "$venv_bin/python" -m compileall -q -j 0 "$root/.venv/lib" >/dev/null 2>&1 || true
  rm -f "$root"/.venv/.bytecode-*
  touch "$stamp"
}

# Secrets are generated once per AIRFLOW_HOME and survive re-inits (sessions, tokens and encrypted
# connections stay valid).
ensure_secrets() {
  [[ -f "$secrets" ]] && return 0
  (
    umask 077
    "$venv_bin/python" - >"$secrets" <<'EOF'
import secrets
from cryptography.fernet import Fernet
print(f"fernet_key={Fernet.generate_key().decode()}")
print(f"secret_key={secrets.token_urlsafe(32)}")
print(f"jwt_secret={secrets.token_urlsafe(32)}")
print(f"password={secrets.token_urlsafe(12)}")
EOF
  )
}

secret() { grep "^$1=" "$secrets" | cut -d= -f2-; }

admin_password() { echo "${STREAMCORE_AIRFLOW_PASSWORD:-$(secret password)}"; }

# Airflow also opens the metadata database asynchronously; its default async driver for a
# postgresql URL is asyncpg, which is not installed: psycopg 3 (installed) has an async dialect.
async_db_line() {
  local url="$STREAMCORE_AIRFLOW_DB_URL"
  [[ "$url" == postgresql+psycopg://* ]] || return 0
  echo "sql_alchemy_conn_async = postgresql+psycopg_async://${url#postgresql+psycopg://}"
}

write_config() {
  mkdir -p "$AIRFLOW_HOME/logs"
  ensure_secrets
  (
    umask 077
    printf '{"admin": "%s"}\n' "$(admin_password)" >"$passwords"
  )
  cat >"$AIRFLOW_HOME/airflow.cfg" <<EOF
# Written by scripts/airflow.sh init; edit the script, not this file.
[core]
dags_folder = $root/dags
# plugins/: the streamcore plugin (run summaries and Great Expectations Data Docs behind the UI's login).
plugins_folder = $root/plugins
executor = LocalExecutor
load_examples = False
parallelism = 4
max_active_tasks_per_dag = 4
fernet_key = $(secret fernet_key)
auth_manager = airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager
simple_auth_manager_users = admin:admin
simple_auth_manager_passwords_file = $passwords
execution_api_server_url = $url/execution/

[database]
sql_alchemy_conn = $STREAMCORE_AIRFLOW_DB_URL
$(async_db_line)

[logging]
base_log_folder = $AIRFLOW_HOME/logs

[api]
host = 127.0.0.1
port = $port
base_url = $url
workers = 1
expose_config = False
secret_key = $(secret secret_key)

[api_auth]
jwt_secret = $(secret jwt_secret)

[dag_processor]
refresh_interval = 30
parsing_processes = 1

[openlineage]
# OpenLineage events of every task and DAG run (docs/airflow.md, "Lineage"), appended to a file;
# AIRFLOW__OPENLINEAGE__TRANSPORT in the Airflow processes' environment names another transport
# (HTTP for Marquez or DataHub), AIRFLOW__OPENLINEAGE__DISABLED=true turns them off.
namespace = streamcore
transport = {"type": "file", "log_file_path": "$AIRFLOW_HOME/logs/openlineage.jsonl", "append": true}
# Emit from a thread of the task, not a fork of it: a forked task runner shares its supervisor
# connection (and, on Spark Connect, the job's gRPC channel) with the child.
execute_in_thread = True
# Name each job task's run as the parent of its Spark application's (openlineage-spark) run.
spark_inject_parent_job_info = True
EOF
}

register_connection() {
  "$venv_bin/python" - "$master" <<'EOF'
import sys
from airflow.models import Connection
from airflow.utils.session import create_session

master = sys.argv[1]
with create_session() as session:
    conn = session.query(Connection).filter(Connection.conn_id == "spark_default").one_or_none()
    if conn is None:
        conn = Connection(conn_id="spark_default")
        session.add(conn)
    conn.conn_type = "spark"
    conn.host = master  # the whole master URL: local[*] or spark://host:7077
    conn.port = None
    conn.description = "Spark master for streamcore jobs (scripts/airflow.sh, STREAMCORE_SPARK_MASTER)"
print(f"airflow: connection spark_default -> {master}")
EOF
}

init() {
  spark_auth_conf "$AIRFLOW_HOME/spark-conf"
  start_postgres
  compile_venv
  write_config
  if [[ -n "$local_postgres" ]] && [[ "$(database exists)" == no ]]; then
    copy_template
  else
    database create
    migrate "$STREAMCORE_AIRFLOW_DB_URL"
  fi
  register_connection
}

migrate() {
  local url="$1"
  say "migrating the metadata database ($(redact "$url"))"
  local env=(AIRFLOW__DATABASE__SQL_ALCHEMY_CONN="$url")
  [[ "$url" != postgresql+psycopg://* ]] \
    || env+=(AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC="postgresql+psycopg_async://${url#postgresql+psycopg://}")
  env "${env[@]}" "$venv_bin/airflow" db migrate >"$AIRFLOW_HOME/logs/migrate.log" 2>&1 \
    || { tail -n 30 "$AIRFLOW_HOME/logs/migrate.log" >&2; fail "airflow db migrate failed (above)"; }
}

# Migrating an empty metadata database takes 20-45 s, and the test suite makes a dozen homes. On
# the local server a new home's database is a copy of a migrated template (CREATE DATABASE ...
# TEMPLATE, about a second), one template per installed environment (the .venv stamp names it,
# so an upgraded Airflow migrates a new one). The template is migrated under another name and
# renamed when done, so a migration killed half-way is never copied; a lock lets one init at a
# time build it. Other servers (the cluster's, compose's) are migrated in place.
copy_template() {
  local stamp template
  stamp="$(compgen -G "$root/.venv/.installed-*" | head -n 1 || true)"
  stamp="$(basename "${stamp:-none}")"
  template="airflow_template_${stamp#.installed-}"
  mkdir -p "$root/.cache"
  (
    flock 9
    if [[ "$(database exists "$template")" == no ]]; then
      database drop "${template}_building"
      database create "${template}_building"
      migrate "${STREAMCORE_AIRFLOW_DB_URL%/*}/${template}_building"
      database rename "${template}_building" "$template"
    fi
    database create "$(db_name)" "$template"
  ) 9>"$root/.cache/airflow-template.lock"
}

# The pid of our standalone if it runs: the pid file names a live `airflow standalone`.
running_pid() { pid_from "$pid_file" "airflow standalone"; }

healthy() {
  "$venv_bin/python" - "$url" <<'EOF'
import json, sys, urllib.request
try:
    with urllib.request.urlopen(f"{sys.argv[1]}/api/v2/monitor/health", timeout=3) as response:
        health = json.load(response)
except Exception:
    sys.exit(1)
sys.exit(0 if health.get("scheduler", {}).get("status") == "healthy" else 1)
EOF
}

print_login() {
  cat <<EOF
airflow: UI and REST API on $url   (log in as admin / $(admin_password))
airflow: DAG streamcore_importer: unpause it, then Trigger (with parameters) in the UI, or
         eval "\$(scripts/airflow.sh env)"; airflow dags trigger streamcore_importer -c '{"count": 10000}'
airflow: REST: TOKEN=\$(scripts/airflow.sh token); curl -H "Authorization: Bearer \$TOKEN" $url/api/v2/dags
airflow: stop with \`make airflow-stop\` (the cluster's: \`make cluster-stop\`); logs in $log_file
EOF
}

start() {
  local pid
  if pid="$(running_pid)"; then
    say "already running (pid $pid)"
    print_login
    return 0
  fi
  port_busy "$port" && fail "port $port on 127.0.0.1 is used by another process; stop it or set STREAMCORE_AIRFLOW_PORT"
  init
  say "starting airflow standalone on $url (log: $log_file)"
  echo "=== start $(date -Is) ===" >>"$log_file"
  # standalone leads its own process group (its api-server, scheduler, dag-processor, triggerer,
  # task runners and their spark-submit JVMs), so stop can end all of them at once.
  detach "$pid_file" "$log_file" "$venv_bin/airflow" standalone
  local deadline=$((SECONDS + start_timeout))
  while ((SECONDS < deadline)); do
    sleep 2
    if ! running_pid >/dev/null; then
      sleep 1
      running_pid >/dev/null || {
        tail -n 40 "$log_file" >&2
        fail "airflow standalone exited during start-up (log above)"
      }
    fi
    if healthy; then
      say "ready in $((SECONDS - deadline + start_timeout)) s (pid $(running_pid))"
      print_login
      return 0
    fi
  done
  tail -n 40 "$log_file" >&2
  stop
  fail "not healthy on $url within $start_timeout s (log above); stopped it"
}

stop() {
  local pid
  if ! pid="$(running_pid)"; then
    say "not running"
    rm -f "$pid_file"
    return 0
  fi
  say "stopping process group $pid"
  kill -TERM -- "-$pid" 2>/dev/null || true
  local deadline=$((SECONDS + 30))
  while kill -0 -- "-$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.5; done
  if kill -0 -- "-$pid" 2>/dev/null; then
    say "still running after 30 s: KILL"
    kill -KILL -- "-$pid" 2>/dev/null || true
    while kill -0 -- "-$pid" 2>/dev/null; do sleep 0.2; done
  fi
  rm -f "$pid_file"
  say "stopped"
}

status() {
  local pid
  if pid="$(running_pid)"; then
    if healthy; then say "running (pid $pid) on $url"; else say "running (pid $pid), not healthy yet on $url"; fi
    return 0
  fi
  say "stopped ($url)"
  return 3
}

token() {
  [[ -f "$secrets" ]] || fail "no Airflow set up in $AIRFLOW_HOME; run \`make airflow\` first"
  "$venv_bin/python" - "$url" "$(admin_password)" <<'EOF'
import json, sys, urllib.error, urllib.request
url, password = sys.argv[1], sys.argv[2]
request = urllib.request.Request(
    f"{url}/auth/token", data=json.dumps({"username": "admin", "password": password}).encode(),
    headers={"Content-Type": "application/json"}, method="POST")
try:
    with urllib.request.urlopen(request, timeout=10) as response:
        print(json.load(response)["access_token"])
except (urllib.error.URLError, OSError) as exc:
    sys.exit(f"airflow: no token from {url}/auth/token ({exc}); is it running? (make airflow)")
EOF
}

# Task starts/ends and the jobs' own progress lines out of `airflow dags test`'s output.
progress() {
  grep --line-buffered -E '\[DAG TEST\] (starting|end task)|INFO jobs\.|ERROR|Task failed' \
    | sed -u -E 's/^[0-9-]+T([0-9:]+)\.[0-9]+Z \[[a-z ]+\] /\1 /; s/ +\[[A-Za-z_.]+\] loc=\S+//;
        s/\[DAG TEST\] //; s/ map_index=-1//; s/[0-9-]+ [0-9:,]+ INFO //' \
    | cut -c1-160
}

demo() {
  local count="${1:-20000}"
  [[ "$count" =~ ^[1-9][0-9]*$ ]] || fail "DEMO_COUNT must be a positive whole number, got '$count'"
  init
  local stamp run_log marker record started=$SECONDS
  stamp="$(date -u +%Y%m%dT%H%M%SZ)"
  run_log="$AIRFLOW_HOME/logs/demo-$stamp.log"
  marker="$AIRFLOW_HOME/logs/.demo-$stamp"
  touch "$marker"
  say "running DAG streamcore_importer once with count=$count into STREAMCORE_HOME=$STREAMCORE_HOME"
  say "(two spark-submits, about a minute on 2 cores with 20,000 documents; full log: $run_log)"
  set +e
  "$venv_bin/airflow" dags test streamcore_importer -c "{\"count\": $count}" 2>&1 \
    | tee "$run_log" | progress
  local rc=${PIPESTATUS[0]}
  set -e
  record="$(find "$STREAMCORE_HOME/runs/importer" -name '*.json' -newer "$marker" 2>/dev/null | head -n 1)"
  rm -f "$marker"
  if ((rc != 0)) || [[ -z "$record" ]]; then
    grep -E 'Error|Exception|rejects|failed' "$run_log" | tail -n 15 >&2 || true
    fail "the DAG run failed (exit $rc); the errors above come from $run_log"
  fi
  echo
  "$venv_bin/python" - "$record" "$((SECONDS - started))" <<'PY'
import json, sys
record = json.load(open(sys.argv[1]))
print(f"streamcore importer demo: DAG run {record['run_id']} ({sys.argv[2]} s with Airflow)")
print()
print(record["report"])
print()
print(f"run record: {sys.argv[1]}")
PY
  echo "next: make airflow (UI on $url), then trigger streamcore_importer with your own parameters"
}

env_exports() {
  cat <<EOF
export AIRFLOW_HOME='$AIRFLOW_HOME'
export PATH='$venv_bin':"\$PATH"
export PYSPARK_PYTHON='$PYSPARK_PYTHON'
export STREAMCORE_HOME='$STREAMCORE_HOME'
EOF
}

# The default database's server: the project's local PostgreSQL (a no-op when it runs; installs
# and initialises it on first use, as `make test` does).
start_postgres() {
  [[ -n "$local_postgres" ]] || return 0
  "$root/scripts/postgres.sh" status >/dev/null 2>&1 && return 0
  mkdir -p "$AIRFLOW_HOME/logs"
  "$root/scripts/postgres.sh" start >"$AIRFLOW_HOME/logs/postgres.log" 2>&1 || {
    cat "$AIRFLOW_HOME/logs/postgres.log" >&2
    fail "Airflow's metadata database needs the local PostgreSQL server, which did not start (above); fix that, or give a database with STREAMCORE_AIRFLOW_DB_URL"
  }
}

redact() { sed -E 's#//([^:@/]+):[^@/]*@#//\1:***@#' <<<"$1"; }
db_name() { echo "${STREAMCORE_AIRFLOW_DB_URL##*/}"; }

# `database exists|create|drop|rename [NAME] [TEMPLATE|NEW]` on the server of
# STREAMCORE_AIRFLOW_DB_URL (NAME defaults to its database). A PostgreSQL server (the local one,
# the cluster's, compose's image) starts with its own databases only: Airflow's is created here
# before the migration. Other URLs (SQLite) need none of it.
database() {
  [[ "$STREAMCORE_AIRFLOW_DB_URL" == postgresql* ]] || { [[ "$1" == exists ]] && echo yes; return 0; }
  "$venv_bin/python" - "$STREAMCORE_AIRFLOW_DB_URL" "$@" <<'EOF'
import sys
import psycopg
from sqlalchemy.engine import make_url

url, action, args = make_url(sys.argv[1]), sys.argv[2], sys.argv[3:]
name = args[0] if args else url.database
try:
    conn = psycopg.connect(host=url.host, port=url.port, user=url.username,
                           password=url.password, dbname="postgres", autocommit=True)
except psycopg.OperationalError as exc:
    sys.exit(f"airflow: cannot reach PostgreSQL at {url.host}:{url.port} ({exc}); "
             "is the server up, and STREAMCORE_AIRFLOW_DB_URL right?")
with conn:
    exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
    if action == "exists":
        print("yes" if exists else "no")
    elif action == "create" and not exists:
        template = f' TEMPLATE "{args[1]}"' if len(args) > 1 else ""
        conn.execute(f'CREATE DATABASE "{name}"{template}')
        source = f" (a copy of {args[1]})" if template else ""
        print(f"airflow: created database {name} for Airflow's metadata{source}")
    elif action == "drop" and exists:
        conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
    elif action == "rename":
        conn.execute(f'ALTER DATABASE "{name}" RENAME TO "{args[1]}"')
EOF
}

run_component() {
  local component="$1" option="$2" command
  case "$component" in
    init) command=("$venv_bin/airflow" db migrate) ;;
    api-server | scheduler | dag-processor | triggerer) command=("$venv_bin/airflow" "$component") ;;
    *) fail "run: unknown component '$component'; one of init, api-server, scheduler, dag-processor, triggerer" ;;
  esac
  # The scheduler's task runners spark-submit: their drivers authenticate to the master.
  spark_auth_conf "$AIRFLOW_HOME/spark-conf"
  if [[ "$option" == --print ]]; then
    write_config
    echo "${command[*]}"
    return 0
  fi
  [[ -z "$option" ]] || fail "run: unknown option '$option' (only --print)"
  if [[ "$component" == init ]]; then
    init
    return 0
  fi
  [[ -f "$AIRFLOW_HOME/airflow.cfg" ]] \
    || fail "no $AIRFLOW_HOME/airflow.cfg; run \`$0 run init\` first (compose: the airflow-init service)"
  say "running $component in the foreground (AIRFLOW_HOME $AIRFLOW_HOME)"
  exec "${command[@]}"
}

case "${1:-}" in
  run)
    mkdir -p "$AIRFLOW_HOME"
    if [[ "${2:-}" == init ]]; then
      hold_lock "$AIRFLOW_HOME" 120 init/start
    fi
    run_component "${2:-}" "${3:-}"
    ;;
  init | start)
    hold_lock "$AIRFLOW_HOME" 120 init/start
    "$1"
    ;;
  stop) stop ;;
  status) status ;;
  token) token ;;
  env) env_exports ;;
  demo)
    hold_lock "$AIRFLOW_HOME" 120 init/start
    demo "${2:-}"
    ;;
  *)
    echo "usage: $0 init|start|stop|status|token|env|demo [N]|run COMPONENT [--print]" >&2
    exit 2
    ;;
esac
