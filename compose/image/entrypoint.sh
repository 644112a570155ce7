#!/bin/bash
# Entrypoint of kafkaproof/kafka:<version>: render server.properties from the environment,
# format the storage once, then exec the broker in the foreground as PID 1, so that
# `docker stop` sends SIGTERM straight to the JVM (a controlled shutdown).
#
# Environment, as in the official apache/kafka image:
#   KAFKA_FOO_BAR=v      -> foo.bar=v   (`__` -> `_`, `___` -> `-`, names lower-cased), e.g.
#                           KAFKA_NODE_ID, KAFKA_PROCESS_ROLES, KAFKA_CONTROLLER_QUORUM_VOTERS,
#                           KAFKA_LISTENERS, KAFKA_ADVERTISED_LISTENERS,
#                           KAFKA_LISTENER_SECURITY_PROTOCOL_MAP, KAFKA_CONTROLLER_LISTENER_NAMES,
#                           KAFKA_INTER_BROKER_LISTENER_NAME, KAFKA_LOG_DIRS
#   CLUSTER_ID            the KRaft cluster id the storage is formatted with (same on every node)
#   KAFKA_HEAP_OPTS, KAFKA_JVM_PERFORMANCE_OPTS, KAFKA_GC_LOG_OPTS, KAFKA_JMX_OPTS,
#   KAFKA_LOG4J_OPTS, KAFKA_OPTS  JVM options (not broker properties), as kafka-run-class.sh
# Without any KAFKA_* property the node is a single combined broker+controller on
# localhost:9092 (like apache/kafka's default).
# Extra: any argument runs that command instead (e.g. `docker run --rm IMAGE java -version`).
set -euo pipefail

KAFKA_HOME=/opt/kafka
CONFIG_DIR="$KAFKA_HOME/config"
PROPS="$CONFIG_DIR/server.properties"

if [ "$#" -gt 0 ]; then exec "$@"; fi

log() { echo "[$(date -u +%Y-%m-%dT%H:%M:%S,000)] INFO [kafkaproof-entrypoint] $*"; }
die() { echo "[$(date -u +%Y-%m-%dT%H:%M:%S,000)] ERROR [kafkaproof-entrypoint] $*" >&2; exit 1; }

# Environment variables that are JVM/launcher options, not broker properties (apache/kafka's list).
EXCLUDED=" KAFKA_VERSION KAFKA_HEAP_OPTS KAFKA_HEAP_OPT KAFKA_LOG4J_OPTS KAFKA_OPTS KAFKA_JMX_OPTS \
KAFKA_JVM_PERFORMANCE_OPTS KAFKA_GC_LOG_OPTS KAFKA_LOG4J_ROOT_LOGLEVEL KAFKA_LOG4J_LOGGERS \
KAFKA_TOOLS_LOG4J_LOGLEVEL KAFKA_JMX_PORT KAFKA_JMX_HOSTNAME KAFKA_HOME "

property_name() {  # KAFKA_LISTENER_SECURITY_PROTOCOL_MAP -> listener.security.protocol.map
  local key="${1#KAFKA_}"
  key="${key//___/$'\x01'}"; key="${key//__/$'\x02'}"; key="${key//_/.}"
  key="${key//$'\x01'/-}"; key="${key//$'\x02'/_}"
  printf '%s' "${key,,}"
}

if [ "${KAFKA_PROCESS_ROLES:-}" = "controller" ]; then
  # A dedicated controller has no client listener to advertise (apache/kafka refuses it too).
  [ -z "${KAFKA_ADVERTISED_LISTENERS:-}" ] || die "KAFKA_ADVERTISED_LISTENERS is not supported on a KRaft controller"
  unset KAFKA_ADVERTISED_LISTENERS
fi
if [ -z "${KAFKA_LISTENERS:-}" ] && [ -n "${KAFKA_ADVERTISED_LISTENERS:-}" ]; then
  # As apache/kafka: listen on every interface at the advertised ports.
  export KAFKA_LISTENERS
  KAFKA_LISTENERS="$(sed -e 's|://[^:,]*:|://0.0.0.0:|g' <<<"$KAFKA_ADVERTISED_LISTENERS")"
fi

names=()
while IFS= read -r name; do
  case "$EXCLUDED" in *" $name "*) continue ;; esac
  names+=("$name")
done < <(compgen -e | grep '^KAFKA_' | sort)

mkdir -p "$CONFIG_DIR"
if [ "${#names[@]}" -eq 0 ]; then
  log "no KAFKA_* settings: starting a single combined node on localhost:9092"
  cat >"$PROPS" <<'EOF'
node.id=1
process.roles=broker,controller
controller.quorum.voters=1@localhost:9093
listeners=PLAINTEXT://:9092,CONTROLLER://:9093
advertised.listeners=PLAINTEXT://localhost:9092
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
log.dirs=/var/lib/kafka/data
EOF
  # 22 base64 characters = 16 bytes; a final 'A' leaves no stray bits.
  CLUSTER_ID="${CLUSTER_ID:-$(tr -d - </proc/sys/kernel/random/uuid | head -c 21)A}"
else
  [ -n "${CLUSTER_ID:-}" ] || die "CLUSTER_ID is not set: every node of a cluster must be formatted with the same" \
                                  "KRaft cluster id (22 characters of URL-safe base64)"
  : >"$PROPS"
  for name in "${names[@]}"; do
    printf '%s=%s\n' "$(property_name "$name")" "${!name}" >>"$PROPS"
  done
  grep -q '^log\.dirs=' "$PROPS" || echo "log.dirs=/var/lib/kafka/data" >>"$PROPS"
fi
log "server.properties:"; sed 's/^/    /' "$PROPS"

# Kafka 4.x logs with Log4j2, 3.x with reload4j (log4j 1 API): pick by the jars present.
if compgen -G "$KAFKA_HOME/libs/log4j-core-*.jar" >/dev/null; then
  default_log4j="-Dlog4j2.configurationFile=$CONFIG_DIR/log4j2.properties"
else
  default_log4j="-Dlog4j.configuration=file:$CONFIG_DIR/log4j.properties"
fi
read -r -a heap <<<"${KAFKA_HEAP_OPTS:--Xmx512m -Xms512m}"
read -r -a perf <<<"${KAFKA_JVM_PERFORMANCE_OPTS:--XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true}"
read -r -a extra <<<"${KAFKA_GC_LOG_OPTS:-} ${KAFKA_JMX_OPTS:-} ${KAFKA_OPTS:-}"
read -r -a log4j <<<"${KAFKA_LOG4J_OPTS:-$default_log4j}"
classpath="$KAFKA_HOME/libs/*"

log "formatting the storage with cluster id $CLUSTER_ID (skipped when already formatted)"
java -Xmx128m -Xms128m "${log4j[@]}" -cp "$classpath" kafka.tools.StorageTool format \
  -t "$CLUSTER_ID" -c "$PROPS" --ignore-formatted || die "formatting the storage failed (see above)"

log "starting kafka.Kafka"
exec java "${heap[@]}" "${perf[@]}" "${extra[@]}" "${log4j[@]}" -cp "$classpath" kafka.Kafka "$PROPS"
