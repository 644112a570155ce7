# Source this (bash) to use Airflow with this checkout:  source scripts/airflow-env.sh
# Then: airflow standalone (UI on :8080), airflow dags test kafka_reliability_nightly, ...
_kp_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export AIRFLOW_HOME="${AIRFLOW_HOME:-$_kp_root/.airflow}"
export AIRFLOW_CONFIG="$_kp_root/airflow.cfg"
export AIRFLOW__CORE__DAGS_FOLDER="$_kp_root/dags"
export AIRFLOW__CORE__PLUGINS_FOLDER="$_kp_root/plugins"
export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN="${AIRFLOW__DATABASE__SQL_ALCHEMY_CONN:-sqlite:///$AIRFLOW_HOME/airflow.db}"
export AIRFLOW__LOGGING__BASE_LOG_FOLDER="$AIRFLOW_HOME/logs"
mkdir -p "$AIRFLOW_HOME"
# Tasks an executor runs report to the Execution API of an `airflow api-server` (`airflow standalone`
# starts one; `make run` starts its own, scripts/api-server.sh). Whoever signs the tasks' tokens and
# whoever checks them must share one secret: one per Airflow home, made once, readable only by you.
if [ -z "${AIRFLOW__API_AUTH__JWT_SECRET:-}" ]; then
  [ -s "$AIRFLOW_HOME/jwt-secret" ] || (umask 077 && head -c 32 /dev/urandom | base64 >"$AIRFLOW_HOME/jwt-secret")
  AIRFLOW__API_AUTH__JWT_SECRET="$(cat "$AIRFLOW_HOME/jwt-secret")"
  export AIRFLOW__API_AUTH__JWT_SECRET
fi
export AIRFLOW__API__PORT="${AIRFLOW__API__PORT:-8080}"
export AIRFLOW__CORE__EXECUTION_API_SERVER_URL="${AIRFLOW__CORE__EXECUTION_API_SERVER_URL:-http://127.0.0.1:$AIRFLOW__API__PORT/execution/}"
# Spark: local[2] by default; point it at a cluster with e.g. {"conn_type":"spark","host":"spark://host:7077"}.
# (JSON braces cannot sit inside ${VAR:-default}: a set variable would gain a stray '}'.)
if [ -z "${AIRFLOW_CONN_SPARK_DEFAULT:-}" ]; then
  export AIRFLOW_CONN_SPARK_DEFAULT='{"conn_type":"spark","host":"local[2]"}'
  # A local driver would bind to the host's first non-loopback address; it needs none.
  export SPARK_LOCAL_IP="${SPARK_LOCAL_IP:-127.0.0.1}"
fi
# An existing Kafka cluster for the manual DAG (its Extra JSON is the confluent-kafka client config).
[ -n "${AIRFLOW_CONN_KAFKA_DEFAULT:-}" ] || \
  export AIRFLOW_CONN_KAFKA_DEFAULT='{"conn_type":"kafka","extra":{"bootstrap.servers":"localhost:9092"}}'
export KAFKAPROOF_CACHE="${KAFKAPROOF_CACHE:-$_kp_root/.cache}"
export KAFKAPROOF_STATE="${KAFKAPROOF_STATE:-$_kp_root/.state}"
export KAFKAPROOF_RUNS="${KAFKAPROOF_RUNS:-$_kp_root/runs}"
# SparkSubmitOperator runs `spark-submit` from PATH.
case ":$PATH:" in *":$_kp_root/.venv/bin:"*) ;; *) export PATH="$_kp_root/.venv/bin:$PATH" ;; esac
unset _kp_root
# The cluster pools of the worker hosts (`kafkaproof hosts --pools`): one host (the default) is the one-slot
# `kafka_cluster`; with KAFKAPROOF_HOSTS=a,b one pool kafka_cluster_<host> each, KAFKAPROOF_HOST_SLOTS slots.
kafkaproof_pools() {
  local pools name slots description
  pools=$(kafkaproof hosts --pools) || return 1
  while IFS=$'\t' read -r name slots description; do
    airflow pools set "$name" "$slots" "$description" >/dev/null
  done <<<"$pools"
}
