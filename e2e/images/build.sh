#!/usr/bin/env bash
# Builds the images the node tier runs, with a local Docker engine, FROM a Debian base bootstrapped here
# (no registry needed; only Debian's and PyPI's package servers):
#   localhost/floodway-base:bookworm    debootstrap --variant=minbase bookworm + python3, python3-venv, CA certs
#   floodway/engine-cpu:<version>       docker/engine.Dockerfile, VARIANT=cpu
#   floodway/operator:<version>         docker/operator.Dockerfile (no torch)
# and `docker save`s each into ~/.cache/floodway/images/<name>-<version>-<inputs digest>.tar. An image whose
# inputs (Dockerfile, lock, sources, base) did not change is not rebuilt: a repeat run takes seconds and needs
# no Docker engine. When none answers, it starts its own dockerd (data under ~/.cache/floodway/docker, so
# BuildKit's layer and pip download caches persist) and stops it at the end.
#   bash e2e/images/build.sh         the last four lines are FLOODWAY_IMAGE_{ENGINE,OPERATOR}[_TAR]=...
# Environment: BASE_IMAGE (another base, e.g. python:3.11-slim from a registry), FLOODWAY_BUILD_CUDA=1 (also
# build floodway/engine:<version>, the GPU variant), FLOODWAY_IMAGES_CACHE, FLOODWAY_DOCKER_ROOT.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
log() { echo "e2e/images: $*" >&2; }
die() { echo "e2e/images/build.sh: error: $*" >&2; exit 1; }

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$repo/pyproject.toml")
[ -n "$version" ] || die "no version in pyproject.toml"
cache=${FLOODWAY_IMAGES_CACHE:-$HOME/.cache/floodway/images}
droot=${FLOODWAY_DOCKER_ROOT:-$HOME/.cache/floodway/docker}
mkdir -p "$cache"

# The local base: what debootstrap installs is its whole recipe, so the list names it.
BASE_SUITE=bookworm
BASE_PACKAGES=python3,python3-venv,ca-certificates
LOCAL_BASE=localhost/floodway-base:$BASE_SUITE
base=${BASE_IMAGE:-$LOCAL_BASE}
base_key=$(echo "$base $BASE_SUITE $BASE_PACKAGES" | sha256sum | cut -c1-12)

# Everything the build context sends (the .dockerignore files allow these paths only).
sources_digest=$(cd "$repo" && find pyproject.toml setup.py README.md requirements.lock engine operator -type f \
  ! -path '*/__pycache__/*' ! -name '*.pyc' | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-12)

# name dockerfile variant: one line per image to build.
images=("engine-cpu docker/engine.Dockerfile cpu" "operator docker/operator.Dockerfile -")
[ "${FLOODWAY_BUILD_CUDA:-0}" = 1 ] && images+=("engine docker/engine.Dockerfile cuda")

digest_of() {  # dockerfile variant
  cat "$repo/$1" "$repo/$1.dockerignore" <(echo "$2 $base_key $sources_digest") | sha256sum | cut -c1-12
}
tar_of() { echo "$cache/$1-$version-$(digest_of "$2" "$3").tar"; }

