#!/usr/bin/env bash
# The whole test suite: unit and property tests, openraft's storage conformance suite, and the
# cluster tests (real nodes, the official RocketMQ Rust client, faults).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# Tests build with the crash points compiled in (the `failpoints` feature; release builds never
# have them): the crash-point suites arm them, every other test leaves them off.
features=(--features rockraft/failpoints)
# The cluster tests start real node processes: build the binary they run first.
cargo build --locked -p rockraft --bin rockraft "${features[@]}"
# The run command itself, end to end, on that same build (one build for the whole suite: a
# release build would take as long again; `scripts/cluster.sh start` makes that one).
ROCKRAFT_BIN="${CARGO_TARGET_DIR:-$PWD/target}/debug/rockraft" scripts/smoke.sh
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
cargo test --workspace --locked --exclude rockraft-cluster-tests "${features[@]}" 2>&1 | tee "$log"
# The plugins' own unit tests (built-in ones and the examples), natively.
# They share one target directory of their own (so their common crates build once).
plugin_target="${CARGO_TARGET_DIR:-$PWD/target}/plugin-workspaces"
for dir in plugins examples/plugins/json-field-filter examples/plugins/order-checker; do
  (cd "$dir" && CARGO_TARGET_DIR="$plugin_target" cargo test --locked) 2>&1 | tee -a "$log"
done
# One cluster at a time: each runs three nodes, and the machine may have two cores. Three suites
# run once, below, on three data groups: the crash points of real nodes (crash_points.rs), the
# nemesis and the official Python client. Each group there runs the same code as the one of a
# one-group cluster, beside the metadata group likewise, and the Python client follows routes
# that name several leaders instead of one.
cargo test --locked -p rockraft-cluster-tests "${features[@]}" -- --test-threads=1 \
  --skip crashes_at_every_crash_point_and_at_random_converge_without_losing_acknowledged_sends \
  --skip under_faults_no_acknowledged_message_is_lost_and_every_rule_holds --skip python_ 2>&1 | tee -a "$log"
# The official clients, plugins, crash points and the nemesis again, on clusters of three data
# groups with every topic's queues spread over them.
ROCKRAFT_TEST_DATA_GROUPS=3 cargo test --locked --no-fail-fast -p rockraft-cluster-tests "${features[@]}" \
  --test consume --test consume_protocol --test crash_points --test produce --test delay_transaction --test plugins \
  --test observability --test protocol --test limits --test node_client --test python_client \
  --test nemesis --test clock_skew --test retention -- --test-threads=1 2>&1 | tee -a "$log"
# One closing line for the whole suite.
awk '/^test result:/ { p += $4; f += $6 } END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
