#!/usr/bin/env bash
# Build (once) the Kafka image kafkaproof's compose files use by default, without any registry:
#
#   bash scripts/docker-image.sh 4.3.1      # prints kafkaproof/kafka:4.3.1 on stdout
#   bash scripts/docker-image.sh --base     # only the base (also the tools image of network faults)
#   bash scripts/docker-image.sh --app JAR_DIR IMAGE   # an application's jars on the base (prints IMAGE)
#
# 1. kafkaproof/base:bookworm: a Debian bookworm minbase root filesystem (debootstrap, from the
#    Debian mirror apt uses here) with a Java 17 JRE, iproute2, nftables and procps, imported
#    with `docker import`. It does not depend on the Kafka version.
# 2. kafkaproof/kafka:<version>: compose/image/Dockerfile FROM the base, adding the Kafka jars
#    that `make setup` resolved from Maven Central ($KAFKAPROOF_CACHE/kafka/<version>/libs)
#    and compose/image/entrypoint.sh (configured through the environment like apache/kafka).
# 3. --app: IMAGE (e.g. kafkaproof/signup-app:<hash>, the example application's, issue 39) FROM the
#    base with every JAR_DIR/*.jar at /app/, working directory /app, no entrypoint: a scenario's
#    `command:` runs `java -jar /app/<service>.jar ...`.
#
# Each image carries the label io.kafkaproof.content-hash: the hash of what it was built from.
# An image with the expected hash is reused; otherwise it is rebuilt. Uses $DOCKER_HOST, or
# the engine scripts/docker-engine.sh finds or starts. Progress goes to stderr.
# Exit status: 0 the image exists, 1 it could not be built, 2 wrong usage.
set -euo pipefail

VERSION="${1:-}"
APP_JARS="${2:-}"
APP_IMAGE="${3:-}"
if ! [[ "$VERSION" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ || "$VERSION" == --base ||
        ( "$VERSION" == --app && -d "$APP_JARS" && -n "$APP_IMAGE" ) ]]; then
  echo "usage: $0 KAFKA_VERSION | --base | --app JAR_DIR IMAGE   (e.g. 4.3.1 or 3.9.2)" >&2
  exit 2
fi
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE="${KAFKAPROOF_CACHE:-$HOME/.cache/kafkaproof}"
WORK="$CACHE/docker"
BASE_IMAGE=kafkaproof/base:bookworm
IMAGE="kafkaproof/kafka:$VERSION"
HASH_LABEL=io.kafkaproof.content-hash
SUITE=bookworm
PACKAGES=openjdk-17-jre-headless,iproute2,nftables,procps
# Bump when the way the base is made changes (the hash then forces a rebuild).
BASE_RECIPE="debootstrap --variant=minbase --include=$PACKAGES $SUITE; cleaned; recipe 1"
IMAGE_FILES=(Dockerfile entrypoint.sh log4j2.properties log4j.properties)

