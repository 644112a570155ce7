#!/usr/bin/env bash
# `make run`: run the nightly DAG once end to end on the embedded local cluster, its tasks on
# Airflow's LocalExecutor (`airflow dags test --use-executor`): a scenario's fault tasks run beside
# its workload, so the executor's tasks need the Execution API of an api-server (scripts/api-server.sh).
# SUITE selects the scenarios by tag (default: nightly), e.g. `make run SUITE=smoke`.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/airflow-env.sh
source scripts/api-server.sh
export KAFKAPROOF_SUITE="${SUITE:-nightly}"
echo "[run] Airflow home $AIRFLOW_HOME; suite '$KAFKAPROOF_SUITE':"
kafkaproof scenario list --tag "$KAFKAPROOF_SUITE" | sed 's/^/[run]   /'
airflow db migrate >/dev/null 2>&1 || airflow db migrate
kafkaproof_pools
ensure_api_server
started=$(date +%s)
status=0
# Progress: the runs' own progress lines and faults, each task as it finishes, and the gate's verdict.
airflow dags test kafka_reliability_nightly --use-executor 2>&1 | tee "$AIRFLOW_HOME/last-run.log" \
  | grep --line-buffered -E "\[kafkaproof\.(run|faults|pipeline)\.?[a-z_.]*\]|TaskInstance Finished|\[task\.stdout\]|DagRun Finished" \
  | sed -u -E \
      -e 's/^[0-9-]+[ T]([0-9:]+)[^ ]* +\[[a-z ]+\] +(.*[^ ]) +\[(kafkaproof\.[a-z_.]+|task\.stdout)\].*/[run] \1 \2/' \
      -e 's/^[0-9-]+[ T]([0-9:]+)[^ ]* .*TaskInstance Finished: dag_id=[^,]*, task_id=([^,]+),.* map_index=(-?[0-9]+),.* run_duration=([0-9]+)[.0-9]*, state=([a-z_]+).*/[run] \1 task \2[\3] \5 (\4 s)/' \
      -e 's/\[-1\] / /' \
      -e 's/^[0-9-]+[ T]([0-9:]+)[^ ]* .*DagRun Finished: .* state=([a-z_]+).*/[run] \1 DAG run \2/' \
  || true
grep -q "reliability gate passed" "$AIRFLOW_HOME/last-run.log" || status=1
echo "[run] finished in $(( $(date +%s) - started ))s; full log: $AIRFLOW_HOME/last-run.log"
summary=$(grep -o "summary report: [^ ]*" "$AIRFLOW_HOME/last-run.log" | tail -1 | cut -d' ' -f3)
[ -n "$summary" ] && echo "[run] summary report: $summary"
if [ $status -ne 0 ]; then
  echo "[run] the reliability gate FAILED (see the summary report and the gate's lines above)"
fi
exit $status
