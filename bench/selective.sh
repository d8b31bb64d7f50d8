#!/usr/bin/env bash
# Selective consumption: a SQL92 subscription matching 1 in EVERY messages of an N-message backlog,
# against an unfiltered consumer of a topic holding only that many messages. Prints both rates and
# the leader's CPU per scanned message (utime + stime of node 1 from /proc, node 1 leads a fresh
# cluster).
#
#   bash bench/selective.sh                 # N=1000000 EVERY=100
#   N=300000 bash bench/selective.sh
#
# Environment: ROCKRAFT_BIN (default target/release/rockraft, built if missing), N, EVERY,
# ROCKRAFT_DATA (default a new /tmp/rockraft-selective.XXXXXX; removed on exit;
# the cluster is stopped on exit).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
N="${N:-1000000}"
EVERY="${EVERY:-100}"
M=$((N / EVERY))
if [ -z "${ROCKRAFT_BIN:-}" ]; then
  (cd "$root" && cargo build --release --locked --quiet -p rockraft --bin rockraft)
  ROCKRAFT_BIN="$root/target/release/rockraft"
fi
B="$ROCKRAFT_BIN"
# shellcheck source=bench/data_dir.sh
source "$root/bench/data_dir.sh"
bench_data_dir selective
export ROCKRAFT_BIN
bash "$root/scripts/cluster.sh" start > /dev/null
"$B" topic create S --queues 8 > /dev/null
"$B" topic create M --queues 8 > /dev/null
"$B" group create G > /dev/null
"$B" group create H > /dev/null
"$B" bench produce --topic S --messages "$N" --batch 16 --concurrency 64 --mark-every "$EVERY" | sed -n 1p
"$B" bench produce --topic M --messages "$M" --batch 16 --concurrency 64 --mark-every 1 | sed -n 1p
leader_ticks() { awk '{print $14 + $15}' "/proc/$(cat "$ROCKRAFT_DATA/node1/pid")/stat"; }
hz=$(getconf CLK_TCK)
t0=$(leader_ticks)
rate() { sed -n 's/.* s: \([0-9]*\) messages\/s.*/\1/p'; }
echo "unfiltered, topic of $M messages:"
unfiltered=$("$B" bench consume --topic M --group H --messages "$M" --concurrency 16 --batch 32 | sed -n 1p)
echo "$unfiltered"
t1=$(leader_ticks)
echo "filtered, 1 in $EVERY of $N:"
filtered=$("$B" bench consume --topic S --group G --sql "bench_mark = '1'" --messages "$M" --concurrency 16 --batch 32 | sed -n 1p)
echo "$filtered"
t2=$(leader_ticks)
u=$(rate <<< "$unfiltered")
f=$(rate <<< "$filtered")
if [ -n "$u" ] && [ -n "$f" ] && [ "$u" -gt 0 ]; then
  echo "filtered / unfiltered: $((f * 100 / u)) % (goal: 50 % or more)"
fi
awk -v a=$((t1 - t0)) -v b=$((t2 - t1)) -v m="$M" -v n="$N" -v hz="$hz" 'BEGIN {
  printf "leader CPU: %.2f us per message unfiltered, %.2f us per scanned message filtered\n", a * 1e6 / hz / m, b * 1e6 / hz / n }'
