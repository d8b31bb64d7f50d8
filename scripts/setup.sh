#!/usr/bin/env bash
# Installs what building and testing RockRaft needs on a fresh machine that has only the Rust
# toolchain, Python 3.11 and Node 20. Safe to run again: it skips what is already there.
set -euo pipefail

have_component() { rustup component list --installed 2>/dev/null | grep -q "^$1"; }
for component in rustfmt clippy; do
  if ! have_component "$component"; then
    rustup component add "$component"
  fi
done

# Plugins (built-in and examples) are built for WebAssembly; the node's build embeds the
# built-in ones (node/build.rs also adds the target itself if it is missing).
if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-unknown-unknown; then
  rustup target add wasm32-unknown-unknown
fi

# The official Python client, for the cluster tests that use it, in its own virtualenv.
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="${CARGO_TARGET_DIR:-$root/target}/python"
requirements="$root/cluster-tests/python/requirements.txt"
if ! [ -x "$venv/bin/python" ] || ! cmp -s "$requirements" "$venv/requirements.txt"; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$requirements"
  cp "$requirements" "$venv/requirements.txt"
fi

# The RocketMQ 4.x Remoting client (PyPI `rocketmq`), in a virtualenv of its own: it imports
# under the same name as the 5.x client.
remoting_venv="${CARGO_TARGET_DIR:-$root/target}/python-remoting"
remoting_requirements="$root/cluster-tests/python/remoting/requirements.txt"
if ! [ -x "$remoting_venv/bin/python" ] || ! cmp -s "$remoting_requirements" "$remoting_venv/requirements.txt"; then
  python3 -m venv "$remoting_venv"
  "$remoting_venv/bin/pip" install --quiet --disable-pip-version-check -r "$remoting_requirements"
  cp "$remoting_requirements" "$remoting_venv/requirements.txt"
fi

# The official Node.js client, likewise (its scenarios live in cluster-tests/node/).
node_dir="${CARGO_TARGET_DIR:-$root/target}/node"
package="$root/cluster-tests/node/package.json"
if ! [ -d "$node_dir/node_modules/rocketmq-client-nodejs" ] || ! cmp -s "$package" "$node_dir/package.json"; then
  mkdir -p "$node_dir"
  cp "$package" "$node_dir/package.json"
  npm install --prefix "$node_dir" --no-audit --no-fund --silent
fi

# The fault suite cuts links between nodes with network namespaces and nftables, and the status
# page is checked in a headless browser (as root; where that is refused, those tests say so and
# skip that part).
packages=()
if ! command -v nft >/dev/null || ! command -v ip >/dev/null; then packages+=(nftables iproute2); fi
if ! command -v chromium >/dev/null; then packages+=(chromium); fi
if [ ${#packages[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
  else
    echo "setup: ${packages[*]} missing and cannot be installed here: partitions and the browser check will be skipped" >&2
  fi
fi
