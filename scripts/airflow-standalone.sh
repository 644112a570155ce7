#!/usr/bin/env bash
# `make airflow`: Airflow's UI, scheduler and api-server for this checkout (`airflow standalone`, UI on
# :8080, its admin password in .airflow/simple_auth_manager_passwords.json.generated), with the
# database migrated and the one-slot `kafka_cluster` pool the DAGs' cluster tasks share.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/airflow-env.sh
airflow db migrate >/dev/null 2>&1 || airflow db migrate
airflow pools set kafka_cluster 1 "one Kafka cluster per host" >/dev/null
echo "[airflow] Airflow home $AIRFLOW_HOME; UI on http://localhost:$AIRFLOW__API__PORT"
exec airflow standalone
