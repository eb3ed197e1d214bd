#!/usr/bin/env bash
# A single-node Kafka 4.x broker (KRaft, combined broker + controller) on 127.0.0.1, run from the
# jars `make jars` put in .cache/jars/kafka-broker/. Config, data and logs live in .cache/kafka/.
# In a container (docker-compose.yml) `run` keeps it in the foreground, bound to
# STREAMCORE_KAFKA_HOST and advertised as STREAMCORE_KAFKA_ADVERTISED_HOST.
#
# Two client listeners: PLAINTEXT on $STREAMCORE_KAFKA_PORT and SASL_PLAINTEXT (mechanism PLAIN) on
# $STREAMCORE_KAFKA_SASL_PORT, whose users (streamcore / $STREAMCORE_KAFKA_SASL_PASSWORD, default
# streamcore-secret; admin / $STREAMCORE_KAFKA_ADMIN_PASSWORD, default admin-secret) are in the
# listener's JAAS config in server.properties (readable by its owner only). Brokers and the
# controller talk PLAINTEXT.
#
#   scripts/kafka.sh start    start it detached (no-op when it runs with the current config;
#                             restarted when it runs with an older one), wait until it answers
#   scripts/kafka.sh stop     stop the broker this script started (TERM, then KILL after 20 s)
#   scripts/kafka.sh status   running (pid, address) or stopped; exit code 0 = running, 3 = stopped
#   scripts/kafka.sh run      format the storage if new, then exec the broker in the foreground,
#                             logging to stdout (a container's command)
#   scripts/kafka.sh run --print   print the server.properties `run` would write, start nothing
#
# Environment: STREAMCORE_KAFKA_PORT (default 9092), STREAMCORE_KAFKA_CONTROLLER_PORT (9093),
# STREAMCORE_KAFKA_SASL_PORT (9094),
# STREAMCORE_KAFKA_HOME (default .cache/kafka), STREAMCORE_JARS (default .cache/jars),
# STREAMCORE_KAFKA_HEAP (default 512m), STREAMCORE_KAFKA_START_TIMEOUT (seconds, default 30),
# STREAMCORE_KAFKA_HOST (the listeners' bind address, default 127.0.0.1; 0.0.0.0 in a container),
# STREAMCORE_KAFKA_ADVERTISED_HOST (the host name clients and the controller quorum are given,
# default 127.0.0.1; the service name in a container).
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"

port="${STREAMCORE_KAFKA_PORT:-9092}"
controller_port="${STREAMCORE_KAFKA_CONTROLLER_PORT:-9093}"
sasl_port="${STREAMCORE_KAFKA_SASL_PORT:-9094}"
home="${STREAMCORE_KAFKA_HOME:-$root/.cache/kafka}"
jars="${STREAMCORE_JARS:-$root/.cache/jars}/kafka-broker"
heap="${STREAMCORE_KAFKA_HEAP:-512m}"
start_timeout="${STREAMCORE_KAFKA_START_TIMEOUT:-30}"
host="${STREAMCORE_KAFKA_HOST:-127.0.0.1}"
advertised="${STREAMCORE_KAFKA_ADVERTISED_HOST:-127.0.0.1}"
sasl_password="${STREAMCORE_KAFKA_SASL_PASSWORD:-streamcore-secret}"
admin_password="${STREAMCORE_KAFKA_ADMIN_PASSWORD:-admin-secret}"
address="127.0.0.1:$port"
pid_file="$home/kafka.pid"
config="$home/server.properties"
log_file="$home/logs/server.log"
data="$home/data"

say() { echo "kafka: $*"; }
fail() { echo "kafka: $*" >&2; exit 1; }

