#!/usr/bin/env bash
# Make a Docker engine available to kafkaproof and print the DOCKER_HOST to use (stdout, one line).
#
#   export DOCKER_HOST="$(bash scripts/docker-engine.sh)"
#
# Order: (1) $DOCKER_HOST if it answers `docker version`; (2) the default socket
# /var/run/docker.sock if it answers; (3) kafkaproof's own engine on
# unix:///run/kafkaproof-docker/docker.sock, started here if it is not running
# (installing Debian's docker.io, containerd and runc first when missing; needs root).
# An engine that already answers is never restarted, reconfigured or stopped.
# Progress goes to stderr; exit status 0 = an engine answers, 1 = it could not be made to.
set -euo pipefail

CACHE="${KAFKAPROOF_CACHE:-$HOME/.cache/kafkaproof}"
# A short, fixed exec root: containerd-shim puts unix sockets below it and a socket path
# may not exceed 108 bytes, which a path under a deep checkout easily would.
EXEC_ROOT=/run/kafkaproof-docker
SOCKET="$EXEC_ROOT/docker.sock"
OWN_HOST="unix://$SOCKET"
PIDFILE="$EXEC_ROOT/dockerd.pid"
DATA_ROOT="$CACHE/docker/data"
LOG="$CACHE/docker/dockerd.log"
START_TIMEOUT_S="${KAFKAPROOF_DOCKERD_TIMEOUT_S:-60}"

say() { echo "[docker-engine] $(date +%H:%M:%S) $*" >&2; }

answers() {  # answers HOST: does an engine answer there (within a few seconds)?
  command -v docker >/dev/null || return 1
  DOCKER_HOST="$1" timeout 10 docker version --format '{{.Server.Version}}' >/dev/null 2>&1
}

if [ -n "${DOCKER_HOST:-}" ]; then
  if answers "$DOCKER_HOST"; then echo "$DOCKER_HOST"; exit 0; fi
  # A user who set DOCKER_HOST meant that engine: starting another one would hide the mistake.
  say "DOCKER_HOST=$DOCKER_HOST does not answer \`docker version\`: start that engine, or unset DOCKER_HOST" \
      "to let kafkaproof start its own on $OWN_HOST"
  exit 1
fi
for host in unix:///var/run/docker.sock "$OWN_HOST"; do
  if answers "$host"; then echo "$host"; exit 0; fi
done

if [ "$(id -u)" -ne 0 ]; then
  say "no Docker engine answers and starting one needs root: run this script as root," \
      "or set DOCKER_HOST to an engine you can use"
  exit 1
fi

need=()
command -v dockerd >/dev/null || need+=(docker.io)
command -v containerd >/dev/null || need+=(containerd)
command -v runc >/dev/null || need+=(runc)
if [ ${#need[@]} -gt 0 ]; then
  say "installing Debian packages: ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # policy-rc.d refuses service starts: the package's own systemd/sysv unit would start a
  # second engine on /var/run/docker.sock with Docker's iptables rules, which we must not have.
  policy=/usr/sbin/policy-rc.d
  created_policy=0
  if [ ! -e "$policy" ]; then printf '#!/bin/sh\nexit 101\n' >"$policy"; chmod +x "$policy"; created_policy=1; fi
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null || {
    [ "$created_policy" = 1 ] && rm -f "$policy"; say "apt-get install ${need[*]} failed"; exit 1; }
  [ "$created_policy" = 1 ] && rm -f "$policy"
fi

mkdir -p "$EXEC_ROOT" "$DATA_ROOT" "$(dirname "$LOG")"
if [ -s "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null \
   && grep -q dockerd "/proc/$(cat "$PIDFILE")/cmdline" 2>/dev/null; then
  say "dockerd (pid $(cat "$PIDFILE")) is running but not answering yet; waiting"
else
  rm -f "$PIDFILE"
  say "starting dockerd on $OWN_HOST (data root $DATA_ROOT, log $LOG)"
  # Flags, and why:
  #  --iptables=false --ip6tables=false  Docker would otherwise install its own iptables
  #        chains and set the FORWARD policy to DROP, which breaks the routing between
  #        kafkaproof's network namespaces (the local backend) and changes the host firewall.
  #  --bridge=none  no default docker0 bridge: without iptables it would have no NAT, and
  #        kafkaproof only uses user-defined bridge networks with fixed subnets.
  #  --data-root   images/volumes in kafkaproof's cache (survives reboots, easy to delete),
  #        never /var/lib/docker, which belongs to a system engine.
  #  --exec-root --pidfile -H unix://  runtime state, pid file and socket of our own, so
  #        this engine can run beside a system one without sharing any path.
  #  --log-driver json-file  `docker logs` works (and is the default everywhere).
  setsid dockerd \
    --iptables=false --ip6tables=false --bridge=none \
    --data-root "$DATA_ROOT" --exec-root "$EXEC_ROOT" --pidfile "$PIDFILE" \
    -H "$OWN_HOST" --log-driver json-file \
    >>"$LOG" 2>&1 </dev/null &
  started_pid=$!
fi

deadline=$(( $(date +%s) + START_TIMEOUT_S ))
until answers "$OWN_HOST"; do
  if [ "$(date +%s)" -ge "$deadline" ]; then
    say "dockerd did not answer on $OWN_HOST within ${START_TIMEOUT_S}s; last lines of $LOG:"
    tail -n 15 "$LOG" >&2 || true
    exit 1
  fi
  if [ -n "${started_pid:-}" ] && ! kill -0 "$started_pid" 2>/dev/null; then
    say "dockerd exited; last lines of $LOG:"; tail -n 15 "$LOG" >&2 || true; exit 1
  fi
  sleep 0.5
done
say "dockerd answers on $OWN_HOST"
echo "$OWN_HOST"