# --- a Docker engine: the one that answers, else our own dockerd --------------------------------------------
docker_cli=""
pick_client() {  # a client that builds with BuildKit: one with buildx, or one older than 23 (Debian's docker.io)
  local c major
  for c in docker /usr/bin/docker; do
    command -v "$c" > /dev/null || continue
    if "$c" buildx version > /dev/null 2>&1; then docker_cli=$c; return; fi
    major=$("$c" --version | sed -n 's/^Docker version \([0-9]*\)\..*/\1/p')
    if [ -n "$major" ] && [ "$major" -lt 23 ]; then docker_cli=$c; return; fi
  done
  die "no Docker client that can build with BuildKit (install docker-buildx, or Debian's docker.io: bash e2e/node/install-tools.sh)"
}
dockerd_pid=""
stop_dockerd() {
  [ -n "$dockerd_pid" ] || return 0
  kill "$dockerd_pid" 2> /dev/null || true
  for _ in $(seq 100); do kill -0 "$dockerd_pid" 2> /dev/null || return 0; sleep 0.1; done  # poll: 10 s
  log "dockerd $dockerd_pid did not stop within 10 s"
}
trap stop_dockerd EXIT
ensure_docker() {
  pick_client
  "$docker_cli" info > /dev/null 2>&1 && return 0
  local run=/run/floodway-docker
  export DOCKER_HOST=unix://$run/docker.sock
  "$docker_cli" info > /dev/null 2>&1 && return 0
  [ "$(id -u)" = 0 ] || die "no Docker engine answers, and starting one needs root"
  command -v dockerd > /dev/null || die "no Docker engine answers and dockerd is not installed (bash e2e/node/install-tools.sh)"
  mkdir -p "$droot" "$run"
  # Flags for a machine without systemd, a docker0 bridge or CAP_SYS_RESOURCE (such as this project's VMs):
  # builds and runs use --network host, and containers get a nofile limit they need not raise.
  nice -n 10 dockerd --data-root "$droot/data" --exec-root "$run/exec" --pidfile "$run/dockerd.pid" \
    -H "$DOCKER_HOST" --iptables=false --ip-masq=false --bridge=none --default-ulimit nofile=1024:1024 \
    > "$droot/dockerd.log" 2>&1 &
  dockerd_pid=$!
  for _ in $(seq 300); do  # poll with a deadline: 30 s
    "$docker_cli" info > /dev/null 2>&1 && { log "started dockerd (pid $dockerd_pid, data $droot/data)"; return 0; }
    kill -0 "$dockerd_pid" 2> /dev/null || break
    sleep 0.1
  done
  tail -20 "$droot/dockerd.log" >&2
  die "dockerd did not answer within 30 s (log: $droot/dockerd.log)"
}

