#!/usr/bin/env bash
# Builds the pod sandbox ("pause") image of the test node: pause.go compiled static, packed as a one-layer image
# in `docker save` format, so `ctr images import` takes it without a registry. Cached by a digest of its inputs.
#   bash e2e/node/build.sh    the last lines are FLOODWAY_PAUSE_IMAGE=<ref> and FLOODWAY_PAUSE_TAR=<path>
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
die() { echo "e2e/node/build.sh: error: $*" >&2; exit 1; }
go=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
[ -x "$go" ] || die "Go toolchain not found (install Go, or set GO=/path/to/go)"

digest=$(cat "$here/pause.go" "$here/build.sh" <("$go" version) | sha256sum | cut -c1-12)
cache=${FLOODWAY_NODE_CACHE:-$HOME/.cache/floodway/node}
ref=localhost/floodway-pause:$digest
tar=$cache/pause-$digest.tar
if [ ! -f "$tar" ]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  mkdir -p "$work/rootfs" "$cache"
  (cd "$here" && CGO_ENABLED=0 GOFLAGS=-trimpath "$go" build -ldflags="-s -w" -o "$work/rootfs/pause" pause.go)
  tar --numeric-owner --owner=0 --group=0 --mtime=@0 -C "$work/rootfs" -cf "$work/layer.tar" pause
  layer=$(sha256sum "$work/layer.tar" | cut -d' ' -f1)
  printf '{"architecture":"%s","os":"linux","config":{"Entrypoint":["/pause"]},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
    "$("$go" env GOARCH)" "$layer" > "$work/config.json"
  config=$(sha256sum "$work/config.json" | cut -d' ' -f1)
  mv "$work/config.json" "$work/$config.json"
  printf '[{"Config":"%s.json","RepoTags":["%s"],"Layers":["layer.tar"]}]' "$config" "$ref" > "$work/manifest.json"
  tar -C "$work" -cf "$tar.partial" manifest.json "$config.json" layer.tar
  mv "$tar.partial" "$tar"
fi
echo "FLOODWAY_PAUSE_IMAGE=$ref"
echo "FLOODWAY_PAUSE_TAR=$tar"
