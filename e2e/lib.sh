# shellcheck shell=bash
# Steps shared by e2e/kind/run.sh and e2e/minikube/run.sh (sourced, not run): build the images, install the
# chart, apply InferenceServices on the built-in CPU model, wait for Ready, send requests through the gateway,
# drive a burst and check scale-up and overflow. Needs docker, kubectl, helm and python3 on PATH.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
NS=${FLOODWAY_E2E_NAMESPACE:-floodway-e2e}
TAG=${FLOODWAY_E2E_TAG:-e2e}
ENGINE_IMAGE=floodway/engine-cpu:$TAG
OPERATOR_IMAGE=floodway/operator:$TAG
LOCAL_PORT=${FLOODWAY_E2E_PORT:-18080}
READY_TIMEOUT=${FLOODWAY_E2E_READY_TIMEOUT:-15m}

log() { echo "e2e: $*" >&2; }
die() { echo "e2e: error: $*" >&2; exit 1; }

need() {
  for t in "$@"; do command -v "$t" > /dev/null || die "$t is required on PATH (see e2e/README.md)"; done
  docker info > /dev/null 2>&1 || die "no Docker engine: 'docker info' failed; kind and minikube need a running Docker engine"
}

# The same Dockerfiles as e2e/images/build.sh, FROM python:3.11-slim (BASE_IMAGE: another CPython 3.11 base).
build_images() {
  log "building $ENGINE_IMAGE and $OPERATOR_IMAGE"
  local base=(--build-arg "BASE_IMAGE=${BASE_IMAGE:-python:3.11-slim}")
  DOCKER_BUILDKIT=1 docker build "${base[@]}" --build-arg VARIANT=cpu -f "$REPO/docker/engine.Dockerfile" \
    -t "$ENGINE_IMAGE" "$REPO"
  DOCKER_BUILDKIT=1 docker build "${base[@]}" -f "$REPO/docker/operator.Dockerfile" -t "$OPERATOR_IMAGE" "$REPO"
}

install_chart() {
  log "helm install charts/floodway (managing namespace $NS)"
  kubectl create namespace "$NS" --dry-run=client -o yaml | kubectl apply -f -  # the chart puts a Role there
  helm upgrade --install floodway "$REPO/charts/floodway" --namespace floodway-system --create-namespace \
    --set "watchNamespaces={$NS}" \
    --set "image.repository=${OPERATOR_IMAGE%:*}" --set "image.tag=$TAG" \
    --set "engineImage.repository=${ENGINE_IMAGE%:*}" --set "engineImage.tag=$TAG" --wait --timeout 5m
}

apply_services() {
  log "applying InferenceServices in namespace $NS"
  kubectl create namespace "$NS" --dry-run=client -o yaml | kubectl apply -f -
  kubectl -n "$NS" create secret generic overflow-key --from-literal=api-key=e2e --dry-run=client -o yaml \
    | kubectl apply -f -
  sed "s|NAMESPACE|$NS|g" "$REPO/e2e/manifests/services.yaml" | kubectl -n "$NS" apply -f -
  for svc in overflow-target chat; do
    kubectl -n "$NS" wait --for=condition=Ready "inferenceservice/$svc" --timeout="$READY_TIMEOUT" \
      || { kubectl -n "$NS" describe "inferenceservice/$svc"; kubectl -n "$NS" get pods -o wide; die "$svc not Ready"; }
  done
  kubectl -n "$NS" get inferenceservices
}

# Leaves a port-forward to the chat gateway (its Service is named like the InferenceService) running; the
# caller's cleanup stops it.
PORT_FORWARD_PID=""
forward_gateway() {
  kubectl -n "$NS" port-forward svc/chat "$LOCAL_PORT:80" > /dev/null 2>&1 &
  PORT_FORWARD_PID=$!
  for _ in $(seq 60); do  # poll with a deadline: 60 tries of 1 s
    curl -sf "http://127.0.0.1:$LOCAL_PORT/health" > /dev/null && return 0
    sleep 1
  done
  die "the chat gateway did not answer on port $LOCAL_PORT"
}

desired_replicas() { kubectl -n "$NS" get inferenceservice chat -o 'jsonpath={.status.desiredReplicas}'; }

drive_traffic() {
  log "a few requests through the gateway"
  python3 "$REPO/e2e/burst.py" --url "http://127.0.0.1:$LOCAL_PORT" --model chat --requests 4 --concurrency 1
  local before; before=$(desired_replicas)
  log "a burst: expect overflow while local capacity is short, and a scale-up (desired replicas now $before)"
  python3 "$REPO/e2e/burst.py" --url "http://127.0.0.1:$LOCAL_PORT" --model chat --requests 96 --concurrency 48 \
    --max-tokens 128 --expect-overflow
  for _ in $(seq 120); do  # poll with a deadline: 120 tries of 1 s
    [ "$(desired_replicas)" -gt "${before:-1}" ] && break
    sleep 1
  done
  [ "$(desired_replicas)" -gt "${before:-1}" ] || die "no scale-up after the burst (desired replicas $(desired_replicas))"
  kubectl -n "$NS" get events --field-selector involvedObject.name=chat
  log "scaled up to $(desired_replicas) replicas"
}

stop_port_forward() { [ -z "$PORT_FORWARD_PID" ] || kill "$PORT_FORWARD_PID" 2> /dev/null || true; }
