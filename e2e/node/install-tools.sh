#!/usr/bin/env bash
# Installs the Debian packages the node tier and e2e/images/build.sh use: a container runtime and CNI plugins
# for the real node, a Docker engine and debootstrap for the images. Skips what is already installed, so a
# repeat run takes a second; installing needs root (apt-get).
#   bash e2e/node/install-tools.sh
set -euo pipefail
packages=(containerd runc containernetworking-plugins iptables conntrack debootstrap docker.io socat buildah skopeo)

missing=()
for p in "${packages[@]}"; do
  [ "$(dpkg-query -W -f '${db:Status-Status}' "$p" 2> /dev/null)" = installed ] || missing+=("$p")
done
if [ ${#missing[@]} = 0 ]; then
  echo "e2e/node: system packages present (${packages[*]})"
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "e2e/node/install-tools.sh: error: missing Debian packages: ${missing[*]}; installing them needs root:" >&2
  echo "  sudo bash e2e/node/install-tools.sh" >&2
  exit 1
fi
command -v apt-get > /dev/null || { echo "e2e/node/install-tools.sh: error: no apt-get; install ${missing[*]} with your package manager" >&2; exit 1; }
echo "e2e/node: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
