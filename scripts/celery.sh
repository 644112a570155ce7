#!/usr/bin/env bash
# A Celery deployment of kafkaproof's Airflow on this machine (issue 42), standing in for several worker hosts:
#   scripts/celery.sh up | down | status | worker HOST
# up: Redis (Debian's redis-server) as the Celery broker, PostgreSQL (Debian's, run as the `postgres` user) as
# Airflow's metadata database and Celery's result backend, `airflow db migrate`, the hosts' pools, the
# api-server, the dag-processor, the scheduler, and one `airflow celery worker` per host of CELERY_HOSTS, each
# with its own KAFKAPROOF_HOST, KAFKAPROOF_STATE and queue kafkaproof-<host> (the first host also serves the
# default queue: collect, analyze, gate). Pids, logs, the database and the workers' state live in CELERY_DIR
# (default .celery/, gitignored); `source $CELERY_DIR/env.sh` gives a shell the deployment's Airflow CLI.
# down: stops what `up` started (by its pid files) and tears down the clusters in the hosts' state
# directories; nothing else. `worker HOST` starts (again) one host's worker, e.g. after it died.
# Settings (environment): CELERY_HOSTS (default "w1 w2"), CELERY_DIR, CELERY_REDIS_PORT (6390), CELERY_PG_PORT
# (5440), CELERY_API_PORT (8095), CELERY_CONCURRENCY (4 task slots per worker); anything else exported at `up`
# (KAFKAPROOF_SUITE, KAFKAPROOF_REUSE_CLUSTERS, KAFKAPROOF_RUNS, ...) reaches every component.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CELERY_DIR="$(mkdir -p "${CELERY_DIR:-$ROOT/.celery}" && cd "${CELERY_DIR:-$ROOT/.celery}" && pwd)"
CELERY_HOSTS="${CELERY_HOSTS:-w1 w2}"
REDIS_PORT="${CELERY_REDIS_PORT:-6390}"
PG_PORT="${CELERY_PG_PORT:-5440}"
API_PORT="${CELERY_API_PORT:-8095}"
CONCURRENCY="${CELERY_CONCURRENCY:-4}"
PIDS="$CELERY_DIR/pids" LOGS="$CELERY_DIR/logs" PGDATA="$CELERY_DIR/pg/data"
mkdir -p "$PIDS" "$LOGS"

say() { echo "[celery] $*" >&2; }
die() { say "$*"; exit 1; }
pg_bin() { compgen -G "/usr/lib/postgresql/*/bin/pg_ctl" | sort -V | tail -1 | xargs -r dirname; }
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }  # PostgreSQL refuses root
alive() { [ -s "$PIDS/$1.pid" ] && kill -0 "$(cat "$PIDS/$1.pid")" 2>/dev/null; }
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# wait_until SECONDS WHAT COMMAND...: poll COMMAND every second, fail naming WHAT and its log after SECONDS.
wait_until() {
  local limit=$1 what=$2; shift 2
  local started=$SECONDS
  until "$@"; do
    if (( SECONDS - started > limit )); then
      say "$what did not come up within ${limit}s; its log:"; tail -20 "$LOGS/$what.log" >&2 || true; return 1
    fi
    sleep 1
  done
}

write_env() {
  local conn="postgresql+psycopg2://kafkaproof@127.0.0.1:$PG_PORT/airflow"
  cat >"$CELERY_DIR/env.sh" <<EOF
# The environment of the Celery deployment in $CELERY_DIR (written by scripts/celery.sh up)
export AIRFLOW_HOME="$CELERY_DIR/airflow"
export AIRFLOW__API__PORT="$API_PORT"
export AIRFLOW__CORE__EXECUTION_API_SERVER_URL="http://127.0.0.1:$API_PORT/execution/"
source "$ROOT/scripts/airflow-env.sh"
export AIRFLOW__CORE__EXECUTOR=CeleryExecutor
export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN="$conn"
export AIRFLOW__CELERY__BROKER_URL="redis://127.0.0.1:$REDIS_PORT/0"
export AIRFLOW__CELERY__RESULT_BACKEND="db+postgresql+psycopg2://kafkaproof@127.0.0.1:$PG_PORT/airflow"
export AIRFLOW__CELERY__WORKER_CONCURRENCY="$CONCURRENCY"
# the task instances' hostname is the kafkaproof host (KAFKAPROOF_HOST), not the machine's one address
export AIRFLOW__CORE__HOSTNAME_CALLABLE=kafkaproof.paths.this_host
export KAFKAPROOF_HOSTS="$(echo $CELERY_HOSTS | tr ' ' ',')"
export CELERY_DIR="$CELERY_DIR"
EOF
}

