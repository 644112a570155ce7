#!/usr/bin/env bash
# Build (once) an application image from kafkaproof's base image and a directory of runnable jars,
# without any registry (the example application's image, issue 39):
#
#   bash scripts/docker-app-image.sh JAR_DIR IMAGE    # prints IMAGE on stdout
#
# The image is kafkaproof/base:bookworm (Java 17; scripts/docker-image.sh --base builds it) with every
# JAR_DIR/*.jar copied to /app/, working directory /app and no entrypoint: a scenario's `command:` runs
# `java -jar /app/<service>.jar ...`. It carries the label io.kafkaproof.content-hash (the base image's
# id and the jars' hashes): an image with the expected hash is reused, otherwise it is rebuilt.
# Uses $DOCKER_HOST, or the engine scripts/docker-engine.sh finds or starts. Progress goes to stderr.
# Exit status: 0 the image exists, 1 it could not be built, 2 wrong usage.
set -euo pipefail

JAR_DIR="${1:-}"
IMAGE="${2:-}"
if [ -z "$JAR_DIR" ] || [ -z "$IMAGE" ] || [ ! -d "$JAR_DIR" ]; then
  echo "usage: $0 JAR_DIR IMAGE   (e.g. \$KAFKAPROOF_CACHE/example-app/<hash> kafkaproof/signup-app:<hash>)" >&2
  exit 2
fi
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${KAFKAPROOF_CACHE:-$HOME/.cache/kafkaproof}"
WORK="$CACHE/docker"
BASE_IMAGE=kafkaproof/base:bookworm
HASH_LABEL=io.kafkaproof.content-hash

say() { echo "[docker-app-image] $(date +%H:%M:%S) $*" >&2; }
fail() { say "$*"; exit 1; }
label_of() { docker image inspect -f "{{ index .Config.Labels \"$HASH_LABEL\" }}" "$1" 2>/dev/null || true; }

if [ -z "${DOCKER_HOST:-}" ]; then
  DOCKER_HOST="$(bash "$REPO/scripts/docker-engine.sh")" || fail "no Docker engine (see above)"
fi
export DOCKER_HOST
shopt -s nullglob
jars=("$JAR_DIR"/*.jar)
[ ${#jars[@]} -gt 0 ] || fail "no *.jar in $JAR_DIR"
bash "$REPO/scripts/docker-image.sh" --base >/dev/null || fail "could not build $BASE_IMAGE (see above)"
mkdir -p "$WORK"
exec 9>"$WORK/app-image.lock"
flock 9

base_id="$(docker image inspect -f '{{.Id}}' "$BASE_IMAGE")"
want="$( { echo "$base_id"; (cd "$JAR_DIR" && sha256sum -- *.jar); } | sha256sum | cut -c1-16)"
if [ "$(label_of "$IMAGE")" = "$want" ]; then
  say "$IMAGE is up to date ($HASH_LABEL=$want)"
  echo "$IMAGE"
  exit 0
fi
ctx="$(mktemp -d "$WORK/app-context.XXXXXX")"
# shellcheck disable=SC2064  # expand now: the path is fixed
trap "rm -rf '$ctx'" EXIT
mkdir "$ctx/app"
cp -l "${jars[@]}" "$ctx/app/" 2>/dev/null || cp "${jars[@]}" "$ctx/app/"
cat >"$ctx/Dockerfile" <<DOCKERFILE
FROM $BASE_IMAGE
LABEL org.opencontainers.image.description="an application's jars on kafkaproof's base image (Java 17)"
COPY app/ /app/
WORKDIR /app
CMD ["java", "-version"]
DOCKERFILE
say "building $IMAGE from ${#jars[@]} jar(s) in $JAR_DIR"
docker build --label "$HASH_LABEL=$want" -t "$IMAGE" "$ctx" >"$WORK/build-app-image.log" 2>&1 \
  || { tail -n 20 "$WORK/build-app-image.log" >&2; fail "docker build of $IMAGE failed (full log: $WORK/build-app-image.log)"; }
say "built $IMAGE"
echo "$IMAGE"
