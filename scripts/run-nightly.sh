#!/usr/bin/env bash
# `make run`: bring the local cluster up, show its status, take it down.
# (Becomes the nightly DAG run once the pipeline exists.)
set -euo pipefail
K=".venv/bin/kafkaproof"
trap '$K cluster down --name makerun >/dev/null 2>&1 || true' EXIT
$K cluster up --name makerun
$K cluster status --name makerun
