#!/usr/bin/env bash
# `make airflow`: Airflow's UI, scheduler and api-server for this checkout (`airflow standalone`, UI on
# :8080, its admin password in .airflow/simple_auth_manager_passwords.json.generated), with the
# database migrated and the one-slot `kafka_cluster` pool the DAGs' cluster tasks share (with several worker
# hosts, KAFKAPROOF_HOSTS, a pool per host: `kafkaproof_pools`, scripts/airflow-env.sh). Stopping it
# (Ctrl-C, SIGTERM) also tears down the pipeline clusters its DAG runs started: their tasks died with it.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/airflow-env.sh
airflow db migrate >/dev/null 2>&1 || airflow db migrate
kafkaproof_pools
echo "[airflow] Airflow home $AIRFLOW_HOME; UI on http://localhost:$AIRFLOW__API__PORT"
# `airflow standalone` stops its components only on SIGINT (SIGTERM kills it alone and leaves its scheduler
# and api-server running), and a background job of a script starts with SIGINT ignored: restore it, and
# turn a SIGTERM into the SIGINT Ctrl-C sends the whole terminal group.
python -c 'import os, signal; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execvp("airflow", ["airflow", "standalone"])' &
standalone=$!
trap 'kill -INT "$standalone" 2>/dev/null || true' TERM
trap ':' INT
wait "$standalone" || true
wait "$standalone" 2>/dev/null || true  # a trapped signal ends the first wait before Airflow is down
python - <<'PY'
import os
from kafkaproof.pipeline import release_airflow_clusters
released = release_airflow_clusters(os.environ["AIRFLOW_HOME"])
print(f"[airflow] stopped; tore down the clusters of its DAG runs: {', '.join(released)}" if released else
      "[airflow] stopped; none of its DAG runs had a cluster up")
PY