say() { echo "[docker-image] $(date +%H:%M:%S) $*" >&2; }
fail() { say "$*"; exit 1; }
hash_of() { sha256sum | cut -c1-16; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
label_of() { docker image inspect -f "{{ index .Config.Labels \"$HASH_LABEL\" }}" "$1" 2>/dev/null || true; }

if [ -z "${DOCKER_HOST:-}" ]; then
  DOCKER_HOST="$(bash "$REPO/scripts/docker-engine.sh")" || fail "no Docker engine (see above)"
fi
export DOCKER_HOST
mkdir -p "$WORK"
# Two builds of the same image at once would both debootstrap; the second waits and reuses.
exec 9>"$WORK/image.lock"
flock 9

debian_mirror() {  # the Debian mirror apt uses for $SUITE (deb822 .sources or one-line .list)
  if [ -n "${KAFKAPROOF_DEBIAN_MIRROR:-}" ]; then echo "$KAFKAPROOF_DEBIAN_MIRROR"; return; fi
  local files=() f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] && files+=("$f")
  done
  [ ${#files[@]} -gt 0 ] || return 1
  awk -v suite="$SUITE" '
    FNR == 1 { flush() }
    function flush() { if (uris != "" && (" " suites " ") ~ (" " suite " ") && !found) { split(uris, u, " "); print u[1]; found = 1 } uris = ""; suites = "" }
    FILENAME ~ /\.sources$/ {
      if ($0 ~ /^[[:space:]]*$/) { flush(); next }
      if ($1 == "URIs:") { uris = $2 }
      if ($1 == "Suites:") { $1 = ""; suites = $0 }
      next
    }
    /^deb[[:space:]]/ {
      line = $0; sub(/\[[^]]*\]/, "", line); n = split(line, w, /[[:space:]]+/)
      if (n >= 3 && w[3] == suite && !found) { print w[2]; found = 1 }
    }
    END { flush() }
  ' "${files[@]}" | head -n 1
}

build_base() {
  local want="$1" mirror rootfs t0
  command -v debootstrap >/dev/null || {
    [ "$(id -u)" -eq 0 ] || fail "debootstrap is missing: apt-get install debootstrap (as root)"
    say "installing debootstrap"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null \
      || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null; } \
      || fail "could not install debootstrap"
  }
  [ "$(id -u)" -eq 0 ] || fail "debootstrap needs root to build $BASE_IMAGE"
  mirror="$(debian_mirror)" || true
  [ -n "$mirror" ] || fail "no Debian mirror for $SUITE in /etc/apt/sources.list{,.d/*}: set KAFKAPROOF_DEBIAN_MIRROR=http://.../debian"
  rootfs="$(mktemp -d "$WORK/rootfs.XXXXXX")"
  # shellcheck disable=SC2064  # expand now: the path is fixed
  trap "rm -rf '$rootfs'" EXIT
  say "debootstrap $SUITE (minbase + $PACKAGES) from $mirror into $rootfs"
  t0=$(now)
  debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$rootfs" "$mirror" >"$WORK/debootstrap.log" 2>&1 \
    || { tail -n 20 "$WORK/debootstrap.log" >&2; fail "debootstrap failed (full log: $WORK/debootstrap.log)"; }
  say "debootstrap took $(since "$t0") s ($(du -sh "$rootfs" | cut -f1))"
  # Package caches and docs are of no use in a container and half the import time.
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* \
         "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/*
  t0=$(now)
  tar --numeric-owner -C "$rootfs" -c . | docker import \
    --change "LABEL $HASH_LABEL=$want" \
    --change "LABEL org.opencontainers.image.description=\"Debian $SUITE minbase with $PACKAGES (debootstrap)\"" \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["/bin/bash"]' \
    - "$BASE_IMAGE" >/dev/null || fail "docker import of the root filesystem failed"
  say "docker import took $(since "$t0") s"
  rm -rf "$rootfs"
  trap - EXIT
}

kafka_libs() {  # the jars of $VERSION: $KAFKA_HOME/libs when it holds that version, else the Maven install
  if [ -n "${KAFKA_HOME:-}" ] && [ -f "$KAFKA_HOME/libs/kafka_2.13-$VERSION.jar" ]; then echo "$KAFKA_HOME/libs"; return; fi
  local libs="$CACHE/kafka/$VERSION/libs"
  if [ ! -f "$CACHE/kafka/$VERSION/.complete" ]; then
    # A checkout's .venv, else (this script packaged in an installed kafkaproof) the CLI on PATH.
    local cli=("$REPO/.venv/bin/python" -m kafkaproof)
    [ -x "${cli[0]}" ] || cli=(kafkaproof)
    command -v "${cli[0]}" >/dev/null || fail "Kafka $VERSION is not installed in $CACHE/kafka: run \`make setup\`" \
                                              "(or kafkaproof install-kafka --kafka-version $VERSION)"
    say "installing Kafka $VERSION from Maven Central"
    "${cli[@]}" install-kafka --kafka-version "$VERSION" >&2 \
      || fail "could not install Kafka $VERSION (see above)"
  fi
  echo "$libs"
}

