#!/usr/bin/env bash
# The Airflow UI on this checkout: `bash scripts/airflow-standalone.sh` (http://localhost:8080;
# it prints the admin password). Migrates the metadata database and creates the `kafka_cluster`
# pool the DAGs' cluster tasks use (one slot: one Kafka cluster per host), as `make run` does,
# then runs `airflow standalone` in the foreground.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/airflow-env.sh
airflow db migrate >/dev/null 2>&1 || airflow db migrate
airflow pools set kafka_cluster 1 "one Kafka cluster per host" >/dev/null
exec airflow standalone
