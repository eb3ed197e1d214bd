#!/usr/bin/env bash
# A local PostgreSQL server for the outbox (tests, benchmark, demos), from Debian's packages, on
# 127.0.0.1 only. Data, socket and log live in .cache/postgres/ (git-ignored).
#
#   scripts/postgres.sh start    install the server binaries if missing, init the cluster on first
#                                use, start it detached (no-op when it runs), wait for pg_isready
#   scripts/postgres.sh stop     stop the server this script started (fast shutdown)
#   scripts/postgres.sh status   running (pid, address) or stopped; exit code 0 = running, 3 = stopped
#   scripts/postgres.sh url      the SQLAlchemy URL of the database (postgresql+psycopg://...)
#
# Environment: STREAMCORE_POSTGRES_PORT (default 55432, away from a system server on 5432),
# STREAMCORE_POSTGRES_HOME (default .cache/postgres), STREAMCORE_POSTGRES_USER (the OS user that
# runs the server: initdb refuses root; default `postgres` if it exists, else `nobody`),
# STREAMCORE_POSTGRES_START_TIMEOUT (seconds, default 60).
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"

port="${STREAMCORE_POSTGRES_PORT:-55432}"
home="${STREAMCORE_POSTGRES_HOME:-$root/.cache/postgres}"
start_timeout="${STREAMCORE_POSTGRES_START_TIMEOUT:-60}"
database=streamcore
role=streamcore

say() { echo "postgres: $*"; }
fail() { echo "postgres: $*" >&2; exit 1; }
# shellcheck source=scripts/lib.sh
source "$root/scripts/lib.sh"

os_user() {
  if [[ -n "${STREAMCORE_POSTGRES_USER:-}" ]]; then
    echo "$STREAMCORE_POSTGRES_USER"
  elif id postgres >/dev/null 2>&1; then
    echo postgres
  else
    echo nobody
  fi
}

# The newest installed server's bin folder: Debian's /usr/lib/postgresql/<major>/bin.
find_bin() {
  local dir
  dir="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)"
  [[ -n "$dir" && -x "$dir/initdb" && -x "$dir/pg_ctl" ]] || return 1
  echo "$dir"
}

install_server() {
  [[ "$(id -u)" == 0 ]] || fail "no PostgreSQL server binaries in /usr/lib/postgresql/*/bin and not root to install them; run \`sudo apt-get install -y postgresql\`"
  command -v apt-get >/dev/null || fail "no PostgreSQL server binaries and no apt-get to install them; install PostgreSQL 13+ so that /usr/lib/postgresql/<major>/bin/initdb exists"
  say "installing the server from Debian packages (apt-get install postgresql) ..."
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y --no-install-recommends postgresql >"$home/apt.log" 2>&1; then
    apt-get update >>"$home/apt.log" 2>&1 || true
    apt-get install -y --no-install-recommends postgresql >>"$home/apt.log" 2>&1 \
      || { tail -n 30 "$home/apt.log" >&2; fail "apt-get install postgresql failed (log above, full log $home/apt.log)"; }
  fi
}

# As root, run the server as $(os_user) (asked each time: installing the package creates the
# `postgres` user); as anyone else, as that user.
as_user() {
  # from /: the clone's folder may be closed to the server's user (all paths here are absolute)
  if [[ "$(id -u)" == 0 ]]; then (cd / && runuser -u "$(os_user)" -- "$@"); else "$@"; fi
}

# Where the cluster lives: $home, unless the server's OS user cannot reach it (a clone under a
# private folder such as /root); then a folder of its own under /var/tmp, named after the clone.
cluster_paths() {
  local dir="$home"
  if [[ "$(id -u)" == 0 ]] && id "$(os_user)" >/dev/null 2>&1 \
    && ! runuser -u "$(os_user)" -- test -x "$home"; then
    dir="/var/tmp/streamcore-postgres-$(echo "$root" | sha256sum | cut -c1-12)"
    mkdir -p "$dir"
  fi
  data="$dir/data"
  socket_dir="$dir/run"
  log_file="$dir/server.log"
}

own() { if [[ "$(id -u)" == 0 ]]; then chown "$(os_user)" "$@"; fi; }

running() { [[ -n "${bin:-}" ]] && "$bin/pg_isready" -q -h 127.0.0.1 -p "$port" -t 2; }

