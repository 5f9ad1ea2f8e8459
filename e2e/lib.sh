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
# FLOODWAY_E2E_SMOLLM2=1 also serves the trained SmolLM2-135M-Instruct from a volume: the folder the engine's own
# conversion writes into the host's Floodway cache (converted first if need be; needs the repo's venv: make setup),
# mounted into the cluster's node at NODE_MODEL_DIR by the run script, then a hostPath PV (e2e/manifests/smollm2.yaml).
SMOLLM2=${FLOODWAY_E2E_SMOLLM2:-0}
NODE_MODEL_DIR=/floodway-models/smollm2-135m-instruct

log() { echo "e2e: $*" >&2; }
die() { echo "e2e: error: $*" >&2; exit 1; }

need() {
  for t in "$@"; do command -v "$t" > /dev/null || die "$t is required on PATH (see e2e/README.md)"; done
  docker info > /dev/null 2>&1 || die "no Docker engine: 'docker info' failed; kind and minikube need a running Docker engine"
}

# The same Dockerfiles as e2e/images/build.sh, FROM python:3.11-slim (BASE_IMAGE: another CPython 3.11 base).
smollm2_dir() {
  "$REPO/.venv/bin/python" -P -c \
    'from floodway.engine.models import builtin, smollm2; print(builtin.resolve_model(smollm2.NAME))'
}

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
  if [ "$SMOLLM2" = 1 ]; then
    sed "s|NAMESPACE|$NS|g" "$REPO/e2e/manifests/smollm2.yaml" | kubectl apply -f -
    kubectl -n "$NS" wait --for=condition=Ready inferenceservice/smollm2 --timeout="$READY_TIMEOUT" \
      || { kubectl -n "$NS" describe inferenceservice/smollm2; kubectl -n "$NS" get pods -o wide; die "smollm2 not Ready"; }
  fi
  kubectl -n "$NS" get inferenceservices
}

# Leaves a port-forward to a gateway (its Service is named like the InferenceService; default chat) running; the
# caller's cleanup stops it.
PORT_FORWARD_PIDS=()
forward_gateway() {  # [service] [local port]
  local svc=${1:-chat} port=${2:-$LOCAL_PORT}
  kubectl -n "$NS" port-forward "svc/$svc" "$port:80" > /dev/null 2>&1 &
  PORT_FORWARD_PIDS+=($!)
  for _ in $(seq 60); do  # poll with a deadline: 60 tries of 1 s
    curl -sf "http://127.0.0.1:$port/health" > /dev/null && return 0
    sleep 1
  done
  die "the $svc gateway did not answer on port $port"
}

ask_smollm2() {
  [ "$SMOLLM2" = 1 ] || return 0
  local port=$((LOCAL_PORT + 1)) answer
  forward_gateway smollm2 "$port"
  answer=$(curl -sf "http://127.0.0.1:$port/v1/chat/completions" -H 'content-type: application/json' -d \
    '{"model":"smollm2-135m-instruct","messages":[{"role":"user","content":"What is the capital of France?"}],
      "max_tokens":32,"temperature":0}') || die "the smollm2 gateway refused the chat request"
  grep -q Paris <<< "$answer" || die "SmolLM2 from the volume did not name Paris: $answer"
  log "SmolLM2 from the volume answered: $answer"
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

stop_port_forward() { for pid in "${PORT_FORWARD_PIDS[@]}"; do kill "$pid" 2> /dev/null || true; done; }
