#!/usr/bin/env bash
# End-to-end on minikube (docker driver): real images, real pods (CPU, the built-in model). Needs a Docker
# engine, minikube, kubectl, helm and python3. Deletes its profile at the end unless FLOODWAY_E2E_KEEP=1.
#   bash e2e/minikube/run.sh
# shellcheck source=e2e/lib.sh
source "$(dirname "$0")/../lib.sh"
PROFILE=${FLOODWAY_E2E_CLUSTER:-floodway-e2e}

cleanup() {
  stop_port_forward
  [ "${FLOODWAY_E2E_KEEP:-0}" = 1 ] || minikube delete --profile "$PROFILE" > /dev/null 2>&1 || true
}
trap cleanup EXIT

need docker minikube kubectl helm python3 curl
build_images
mount=()
[ "$SMOLLM2" = 0 ] || mount=(--mount --mount-string "$(smollm2_dir):$NODE_MODEL_DIR")  # for a hostPath PV
minikube start --profile "$PROFILE" --driver=docker --cpus=4 --memory=8g --wait=all "${mount[@]}"
kubectl config use-context "$PROFILE"
minikube image load --profile "$PROFILE" "$ENGINE_IMAGE"
minikube image load --profile "$PROFILE" "$OPERATOR_IMAGE"
install_chart
apply_services
forward_gateway
drive_traffic
ask_smollm2
log "minikube e2e passed"