server_pid() { [[ -f "$data/postmaster.pid" ]] && head -n 1 "$data/postmaster.pid"; }

tail_log() {
  if [[ -f "$log_file" ]]; then
    echo "--- last lines of $log_file ---" >&2
    tail -n 40 "$log_file" >&2
  fi
}

init_cluster() {
  local user
  user="$(os_user)"
  if [[ "$(id -u)" == 0 ]]; then
    id "$user" >/dev/null 2>&1 || fail "OS user $user does not exist; set STREAMCORE_POSTGRES_USER to a non-root user"
  else
    user="$(id -un)"
  fi
  mkdir -p "$socket_dir"
  own "$(dirname "$data")" "$socket_dir"
  if [[ ! -f "$data/PG_VERSION" ]]; then
    say "initialising the cluster in $data (as OS user $user)"
    rm -rf "$data"
    as_user "$bin/initdb" -D "$data" -U "$role" --auth=trust -E UTF8 --locale=C.UTF-8 \
      >"$home/initdb.log" 2>&1 || { cat "$home/initdb.log" >&2; fail "initdb of $data failed (see above)"; }
    cat >>"$data/postgresql.conf" <<EOF
# Written by scripts/postgres.sh: loopback only, socket in $socket_dir.
listen_addresses = '127.0.0.1'
unix_socket_directories = '$socket_dir'
max_connections = 200
EOF
  fi
}

start() {
  bin="$(find_bin || true)"
  if [[ -z "$bin" ]]; then
    mkdir -p "$home"
    install_server
    bin="$(find_bin)" || fail "apt-get installed postgresql but no /usr/lib/postgresql/*/bin/initdb appeared"
  fi
  if running; then
    say "already running on 127.0.0.1:$port"
    return 0
  fi
  cluster_paths
  init_cluster
  say "starting on 127.0.0.1:$port (log: $log_file)"
  touch "$log_file" && own "$log_file"
  # setsid: the server survives the shell (and make, and pytest) that started it.
  local run_as=()
  if [[ "$(id -u)" == 0 ]]; then run_as=(runuser -u "$(os_user)" --); fi
  if ! (cd / && setsid "${run_as[@]}" "$bin/pg_ctl" -D "$data" -l "$log_file" -w \
    -t "$start_timeout" -o "-p $port" start </dev/null >"$home/pg_ctl.log" 2>&1 9>&-); then
    cat "$home/pg_ctl.log" >&2
    tail_log
    fail "the server did not start on 127.0.0.1:$port (log above); is the port taken? set STREAMCORE_POSTGRES_PORT"
  fi
  local deadline=$((SECONDS + start_timeout))
  until running; do
    ((SECONDS < deadline)) || { tail_log; fail "not ready on 127.0.0.1:$port within $start_timeout s"; }
    sleep 0.2
  done
  if ! as_user "$bin/psql" -h 127.0.0.1 -p "$port" -U "$role" -d postgres -tAc \
    "SELECT 1 FROM pg_database WHERE datname = '$database'" | grep -q 1; then
    as_user "$bin/createdb" -h 127.0.0.1 -p "$port" -U "$role" "$database" \
      || fail "createdb $database failed"
  fi
  say "ready on 127.0.0.1:$port (pid $(server_pid))"
}

stop() {
  bin="$(find_bin || true)"
  cluster_paths
  if [[ -z "$bin" || ! -f "$data/postmaster.pid" ]]; then
    say "not running"
    return 0
  fi
  say "stopping pid $(server_pid)"
  as_user "$bin/pg_ctl" -D "$data" -m fast -w -t 60 stop >/dev/null 2>&1 \
    || { tail_log; fail "pg_ctl stop failed (log above)"; }
  say "stopped"
}

status() {
  bin="$(find_bin || true)"
  cluster_paths
  if running; then
    say "running (pid $(server_pid || echo '?')) on 127.0.0.1:$port"
    return 0
  fi
  say "stopped (127.0.0.1:$port)"
  return 3
}

case "${1:-}" in
  start)
    hold_lock "$home" 120 start
    start
    ;;
  stop)
    mkdir -p "$home"
    stop
    ;;
  status)
    mkdir -p "$home"
    status
    ;;
  url) echo "postgresql+psycopg://$role@127.0.0.1:$port/$database" ;;
  *)
    echo "usage: $0 start|stop|status|url" >&2
    exit 2
    ;;
esac
