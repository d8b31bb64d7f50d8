#!/usr/bin/env bash
# What a cluster with nothing to do costs: a fresh three-node cluster from scripts/cluster.sh,
# left quiet for a moment, then each broker's CPU (utime + stime from /proc) over a window, as a
# share of one core, and what it wrote to disk (write_bytes from /proc), in KiB/s.
#
#   bash bench/idle.sh                      # one data group, 15 s quiet, 30 s window
#   ROCKRAFT_DATA_GROUPS=3 bash bench/idle.sh
#
# Environment: ROCKRAFT_BIN (default target/release/rockraft, built if missing),
# ROCKRAFT_DATA_GROUPS, QUIET_SECS, WINDOW_SECS, ROCKRAFT_DATA (default a new
# /tmp/rockraft-idle.XXXXXX, removed on exit; the cluster is stopped on exit).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
QUIET_SECS="${QUIET_SECS:-15}"
WINDOW_SECS="${WINDOW_SECS:-30}"
if [ -z "${ROCKRAFT_BIN:-}" ]; then
  (cd "$root" && cargo build --release --locked --quiet -p rockraft --bin rockraft)
  ROCKRAFT_BIN="$root/target/release/rockraft"
fi
export ROCKRAFT_BIN
# shellcheck source=bench/data_dir.sh
source "$root/bench/data_dir.sh"
bench_data_dir idle
bash "$root/scripts/cluster.sh" start > /dev/null
sleep "$QUIET_SECS"

ticks() { awk '{ print $14 + $15 }' "/proc/$(cat "$ROCKRAFT_DATA/node$1/pid")/stat"; }
written() { awk '/^write_bytes/ { print $2 }' "/proc/$(cat "$ROCKRAFT_DATA/node$1/pid")/io"; }
declare -A before before_written
for n in 1 2 3; do before[$n]=$(ticks "$n"); before_written[$n]=$(written "$n"); done
sleep "$WINDOW_SECS"
hz=$(getconf CLK_TCK)
line="data groups ${ROCKRAFT_DATA_GROUPS:-1}, CPU per node over ${WINDOW_SECS} s:"
writes="written per node:"
for n in 1 2 3; do
  line="$line $(awk -v a="${before[$n]}" -v b="$(ticks "$n")" -v hz="$hz" -v w="$WINDOW_SECS" \
    'BEGIN { printf "%.2f%%", (b - a) * 100 / hz / w }')"
  writes="$writes $(awk -v a="${before_written[$n]}" -v b="$(written "$n")" -v w="$WINDOW_SECS" \
    'BEGIN { printf "%.0f KiB/s", (b - a) / 1024 / w }')"
done
echo "$line; $writes"