# --- the base ---------------------------------------------------------------------------------------------------
ensure_base() {
  "$docker_cli" image inspect "$base" > /dev/null 2>&1 && return 0
  [ "$base" = "$LOCAL_BASE" ] || die "base image $base is not in the Docker engine (docker pull it first)"
  local rootfs_tar="$cache/base-$BASE_SUITE-$base_key.tar.gz"
  if [ ! -f "$rootfs_tar" ]; then
    command -v debootstrap > /dev/null || die "debootstrap is not installed (bash e2e/node/install-tools.sh)"
    local dir; dir=$(mktemp -d "$cache/rootfs.XXXXXX")
    log "bootstrapping Debian $BASE_SUITE (minbase + $BASE_PACKAGES)"
    local started=$SECONDS
    nice -n 10 debootstrap --variant=minbase --include="$BASE_PACKAGES" "$BASE_SUITE" "$dir" \
      > "$cache/debootstrap.log" 2>&1 || { tail -20 "$cache/debootstrap.log" >&2; rm -rf "$dir"; die "debootstrap failed"; }
    rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/* "$dir"/usr/share/doc/* "$dir"/usr/share/man/*
    tar -C "$dir" -czf "$rootfs_tar.partial" . && mv "$rootfs_tar.partial" "$rootfs_tar"
    rm -rf "$dir"
    log "base rootfs in $((SECONDS - started)) s: $rootfs_tar"
  fi
  "$docker_cli" import --change 'CMD ["/bin/bash"]' "$rootfs_tar" "$base" > /dev/null
}

# --- build what changed -----------------------------------------------------------------------------------------
ca_bundle=""
for f in "${SSL_CERT_FILE:-}" /etc/ssl/certs/ca-certificates.crt; do [ -n "$f" ] && [ -f "$f" ] && { ca_bundle=$f; break; }; done

build_one() {  # name dockerfile variant tar
  local name=$1 dockerfile=$2 variant=$3 tar=$4 ref="floodway/$1:$version" started=$SECONDS
  local args=(--network host -f "$repo/$dockerfile" --build-arg "BASE_IMAGE=$base" -t "$ref"
              --label "org.opencontainers.image.version=$version" --label "$OUR_LABEL=$name")
  [ "$variant" = - ] || args+=(--build-arg "VARIANT=$variant")
  # The host's CA bundle reaches pip as a build secret: used during the build, never stored in a layer.
  [ -z "$ca_bundle" ] || args+=(--secret "id=ca,src=$ca_bundle")
  log "building $ref from $dockerfile (base $base)"
  DOCKER_BUILDKIT=1 nice -n 10 "$docker_cli" build "${args[@]}" "$repo" >&2 || die "docker build of $ref failed"
  local built=$((SECONDS - started))
  [ "$name" = operator ] || smoke_engine "$ref"  # before the tar is written: a failed image is never cached
  rm -f "$cache/$name-"*.tar "$cache/$name-"*.tar.info  # older inputs: the images of the past are not kept
  "$docker_cli" save -o "$tar.partial" "$ref" && mv "$tar.partial" "$tar"
  local size; size=$("$docker_cli" image inspect -f '{{.Size}}' "$ref")
  echo "$ref build_seconds=$built image_bytes=$size tar_bytes=$(stat -c %s "$tar")" > "$tar.info"
}

# The engine as a pod runs it: uid 1000, read-only root filesystem, writable /cache and /tmp only, no network;
# it must load the built-in model and answer a completion.
smoke_engine() {
  local ref=$1 c=floodway-smoke started=$SECONDS
  local ask="import urllib.request as u; u.urlopen(u.Request('http://127.0.0.1:8000/v1/completions', \
b'{\"model\":\"floodway/tiny-llama\",\"prompt\":\"hi\",\"max_tokens\":4}', {'content-type': 'application/json'}), timeout=30)"
  "$docker_cli" rm -f "$c" > /dev/null 2>&1 || true  # left by an interrupted run
  "$docker_cli" run -d --name "$c" --read-only --tmpfs /tmp --tmpfs /cache:uid=1000,gid=1000 --network none "$ref" \
    floodway engine --model floodway/tiny-llama --host 127.0.0.1 --port 8000 > /dev/null
  for _ in $(seq 240); do  # poll with a deadline: 240 tries, 0.5 s apart
    if "$docker_cli" exec "$c" python -c "$ask" 2> /dev/null; then
      "$docker_cli" rm -f "$c" > /dev/null
      log "smoke: $ref answered a completion on a read-only root filesystem $((SECONDS - started)) s after start"
      return 0
    fi
    "$docker_cli" inspect -f '{{.State.Running}}' "$c" | grep -q true || break
    sleep 0.5
  done
  "$docker_cli" logs "$c" 2>&1 | tail -20 >&2
  "$docker_cli" rm -f "$c" > /dev/null
  die "$ref did not serve on a read-only root filesystem"
}

# What a rebuild leaves behind: the image the tag moved from, and build cache records this run did not use (the
# dependency layer of an older lock). Each is 5 GB for the engine; the wheels cache mount stays.
OUR_LABEL=io.floodway.image
run_started=$(date +%s)
prune() {
  "$docker_cli" image prune -f --filter "label=$OUR_LABEL" > /dev/null
  "$docker_cli" builder prune -f --filter type=regular --filter "until=$(($(date +%s) - run_started + 60))s" > /dev/null 2>&1
}

for spec in "${images[@]}"; do
  read -r name dockerfile variant <<< "$spec"
  tar=$(tar_of "$name" "$dockerfile" "$variant")
  if [ -f "$tar" ] && [ -f "$tar.info" ]; then
    log "cached: $(cat "$tar.info")"
    continue
  fi
  [ -n "$docker_cli" ] || { ensure_docker; ensure_base; }
  build_one "$name" "$dockerfile" "$variant" "$tar"
  log "built:  $(cat "$tar.info")"
done
[ -z "$docker_cli" ] || prune

echo "FLOODWAY_IMAGE_ENGINE=floodway/engine-cpu:$version"
echo "FLOODWAY_IMAGE_ENGINE_TAR=$(tar_of engine-cpu docker/engine.Dockerfile cpu)"
echo "FLOODWAY_IMAGE_OPERATOR=floodway/operator:$version"
echo "FLOODWAY_IMAGE_OPERATOR_TAR=$(tar_of operator docker/operator.Dockerfile -)"
