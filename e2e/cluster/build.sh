#!/usr/bin/env bash
# Builds the control plane that tests/cluster runs (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl, kwok, helm) and the real node's kubelet and kube-proxy (tests/node) from the Go
# modules pinned in go.mod here (Go from PATH,
# /usr/local/go or $GO), and writes bin/kwok.yaml: the Stages (node and pod lifecycles) that kwok runs.
# Binaries are cached by version under ~/.cache/floodway/cluster/<version>/bin: a repeat run takes seconds.
#   bash e2e/cluster/build.sh          build if needed; the last line is FLOODWAY_CLUSTER_BIN=<folder>
#   bash e2e/cluster/build.sh --where  print that line if the binaries are built, else exit 3 (builds nothing)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
die() { echo "e2e/cluster/build.sh: error: $*" >&2; exit 1; }

mode=build
case "${1:-}" in
  "") ;;
  --where) mode=where ;;
  *) die "unknown argument '$1' (use no argument, or --where)" ;;
esac

# The version names the pins: the kubernetes release plus a digest of go.mod and go.sum, so any pin change
# builds into a new folder and an old one is never reused by mistake.
k8s=$(awk '$1 == "k8s.io/kubernetes" {print $2}' "$here/go.mod" | head -1)
[ -n "$k8s" ] || die "no k8s.io/kubernetes requirement in $here/go.mod"
digest=$(cat "$here/go.mod" "$here/go.sum" | sha256sum | cut -c1-12)
cache=${FLOODWAY_CLUSTER_CACHE:-$HOME/.cache/floodway/cluster}
dest="$cache/$k8s-$digest"
bin="$dest/bin"
tools=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok helm kubelet kube-proxy)

built() {
  [ -f "$dest/complete" ] && [ -f "$bin/kwok.yaml" ] || return 1
  for t in "${tools[@]}"; do [ -x "$bin/$t" ] || return 1; done
}

if built; then
  [ "$mode" = where ] || echo "e2e/cluster: cached control plane $k8s-$digest"
  echo "FLOODWAY_CLUSTER_BIN=$bin"
  exit 0
fi
if [ "$mode" = where ]; then
  echo "control plane $k8s-$digest is not built: run bash e2e/cluster/build.sh" >&2
  exit 3
fi

go=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
[ -x "$go" ] || die "Go toolchain not found (install Go 1.26, or set GO=/path/to/go)"

# kwok's own "fast" lifecycle, as kwokctl runs it: nodes become Ready and renew their Lease; pods become
# Running and Ready, jobs complete, deleted pods go away.
write_kwok_stages() {
  local kwok_dir stage
  kwok_dir=$(cd "$here" && "$go" list -m -f '{{.Dir}}' sigs.k8s.io/kwok) || die "cannot locate the kwok module"
  stage=$kwok_dir/kustomize/stage
  for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
           pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
    [ -f "$stage/$f" ] || die "kwok stage $f not found in $kwok_dir"
    echo "---"; cat "$stage/$f"
  done > "$1"
}

rm -rf "$bin.partial" && mkdir -p "$bin.partial"
started=$(date +%s)
echo "e2e/cluster: building ${tools[*]} for kubernetes $k8s (cold: about half an hour on 2 cores; cached after)"
pkgs=(
  ./etcd
  k8s.io/kubernetes/cmd/kube-apiserver
  k8s.io/kubernetes/cmd/kube-controller-manager
  k8s.io/kubernetes/cmd/kube-scheduler
  k8s.io/kubernetes/cmd/kubectl
  k8s.io/kubernetes/cmd/kubelet
  k8s.io/kubernetes/cmd/kube-proxy
  sigs.k8s.io/kwok/cmd/kwok
  helm.sh/helm/v3/cmd/helm
)
# One go build for all of them: they share most packages, and the build cache compiles each once.
(cd "$here" && CGO_ENABLED=0 GOFLAGS=-trimpath nice -n 10 "$go" build -ldflags="-s -w" -o "$bin.partial/" "${pkgs[@]}") \
  || die "go build failed (see the output above)"
write_kwok_stages "$bin.partial/kwok.yaml"
rm -rf "$bin" && mv "$bin.partial" "$bin"
echo "$(( $(date +%s) - started ))" > "$dest/build_seconds"
touch "$dest/complete"
echo "e2e/cluster: built in $(cat "$dest/build_seconds") s into $bin"
echo "FLOODWAY_CLUSTER_BIN=$bin"
