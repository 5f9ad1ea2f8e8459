#!/usr/bin/env bash
# End-to-end on kind: real images, real pods (CPU, the built-in model). Needs a Docker engine, kind, kubectl,
# helm and python3. Deletes its cluster at the end unless FLOODWAY_E2E_KEEP=1.
#   bash e2e/kind/run.sh
# shellcheck source=e2e/lib.sh
source "$(dirname "$0")/../lib.sh"
CLUSTER=${FLOODWAY_E2E_CLUSTER:-floodway-e2e}

cleanup() {
  stop_port_forward
  [ "${FLOODWAY_E2E_KEEP:-0}" = 1 ] || kind delete cluster --name "$CLUSTER" > /dev/null 2>&1 || true
}
trap cleanup EXIT

need docker kind kubectl helm python3 curl
build_images
kind get clusters 2> /dev/null | grep -qx "$CLUSTER" || kind create cluster --name "$CLUSTER" --wait 180s
kubectl config use-context "kind-$CLUSTER"
kind load docker-image --name "$CLUSTER" "$ENGINE_IMAGE" "$OPERATOR_IMAGE"
install_chart
apply_services
forward_gateway
drive_traffic
log "kind e2e passed"
