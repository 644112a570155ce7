#!/usr/bin/env bash
# `make run`: run the nightly DAG once end to end (`airflow dags test`) on the embedded local cluster.
# SUITE selects the scenarios by tag (default: nightly), e.g. `make run SUITE=smoke`.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/airflow-env.sh
export KAFKAPROOF_SUITE="${SUITE:-nightly}"
echo "[run] Airflow home $AIRFLOW_HOME; suite '$KAFKAPROOF_SUITE':"
kafkaproof scenario list --tag "$KAFKAPROOF_SUITE" | sed 's/^/[run]   /'
airflow db migrate >/dev/null 2>&1 || airflow db migrate
airflow pools set kafka_cluster 1 "one Kafka cluster per host" >/dev/null
started=$(date +%s)
status=0
# Progress: each task as it starts, the runs' own progress lines, faults, and the gate's verdict.
airflow dags test kafka_reliability_nightly 2>&1 | tee "$AIRFLOW_HOME/last-run.log" \
  | grep --line-buffered -E "kafkaproof\.(run|faults)\.|\[DAG TEST\] starting task_id|new_state=failed|summary report|reliability gate|DagRun Finished" \
  | sed -u -E -e "s/^([0-9-]+T[0-9:]+)[^ ]* .*\[DAG TEST\] starting task_id=([^ ]+).*/[run] \1 task \2/" \
              -e "s/.*new_state=failed.*/[run]   (the task above failed; see the full log)/" \
  || true
grep -q "reliability gate passed" "$AIRFLOW_HOME/last-run.log" || status=1
echo "[run] finished in $(( $(date +%s) - started ))s; full log: $AIRFLOW_HOME/last-run.log"
summary=$(grep -o "summary report: .*" "$AIRFLOW_HOME/last-run.log" | tail -1 | cut -d' ' -f3)
[ -n "$summary" ] && echo "[run] summary report: $summary"
if [ $status -ne 0 ]; then
  echo "[run] the reliability gate FAILED (see the summary report and the gate's log above)"
fi
exit $status
