# Shell functions the service scripts share (sourced, not run): one start at a time, finding the
# process a pid file names, stopping it, whether a loopback port is taken, and Spark's RPC
# authentication. Each script defines say() and fail() first.

# Hold `dir`/.lock (file descriptor 9) until the script exits, waiting up to `seconds`: parallel
# test sessions and `make -j` then start (or init, or stop) a service one at a time. `what` names
# the holder in the error.
hold_lock() {
  local dir="$1" seconds="$2" what="$3"
  mkdir -p "$dir"
  exec 9>"$dir/.lock"
  flock -w "$seconds" 9 || fail "another $what holds $dir/.lock"
}

# The pid in `file` if it names a live process whose command line contains `pattern`.
pid_from() {
  local file="$1" pattern="$2" pid
  [[ -f "$file" ]] || return 1
  pid="$(cat "$file" 2>/dev/null || true)"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  [[ -r "/proc/$pid/cmdline" ]] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- "$pattern" || return 1
  echo "$pid"
}

# Run the command after `pid_file` and `log` in the background, in a session of its own
# (setsid): it outlives the shell (make, pytest) that started it and leads its own process group.
# The inner bash writes its pid to `pid_file`, then becomes the command (exec), so the file names
# it. Output appends to `log`; the start lock (descriptor 9) is not inherited.
detach() {
  local pid_file="$1" log="$2"
  shift 2
  setsid bash -c 'echo $$ >"$1"; shift; exec "$@"' _ "$pid_file" "$@" \
    </dev/null >>"$log" 2>&1 9>&- &
}

# TERM `pid` (`label` in messages), then KILL it if it still runs after `grace` seconds (20).
stop_pid() {
  local pid="$1" label="$2" grace="${3:-20}"
  say "stopping $label (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  local deadline=$((SECONDS + grace))
  while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
  if kill -0 "$pid" 2>/dev/null; then
    say "$label still runs after $grace s: KILL"
    kill -KILL "$pid" 2>/dev/null || true
    while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
  fi
}

# Exit 0 if something accepts connections on 127.0.0.1:`port`.
port_busy() {
  python3 -c '
import socket, sys
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=0.5).close()
except OSError:
    sys.exit(1)' "$1"
}

# Spark's RPC authentication for every Spark JVM this script starts (the standalone master and
# worker, spark-submit's driver): when STREAMCORE_SPARK_AUTH_SECRET is set (docker-compose.yml
# sets it from .env), `dir`/spark-defaults.conf, readable by its owner only, turns on
# spark.authenticate with that secret, and SPARK_CONF_DIR names `dir`. Each Spark JVM reads
# spark-defaults.conf from SPARK_CONF_DIR, so the secret is on no command line and in no task
# log. The file is also where the compose deployment passes Spark settings to all of them:
# spark.sql.variable.substitute=false, so that no SQL text expands ${env:...} or ${spark:...}.
spark_auth_conf() {
  local dir="$1" secret="${STREAMCORE_SPARK_AUTH_SECRET:-}"
  [[ -n "$secret" ]] || return 0
  [[ "$secret" =~ ^[A-Za-z0-9._~+/=-]{32,}$ ]] \
    || fail "STREAMCORE_SPARK_AUTH_SECRET must be 32 or more letters, digits or ._~+/=- (e.g. python3 -c 'import secrets; print(secrets.token_urlsafe(32))')"
  mkdir -p "$dir"
  (
    umask 077
    cat >"$dir/spark-defaults.conf.$$" <<CONF
# Written from STREAMCORE_SPARK_AUTH_SECRET by scripts/lib.sh spark_auth_conf; set it, not this file.
spark.authenticate true
spark.authenticate.secret $secret
spark.sql.variable.substitute false
CONF
  )
  mv -f "$dir/spark-defaults.conf.$$" "$dir/spark-defaults.conf"
  export SPARK_CONF_DIR="$dir"
}