# start NAME COMMAND...: COMMAND in a session of its own (its pid is its process group), logged, pid-filed.
start() {
  local name=$1; shift
  alive "$name" && { say "$name already runs (pid $(cat "$PIDS/$name.pid"))"; return 0; }
  setsid "$@" >"$LOGS/$name.log" 2>&1 </dev/null &
  echo $! >"$PIDS/$name.pid"
}

# stop NAME: SIGTERM to its process group, SIGKILL after 60 s.
stop() {
  local name=$1 pid
  [ -s "$PIDS/$name.pid" ] || return 0
  pid=$(cat "$PIDS/$name.pid")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM -- "-$pid" 2>/dev/null || true
    for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    kill -KILL -- "-$pid" 2>/dev/null || true
  fi
  rm -f "$PIDS/$name.pid"
  say "stopped $name"
}

redis_up() {
  command -v redis-server >/dev/null || die "no redis-server: apt-get install redis-server (make celery-setup)"
  alive redis && return 0
  port_busy "$REDIS_PORT" && die "port $REDIS_PORT (CELERY_REDIS_PORT) is taken by another process"
  start redis redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$CELERY_DIR"
  wait_until 30 redis port_busy "$REDIS_PORT"
}

pg_up() {
  local bin; bin=$(pg_bin)
  [ -n "$bin" ] || die "no PostgreSQL: apt-get install postgresql (make celery-setup)"
  if [ ! -s "$PGDATA/PG_VERSION" ]; then
    mkdir -p "$PGDATA"
    [ "$(id -u)" = 0 ] && chown -R postgres "$CELERY_DIR/pg"
    as_pg test -w "$PGDATA" || die "the postgres user cannot write $PGDATA (a parent directory not readable by others?)"
    as_pg "$bin/initdb" -D "$PGDATA" -U kafkaproof --auth=trust -E UTF8 >"$LOGS/initdb.log" 2>&1 ||
      { tail -20 "$LOGS/initdb.log" >&2; die "initdb failed"; }
  fi
  if ! as_pg "$bin/pg_ctl" -D "$PGDATA" status >/dev/null 2>&1; then
    port_busy "$PG_PORT" && die "port $PG_PORT (CELERY_PG_PORT) is taken by another process"
    touch "$LOGS/postgres.log" && { [ "$(id -u)" != 0 ] || chown postgres "$LOGS/postgres.log"; }
    as_pg "$bin/pg_ctl" -D "$PGDATA" -l "$LOGS/postgres.log" -w -t 60 \
      -o "-c listen_addresses=127.0.0.1 -p $PG_PORT -k $CELERY_DIR/pg" start >/dev/null
  fi
  as_pg "$bin/psql" -h 127.0.0.1 -p "$PG_PORT" -U kafkaproof -d postgres -tAc \
    "select 1 from pg_database where datname='airflow'" | grep -q 1 ||
    as_pg "$bin/createdb" -h 127.0.0.1 -p "$PG_PORT" -U kafkaproof airflow
}

api_health() { curl -sf --max-time 2 "http://127.0.0.1:$API_PORT/execution/health" >/dev/null 2>&1; }

