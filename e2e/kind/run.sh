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
kind_config=()
if [ "$SMOLLM2" = 1 ]; then  # the converted SmolLM2 folder, mounted into the node for a hostPath PV
  kind_config=(--config "$(mktemp)")
  printf 'kind: Cluster\napiVersion: kind.x-k8s.io/v1alpha4\nnodes:\n- role: control-plane\n  extraMounts:\n  - %s\n' \
    "{hostPath: $(smollm2_dir), containerPath: $NODE_MODEL_DIR, readOnly: true}" > "${kind_config[1]}"
fi
if kind get clusters 2> /dev/null | grep -qx "$CLUSTER"; then
  [ "$SMOLLM2" = 0 ] || docker exec "$CLUSTER-control-plane" test -d "$NODE_MODEL_DIR" \
    || die "cluster $CLUSTER exists without $NODE_MODEL_DIR: delete it (kind delete cluster --name $CLUSTER)"
else
  kind create cluster --name "$CLUSTER" "${kind_config[@]}" --wait 180s
fi
kubectl config use-context "kind-$CLUSTER"
kind load docker-image --name "$CLUSTER" "$ENGINE_IMAGE" "$OPERATOR_IMAGE"
install_chart
apply_services
forward_gateway
drive_traffic
ask_smollm2
log "kind e2e passed"
