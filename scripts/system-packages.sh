#!/usr/bin/env bash
# Install the Debian packages kafkaproof needs, only when something is missing.
set -euo pipefail
need=()
command -v nft >/dev/null || need+=(nftables)
command -v ip >/dev/null || need+=(iproute2)
command -v tc >/dev/null || need+=(iproute2)
command -v mvn >/dev/null || need+=(maven)
command -v java >/dev/null || need+=(openjdk-17-jre-headless)
command -v chromium >/dev/null || need+=(chromium)
command -v curl >/dev/null || need+=(curl)
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || need+=(postgresql)  # the PostgreSQL tests' server
[ -e /usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1 ] || need+=(faketime)  # clock faults (libfaketime)
[ -e /usr/lib/x86_64-linux-gnu/libfuse3.so.3 ] || need+=(fuse3)  # disk faults (diskfs: FUSE with libfuse3)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "[setup] missing Debian packages: ${need[*]}; install them as root (apt-get install ${need[*]})" >&2
  exit 1
fi
echo "[setup] installing Debian packages: ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