base_want="$(printf '%s' "$BASE_RECIPE" | hash_of)"
if [ "$(label_of "$BASE_IMAGE")" = "$base_want" ]; then
  say "$BASE_IMAGE is up to date ($HASH_LABEL=$base_want)"
else
  build_base "$base_want"
fi
if [ "$VERSION" = --base ]; then
  echo "$BASE_IMAGE"
  exit 0
fi

build_app() {  # IMAGE from the base and the jars of JAR_DIR, unless it is there with the same content
  local jars=("$APP_JARS"/*.jar) want ctx
  [ -f "${jars[0]}" ] || fail "no *.jar in $APP_JARS"
  want="$( { docker image inspect -f '{{.Id}}' "$BASE_IMAGE"; (cd "$APP_JARS" && sha256sum -- *.jar); } | hash_of)"
  if [ "$(label_of "$APP_IMAGE")" = "$want" ]; then
    say "$APP_IMAGE is up to date ($HASH_LABEL=$want)"
    return
  fi
  ctx="$(mktemp -d "$WORK/app-context.XXXXXX")"
  # shellcheck disable=SC2064  # expand now: the path is fixed
  trap "rm -rf '$ctx'" EXIT
  mkdir "$ctx/app"
  cp -l "${jars[@]}" "$ctx/app/" 2>/dev/null || cp "${jars[@]}" "$ctx/app/"
  printf '%s\n' "FROM $BASE_IMAGE" "COPY app/ /app/" "WORKDIR /app" 'CMD ["java", "-version"]' >"$ctx/Dockerfile"
  say "building $APP_IMAGE from ${#jars[@]} jar(s) in $APP_JARS"
  docker build --label "$HASH_LABEL=$want" -t "$APP_IMAGE" "$ctx" >"$WORK/build-app.log" 2>&1 \
    || { tail -n 20 "$WORK/build-app.log" >&2; fail "docker build of $APP_IMAGE failed (full log: $WORK/build-app.log)"; }
  say "built $APP_IMAGE"
}
if [ "$VERSION" = --app ]; then
  build_app
  echo "$APP_IMAGE"
  exit 0
fi

libs="$(kafka_libs)"
base_id="$(docker image inspect -f '{{.Id}}' "$BASE_IMAGE")"
image_want="$( { echo "$VERSION $base_id"; (cd "$REPO/compose/image" && sha256sum "${IMAGE_FILES[@]}");
                 (cd "$libs" && sha256sum -- *.jar); } | hash_of)"
if [ "$(label_of "$IMAGE")" = "$image_want" ]; then
  say "$IMAGE is up to date ($HASH_LABEL=$image_want)"
  echo "$IMAGE"
  exit 0
fi

ctx="$(mktemp -d "$WORK/context.XXXXXX")"
# shellcheck disable=SC2064
trap "rm -rf '$ctx'" EXIT
cp -al "$libs" "$ctx/libs" 2>/dev/null || cp -a "$libs" "$ctx/libs"  # hard links when on one file system
for f in "${IMAGE_FILES[@]}"; do cp "$REPO/compose/image/$f" "$ctx/"; done
say "building $IMAGE from $libs ($(find "$libs" -name "*.jar" | wc -l) jars)"
t0=$(now)
docker build --label "$HASH_LABEL=$image_want" --build-arg "KAFKA_VERSION=$VERSION" \
  --build-arg "BASE_IMAGE=$BASE_IMAGE" -t "$IMAGE" "$ctx" >"$WORK/build-$VERSION.log" 2>&1 \
  || { tail -n 20 "$WORK/build-$VERSION.log" >&2; fail "docker build of $IMAGE failed (full log: $WORK/build-$VERSION.log)"; }
say "built $IMAGE in $(since "$t0") s"
echo "$IMAGE"