# The passwords go into a quoted JAAS value: a quote, a backslash or a line break would end it.
for secret in "$sasl_password" "$admin_password"; do
  [[ "$secret" =~ [\"\\[:cntrl:]] ]] \
    && fail "STREAMCORE_KAFKA_SASL_PASSWORD and STREAMCORE_KAFKA_ADMIN_PASSWORD may not hold a quote, a backslash or a control character"
done
# shellcheck source=scripts/lib.sh
source "$root/scripts/lib.sh"

python_bin() {
  if [[ -x "$root/.venv/bin/python" ]]; then echo "$root/.venv/bin/python"; else echo python3; fi
}

# The pid of our broker if it runs: the pid file names a live java process started on our config.
running_pid() { pid_from "$pid_file" "kafka.Kafka $config"; }

# Exit 0 once the broker at $address answers a metadata request listing at least one broker.
probe() {
  "$(python_bin)" - "$address" "$1" <<'EOF'
import socket, sys
address, timeout = sys.argv[1], float(sys.argv[2])
try:
    from confluent_kafka.admin import AdminClient
except ImportError:  # no venv yet: a TCP connect is the best we can do
    host, port = address.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError:
        sys.exit(1)
    sys.exit(0)
admin = AdminClient({"bootstrap.servers": address, "socket.timeout.ms": int(timeout * 1000),
                     "log_level": 0, "logger": lambda *a: None})
try:
    md = admin.list_topics(timeout=timeout)
except Exception:
    sys.exit(1)
sys.exit(0 if md.brokers else 1)
EOF
}

# The broker's server.properties, on stdout.
render_config() {
  cat <<EOF
# Written by scripts/kafka.sh on each start; edit the script, not this file.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@$advertised:$controller_port
listeners=PLAINTEXT://$host:$port,CONTROLLER://$host:$controller_port,SASL_PLAINTEXT://$host:$sasl_port
advertised.listeners=PLAINTEXT://$advertised:$port,SASL_PLAINTEXT://$advertised:$sasl_port
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT
sasl.enabled.mechanisms=PLAIN
listener.name.sasl_plaintext.sasl.enabled.mechanisms=PLAIN
listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="$admin_password" user_admin="$admin_password" user_streamcore="$sasl_password";
log.dirs=$data
num.partitions=1
default.replication.factor=1
auto.create.topics.enable=false
delete.topic.enable=true
log.retention.hours=168
# The log cleaner of compacted topics looks for work every second (Kafka's default: 15 s), so
# compaction shows within seconds in the demo and the tests.
log.cleaner.backoff.ms=1000
offsets.retention.minutes=20160
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
group.min.session.timeout.ms=500
group.consumer.min.session.timeout.ms=500
group.consumer.min.heartbeat.interval.ms=100
num.network.threads=2
num.io.threads=2
num.recovery.threads.per.data.dir=1
EOF
}

write_config() {
  mkdir -p "$home/logs" "$data"
  (
    umask 077
    render_config >"$config"
  )
  cat >"$home/log4j2.properties" <<EOF
status = warn
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.console.ref = STDOUT
logger.kafka.name = kafka
logger.kafka.level = WARN
logger.apache.name = org.apache.kafka
logger.apache.level = WARN
logger.server.name = kafka.server.KafkaRaftServer
logger.server.level = INFO
logger.broker.name = kafka.server.BrokerServer
logger.broker.level = INFO
EOF
}

# True when the running broker started with another config than this script writes now (an older
# checkout, other ports): it must be restarted to get, e.g., the SASL listener.
stale_config() {
  [[ "$(render_config)" != "$(cat "$config" 2>/dev/null)" ]]
}

check_prerequisites() {
  command -v java >/dev/null || fail "java is not on PATH; install a JDK 17+ (e.g. apt-get install openjdk-17-jre-headless)"
  compgen -G "$jars/kafka_2.13-*.jar" >/dev/null \
    || fail "no Kafka broker jars in $jars; run \`make jars\` first"
}

# KRaft needs its storage formatted once, with a cluster id, before the first start.
format_storage() {
  [[ -f "$data/meta.properties" ]] && return 0
  local cluster_id
  # Kafka's own Uuid.randomUuid() never starts with '-' (it would read as an option): same here.
  cluster_id="$("$(python_bin)" -c '
import base64, uuid
while (u := base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")).startswith("-"):
    pass
print(u)')"
  say "formatting storage in $data (cluster id $cluster_id)"
  java -Xmx256m -Dlog4j2.configurationFile="$home/log4j2.properties" -cp "$jars/*" \
    kafka.tools.StorageTool format -t "$cluster_id" -c "$config" >"$home/logs/format.log" 2>&1 \
    || { cat "$home/logs/format.log" >&2; fail "storage format failed (see above)"; }
}

broker_command=(java -Xms128m -Xmx"$heap" -XX:+UseG1GC -XX:MaxGCPauseMillis=20
  -Djava.awt.headless=true -Dlog4j2.configurationFile="$home/log4j2.properties" -cp "$jars/*"
  kafka.Kafka "$config")

start() {
  local pid
  if pid="$(running_pid)" && stale_config; then
    say "running (pid $pid) with an older configuration than scripts/kafka.sh writes: restarting"
    stop
  fi
  if pid="$(running_pid)"; then
    local until=$((SECONDS + start_timeout))
    until probe 1; do
      ((SECONDS < until)) || fail "running (pid $pid) but not answering on $address after $start_timeout s; see $log_file or \`$0 stop\`"
      sleep 0.5
    done
    say "already running (pid $pid) on $address"
    echo "$address"
    return 0
  fi
  check_prerequisites
  if port_busy "$port"; then
    fail "port $port on 127.0.0.1 is used by another process (not the broker of $home); stop it or set STREAMCORE_KAFKA_PORT"
  fi
  if port_busy "$controller_port"; then
    fail "controller port $controller_port is used by another process; stop it or set STREAMCORE_KAFKA_CONTROLLER_PORT"
  fi
  if port_busy "$sasl_port"; then
    fail "SASL port $sasl_port is used by another process; stop it or set STREAMCORE_KAFKA_SASL_PORT"
  fi
  write_config
  format_storage
  say "starting on $address (log: $log_file)"
  echo "=== start $(date -Is) ===" >>"$log_file"
  detach "$pid_file" "$log_file" "${broker_command[@]}"
  local waited=0 deadline=$((SECONDS + start_timeout))
  while ((SECONDS < deadline)); do
    sleep 0.5
    if ! pid="$(running_pid)"; then
      if ((waited++ > 4)); then
        echo "--- last lines of $log_file ---" >&2
        tail -n 40 "$log_file" >&2
        fail "the broker exited during start-up (see the log above)"
      fi
      continue
    fi
    if probe 1; then
      say "ready on $address (pid $pid, $((SECONDS - deadline + start_timeout)) s)"
      echo "$address"
      return 0
    fi
  done
  echo "--- last lines of $log_file ---" >&2
  tail -n 40 "$log_file" >&2
  if pid="$(running_pid)"; then kill -TERM "$pid" 2>/dev/null || true; fi
  fail "the broker did not answer on $address within $start_timeout s (log above); stopped it"
}

stop() {
  local pid
  if ! pid="$(running_pid)"; then
    say "not running"
    rm -f "$pid_file"
    return 0
  fi
  stop_pid "$pid" "the broker"
  rm -f "$pid_file"
  say "stopped"
}

# The broker in the foreground, as a container's command: no pid file, no probe; the engine
# restarts it and collects its stdout.
run() {
  if [[ "$1" == --print ]]; then
    render_config
    return 0
  fi
  [[ -z "$1" ]] || fail "run: unknown option '$1' (only --print)"
  check_prerequisites
  write_config
  format_storage
  say "running in the foreground: listeners on $host, advertised as $advertised:$port"
  exec "${broker_command[@]}"
}

status() {
  local pid
  if pid="$(running_pid)"; then
    if stale_config; then
      say "running (pid $pid) on $address with an older configuration; \`$0 start\` restarts it"
    elif probe 2; then
      say "running (pid $pid) on $address (SASL/PLAIN on 127.0.0.1:$sasl_port)"
    else
      say "running (pid $pid) but not answering on $address yet"
    fi
    return 0
  fi
  say "stopped ($address)"
  return 3
}

case "${1:-}" in
  start)
    hold_lock "$home" 60 start
    start
    ;;
  stop) stop ;;
  status) status ;;
  run) run "${2:-}" ;;
  *)
    echo "usage: $0 start|stop|status|run [--print]" >&2
    exit 2
    ;;
esac
