#!/usr/bin/env bash
# Make `docker compose` (the Compose v2+ CLI plugin) work, building it once from the Go module
# proxy when no plugin is installed:
#
#   bash scripts/docker-compose-cli.sh        # prints e.g. "Docker Compose version v5.6.0"
#
# An existing `docker compose` (Docker Desktop, docker-compose-plugin, ...) is used as is.
# Otherwise the pinned release is built with the local Go toolchain (no prebuilt binary is
# downloaded) into $KAFKAPROOF_CACHE/docker/compose/<version>/docker-compose, and linked as
# the plugin ${DOCKER_CONFIG:-~/.docker}/cli-plugins/docker-compose. The Go module and
# build caches are deleted after a successful build (about 1 GB); the binary stays cached.
# Debian's Python docker-compose 1.29 is not used: it is end-of-life, it is the
# `docker-compose` command rather than `docker compose`, and it rejects the top-level `name:`
# our compose files carry.
# Variables: KAFKAPROOF_COMPOSE_VERSION (default v5.6.0; v2.x selects the /v2 module line).
# Exit status: 0 `docker compose` works, 1 it could not be made to.
set -euo pipefail

# v5.6.0: the newest release whose go.mod asks for no newer Go than the installed 1.26.8
# (v5.7.0 needs 1.26.10, and we do not let Go download toolchains).
VERSION="${KAFKAPROOF_COMPOSE_VERSION:-v5.6.0}"
CACHE="${KAFKAPROOF_CACHE:-$HOME/.cache/kafkaproof}"
PLUGIN_DIR="${DOCKER_CONFIG:-$HOME/.docker}/cli-plugins"
TARGET="$CACHE/docker/compose/$VERSION/docker-compose"

say() { echo "[docker-compose-cli] $(date +%H:%M:%S) $*" >&2; }
fail() { say "$*"; exit 1; }

[[ "$VERSION" =~ ^v([0-9]+)\.[0-9]+\.[0-9]+$ ]] || fail "KAFKAPROOF_COMPOSE_VERSION=$VERSION is not of the form vX.Y.Z"
major="${BASH_REMATCH[1]}"
[ "$major" -ge 2 ] || fail "Compose $VERSION: kafkaproof needs Compose v2 or newer (the \`docker compose\` plugin)"
MODULE="github.com/docker/compose/v$major"
command -v docker >/dev/null || fail "no docker CLI: run scripts/docker-engine.sh first (it installs docker.io)"

if current="$(docker compose version 2>/dev/null)" && [[ "$current" =~ v([0-9]+)\. ]] && [ "${BASH_REMATCH[1]}" -ge 2 ]; then
  echo "$current"
  exit 0
fi

mkdir -p "$(dirname "$TARGET")"
exec 9>"$(dirname "$TARGET")/.lock"
flock 9
if [ ! -x "$TARGET" ]; then
  command -v go >/dev/null || fail "no Go toolchain to build Compose $VERSION: install Go (1.26 here), or install" \
                                  "the docker-compose plugin (v2+) yourself"
  export GOMODCACHE="$CACHE/go/mod" GOCACHE="$CACHE/go/build" GOTOOLCHAIN=local CGO_ENABLED=0
  say "building Compose $VERSION ($MODULE) with $(go version | cut -d' ' -f3); a few minutes the first time"
  t0=$(date +%s)
  # `go install module/cmd@version` refuses modules whose go.mod has replace/exclude directives
  # (compose's has), so download the module and build it as the main module instead.
  dir="$(go mod download -json "$MODULE@$VERSION" | awk -F'"' '/"Dir":/ {print $4}')"
  [ -n "$dir" ] || fail "could not download $MODULE@$VERSION from the Go module proxy ($(go env GOPROXY)):" \
                        "$(go mod download -json "$MODULE@$VERSION" 2>&1 | grep -m1 Error || true)"
  (cd "$dir" && go build -trimpath -ldflags "-w -s -X $MODULE/internal.Version=$VERSION" -o "$TARGET.tmp" ./cmd) \
    || fail "go build of Compose $VERSION failed (see above)"
  mv "$TARGET.tmp" "$TARGET"
  say "built $TARGET in $(( $(date +%s) - t0 )) s"
  go clean -cache >/dev/null 2>&1 || true
  go clean -modcache >/dev/null 2>&1 || true
fi

mkdir -p "$PLUGIN_DIR"
link="$PLUGIN_DIR/docker-compose"
if [ -e "$link" ] && ! [ -L "$link" ]; then
  fail "$link exists but \`docker compose version\` fails with it: remove or fix it, then run this again"
fi
ln -sfn "$TARGET" "$link"
docker compose version || fail "\`docker compose\` still does not work after linking $link -> $TARGET"
