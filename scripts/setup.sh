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
