#!/usr/bin/env bash
# The whole test suite: unit and property tests, openraft's storage conformance suite, and the
# cluster tests (real nodes, the official RocketMQ Rust client, faults).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# The cluster tests start real node processes: build the binary they run first.
cargo build --locked -p rockraft --bin rockraft
cargo test --workspace --locked --exclude rockraft-cluster-tests
# One cluster at a time: each runs three nodes, and the machine may have two cores.
cargo test --locked -p rockraft-cluster-tests -- --test-threads=1