worker_up() {
  local host=$1 queues="kafkaproof-$1"
  [ "$host" = "$(set -- $CELERY_HOSTS; echo "$1")" ] && queues="$queues,${AIRFLOW__OPERATORS__DEFAULT_QUEUE:-default}"
  mkdir -p "$CELERY_DIR/state-$host"
  # --skip-serve-logs: two workers of one machine would both bind the log server's port; the api-server
  # reads the task logs from the shared AIRFLOW_HOME here (on real hosts: remote logging, or serve them)
  start "worker-$host" env KAFKAPROOF_HOST="$host" KAFKAPROOF_STATE="$CELERY_DIR/state-$host" \
    airflow celery worker --queues "$queues" --concurrency "$CONCURRENCY" --celery-hostname "$host@%h" \
    --skip-serve-logs
  wait_until 180 "worker-$host" grep -q "ready\." "$LOGS/worker-$host.log"
  say "worker $host up (queues $queues, state $CELERY_DIR/state-$host)"
}

up() {
  python -c "import airflow.providers.celery, redis" 2>/dev/null ||
    die "the Celery provider is not installed: make celery-setup (pip install -r requirements-celery.txt -c constraints.txt)"
  write_env
  # shellcheck disable=SC1091
  source "$CELERY_DIR/env.sh"
  redis_up
  pg_up
  say "Redis on :$REDIS_PORT, PostgreSQL on :$PG_PORT; migrating Airflow's database"
  timeout 600 airflow db migrate >"$LOGS/db-migrate.log" 2>&1 || { tail -20 "$LOGS/db-migrate.log" >&2; die "airflow db migrate failed"; }
  timeout 300 bash -c "source '$CELERY_DIR/env.sh' && kafkaproof_pools" || die "creating the hosts' pools failed"
  if ! alive api-server; then
    port_busy "$API_PORT" && die "port $API_PORT (CELERY_API_PORT) is taken by another process"
    start api-server airflow api-server --port "$API_PORT"
  fi
  wait_until 180 api-server api_health
  start dag-processor airflow dag-processor
  start scheduler airflow scheduler
  for host in $CELERY_HOSTS; do worker_up "$host"; done
  say "up: UI and API on http://127.0.0.1:$API_PORT (password in $AIRFLOW_HOME/simple_auth_manager_passwords.json.generated); source $CELERY_DIR/env.sh to use it"
}

down() {
  local name host bin
  for host in $CELERY_HOSTS; do stop "worker-$host"; done
  for name in scheduler dag-processor api-server redis; do stop "$name"; done
  for f in "$PIDS"/worker-*.pid; do [ -e "$f" ] && stop "$(basename "$f" .pid)"; done
  bin=$(pg_bin)
  if [ -n "$bin" ] && [ -s "$PGDATA/PG_VERSION" ] && as_pg "$bin/pg_ctl" -D "$PGDATA" status >/dev/null 2>&1; then
    as_pg "$bin/pg_ctl" -D "$PGDATA" -m fast -w -t 60 stop >/dev/null && say "stopped postgres"
  fi
  # the clusters the workers' tasks left (a killed task tears nothing down): only those of this deployment
  for state in "$CELERY_DIR"/state-*; do
    [ -d "$state" ] || continue
    KAFKAPROOF_STATE="$state" timeout 300 python -m kafkaproof cluster down --all >/dev/null ||
      say "kafkaproof cluster down --all failed in $state"
  done
}

status() {
  local name rc=0 bin
  for name in redis api-server dag-processor scheduler $(for h in $CELERY_HOSTS; do echo "worker-$h"; done); do
    if alive "$name"; then echo "$name: up (pid $(cat "$PIDS/$name.pid"))"; else echo "$name: down"; rc=1; fi
  done
  bin=$(pg_bin)
  if [ -n "$bin" ] && [ -s "$PGDATA/PG_VERSION" ] && as_pg "$bin/pg_ctl" -D "$PGDATA" status >/dev/null 2>&1; then
    echo "postgres: up (port $PG_PORT)"
  else
    echo "postgres: down"; rc=1
  fi
  return $rc
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) status ;;
  worker)
    [ -n "${2:-}" ] || die "usage: scripts/celery.sh worker HOST (one of: $CELERY_HOSTS)"
    [ -s "$CELERY_DIR/env.sh" ] || die "no deployment in $CELERY_DIR: scripts/celery.sh up first"
    # shellcheck disable=SC1091
    source "$CELERY_DIR/env.sh"
    worker_up "$2" ;;
  *) die "usage: scripts/celery.sh up|down|status|worker HOST" ;;
esac
