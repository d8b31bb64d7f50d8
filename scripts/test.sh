#!/usr/bin/env bash
# The whole test suite: unit and property tests, openraft's storage conformance suite.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo test --workspace --locked
