# Source after scripts/airflow-env.sh. `ensure_api_server` makes sure an Execution API answers at
# $AIRFLOW__CORE__EXECUTION_API_SERVER_URL: it uses one that already does (e.g. `airflow standalone`
# of this checkout, which shares the Airflow home and so the token secret), or starts
# `airflow api-server --apps execution` and stops it when the calling shell exits.
# Executor-run tasks (LocalExecutor, `airflow dags test --use-executor`) cannot run without it.

_kp_api_health() { curl -sf --max-time 2 "${AIRFLOW__CORE__EXECUTION_API_SERVER_URL%/}/health" >/dev/null 2>&1; }

ensure_api_server() {
  if _kp_api_health; then
    echo "[run] using the Airflow Execution API already at $AIRFLOW__CORE__EXECUTION_API_SERVER_URL"
    return 0
  fi
  local log="$AIRFLOW_HOME/api-server.log"
  airflow api-server --apps execution --port "$AIRFLOW__API__PORT" >"$log" 2>&1 &
  KP_API_SERVER_PID=$!
  trap 'kill "$KP_API_SERVER_PID" 2>/dev/null; wait "$KP_API_SERVER_PID" 2>/dev/null' EXIT
  local started=$SECONDS
  until _kp_api_health; do
    if ! kill -0 "$KP_API_SERVER_PID" 2>/dev/null || (( SECONDS - started > 120 )); then
      echo "[run] the Airflow api-server did not come up on port $AIRFLOW__API__PORT (set AIRFLOW__API__PORT" \
           "to a free port); its log, $log:" >&2
      tail -20 "$log" >&2
      return 1
    fi
    sleep 0.5
  done
  echo "[run] Airflow Execution API up at $AIRFLOW__CORE__EXECUTION_API_SERVER_URL in $(( SECONDS - started ))s"
}
